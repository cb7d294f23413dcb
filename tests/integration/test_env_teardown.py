"""`env down` leaves nothing behind, and a failed `env up` tears itself down."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from inferchaos.environments.local.config import LocalEnvConfig
from inferchaos.environments.local.env import LocalEnvironment
from inferchaos.errors import EnvironmentStartError
from inferchaos.primitives.processes import pid_alive, processes_with_marker

pytestmark = [pytest.mark.integration, pytest.mark.env_teardown]


def _processes_under(path: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if any(path in part for part in proc.info["cmdline"] or []):
            found.append(proc)
    return found


def test_env_down_from_the_cli_leaves_no_process(local_env: LocalEnvironment, integration_home: Path) -> None:
    import ray

    state = local_env.load_state()
    assert processes_with_marker(state.env_id), "the environment should be running before down"
    # This process's Ray driver must leave first: a driver whose GCS vanishes under it ends its
    # own process once it gives up reconnecting (measured: the test session died silently).
    if ray.is_initialized():
        ray.shutdown()
    result = subprocess.run(
        [sys.executable, "-m", "inferchaos.cli.main", "env", "down"],
        env={**os.environ, "INFERCHAOS_HOME": str(integration_home)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert processes_with_marker(state.env_id) == []
    # A --gcs-ft environment's Redis retitles itself over its marker: it is ended by its pid.
    # Started by this test process (the fixture's env up), it stays a zombie until reaped here.
    assert state.redis is None or not pid_alive(state.redis.pid)
    assert _processes_under(state.ray_temp_dir) == []
    assert not local_env.is_recorded()
    assert not Path(state.ray_temp_dir).exists()


def test_failed_replica_start_is_reported_and_torn_down(
    env_config: LocalEnvConfig, integration_home: Path
) -> None:
    # --max-num-seqs 0 makes every vLLM server exit during start-up.
    broken = replace(env_config, replicas=1, workers=1, vllm_extra_args=("--max-num-seqs", "0"))
    environment = LocalEnvironment(broken, state_dir=integration_home / "env" / "broken")
    # The exit code is read from the node launcher's record: the server is the launcher's child.
    with pytest.raises(
        EnvironmentStartError, match=r"replica-0 failed to start: vLLM exited with code [1-9]"
    ):
        environment.up()
    assert not environment.is_recorded()
    assert environment.env_id and processes_with_marker(environment.env_id) == []
