"""Fixtures and helpers of the `inferchaos gameday --env kind|cluster` tests against the fake cluster.

The Kubernetes layer is real end to end (driver, faults, k8s probe, official client, fake API
server with its control plane); Ray, vLLM and the canary answer from the runner's fakes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from inferchaos.cli.main import main
from inferchaos.run.preflight import PreflightReport
from inferchaos.run.probe_set import k8s_probe_of
from inferchaos.run.suites import SUITES
from inferchaos.steady_state.canary import CanaryPace
from inferchaos.steady_state.probe_base import Probe
from tests.fakes.apiserver import FakeApiServer, FakeCluster
from tests.fakes.k8s_scenario import EXPERIMENTS, ClusterWithFakeRay, faked_layers_config
from tests.fakes.scripted_world import FakeProbeFactory, World

K8S_SUITE = SUITES["k8s"]


def gameday_cli(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> int:
    """Run `inferchaos ARGV` in-process; its exit code."""
    monkeypatch.setattr("sys.argv", ["inferchaos", *argv])
    with pytest.raises(SystemExit) as done:
        main()
    return int(done.value.code or 0)


def cluster_gameday(config: Path, suite: Path, out: Path, *extra: str) -> list[str]:
    """The arguments of `inferchaos gameday` on the cluster of ``config``, ``suite`` into ``out``."""
    return [
        "gameday",
        "--env",
        "cluster",
        "--config",
        str(config),
        "--suite",
        str(suite),
        "--out",
        str(out),
        *extra,
    ]


@pytest.fixture
def fake_world(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The CLI builds the real driver with Ray and vLLM faked, and the runner's fake probes plus
    the k8s probe; the faults each preflight was asked to check, one list per preflight."""
    fakes = FakeProbeFactory(World())
    asked: list[list[str]] = []

    def probes(environment: Any, pace: CanaryPace, named: frozenset[str]) -> tuple[list[Probe], Any]:
        built, canary = fakes(environment, pace, named)
        return [*built, k8s_probe_of(environment)], canary

    def passed_preflight(environment: Any, faults: Any = None) -> PreflightReport:
        asked.append(list(faults or []))
        return PreflightReport(environment.name, ())

    monkeypatch.setattr("inferchaos.cli.environment.K8sEnvironment", ClusterWithFakeRay)
    monkeypatch.setattr("inferchaos.cli.run_command.build_probes", probes)
    # Ray and vLLM do not answer over HTTP here, so the preflight (test_k8s_preflight.py runs it
    # against every layer) is taken as passed; what it was asked to check is kept.
    monkeypatch.setattr("inferchaos.cli.environment.ensure_preflight_passes", passed_preflight)
    return asked


@pytest.fixture
def config(fake_server: FakeApiServer, world_cluster: tuple[FakeCluster, Any], tmp_path: Path) -> Path:
    """The cluster config of the fake cluster (its allow-list: the kind namespace and GPU pool)."""
    _, runtime = world_cluster
    path, _ = faked_layers_config(tmp_path, "cluster", fake_server.url, runtime)
    return path


@pytest.fixture
def quiet_cluster(
    fake_server: FakeApiServer, world_cluster: tuple[FakeCluster, Any]
) -> Iterator[FakeCluster]:
    """The seeded cluster with its request log cleared: what a test's command sent, and only that."""
    cluster, _ = world_cluster
    with cluster.lock:
        cluster.requests.clear()
    yield cluster


def cluster_copies(folder: Path, edits: dict[str, Callable[[dict[str, Any]], None]] | None = None) -> Path:
    """The k8s suite copied for a cluster (docs/clusters.md: environment.name: cluster), with short windows.

    ``edits`` maps an experiment name to a function changing its mapping before it is written.
    """
    folder.mkdir(parents=True, exist_ok=True)
    for name in K8S_SUITE:
        data = yaml.safe_load((EXPERIMENTS / f"{name}.yaml").read_text())
        data["environment"] = {"name": "cluster"}
        data["baseline"] = {"duration_s": 1.5}
        data["method"][0]["pauses"] = {"after": 4}
        if edits and name in edits:
            edits[name](data)
        (folder / f"{name}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return folder
