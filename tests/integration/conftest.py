"""One real local environment (Ray + vLLM) per test session, shared by every integration test.

It runs in a private INFERCHAOS_HOME on port slot 1, so a developer's own environment
(slot 0, port 8000) can keep running beside the tests.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from inferchaos.environments.local.config import LocalEnvConfig
from inferchaos.environments.local.env import LocalEnvironment
from inferchaos.environments.local.network import plan_of
from inferchaos.environments.local.ray_cluster import prometheus_port, redis_port
from inferchaos.primitives.netns import host_names
from inferchaos.primitives.processes import free_port, port_is_free

TEST_REPLICA_BASE_PORT = 8300


def _order(item: pytest.Item) -> int:
    if item.get_closest_marker("env_teardown") is not None:
        return 2
    return 1 if item.get_closest_marker("gcs_ft") is not None else 0


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that take the shared environment down run after every test that needs it up; the GCS
    tests, which start it again with --gcs-ft, run just before those."""
    items.sort(key=_order)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "env_teardown: takes the shared environment down; runs last")
    config.addinivalue_line(
        "markers", "gcs_ft: runs on the shared environment started again with --gcs-ft; before env_teardown"
    )


@pytest.fixture(scope="session", autouse=True)
def cpu_hog(request: pytest.FixtureRequest) -> Iterator[list[int]]:
    """``--cpu-hog N`` busy processes for the session, each ended by its own process group.

    Thresholds relative to each run's own baseline are meant to hold on a slower or shared
    machine; this is how the suite proves it (issue: one other core busy).
    """
    count: int = request.config.getoption("--cpu-hog")
    hogs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
        for _ in range(count)
    ]
    if hogs:
        print(f"\ncpu hog: {count} busy process(es), pids {[h.pid for h in hogs]}")
    try:
        yield [h.pid for h in hogs]
    finally:
        for hog in hogs:
            os.killpg(hog.pid, signal.SIGKILL)
            hog.wait()


@pytest.fixture(scope="session")
def integration_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("inferchaos-home")
    previous = os.environ.get("INFERCHAOS_HOME")
    os.environ["INFERCHAOS_HOME"] = str(home)
    yield home
    if previous is None:
        os.environ.pop("INFERCHAOS_HOME", None)
    else:
        os.environ["INFERCHAOS_HOME"] = previous


@pytest.fixture(scope="session")
def env_config() -> LocalEnvConfig:
    return LocalEnvConfig(port_slot=1, front_door_port=free_port(), replica_base_port=TEST_REPLICA_BASE_PORT)


@pytest.fixture(scope="session")
def local_env(integration_home: Path, env_config: LocalEnvConfig) -> Iterator[LocalEnvironment]:
    """The shared real environment, up once; always taken down at the end of the session."""
    environment = LocalEnvironment(env_config, state_dir=integration_home / "env" / "local", progress=print)
    environment.up()
    states = [environment.load_state()]
    try:
        yield environment
    finally:
        # The GCS tests start the environment again, under another id, in the same folder.
        if environment.is_recorded():
            states.append(environment.load_state())
        environment.down()
        plans = [plan_of(s.env_id, s.network) for s in states if s.network is not None]
        left = [name for name in host_names() for plan in plans if plan is not None and plan.owns(name)]
        assert left == [], f"env down left the environment's namespaces and links: {left}"
        # A Redis or Prometheus left here blocks the next session's --gcs-ft or --prometheus start.
        for port in (redis_port(env_config.port_slot), prometheus_port(env_config.port_slot)):
            assert port_is_free(port), f"env down left a server listening on 127.0.0.1:{port}"
