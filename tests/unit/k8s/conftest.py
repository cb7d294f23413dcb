"""Fixtures of the `inferchaos gameday --env kind|cluster` tests (test_k8s_gameday*.py): the CLI
against the fake cluster, Ray and vLLM answering from the runner's fakes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from inferchaos.run.preflight import PreflightReport
from inferchaos.run.probe_set import k8s_probe_of
from inferchaos.steady_state.canary import CanaryPace
from inferchaos.steady_state.probe_base import Probe
from tests.fakes.apiserver import FakeApiServer, FakeCluster
from tests.fakes.k8s_scenario import ClusterWithFakeRay, faked_layers_config
from tests.fakes.scripted_world import FakeProbeFactory, World


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
