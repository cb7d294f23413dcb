"""The three Kubernetes experiment files, whole, through the real runner against the fake cluster.

The Kubernetes layer is real code end to end: the driver, the faults, the k8s probe, the
official client, the fake API server and its simulated control plane. vLLM, the canary and
Ray are the runner's fakes (tests/fakes/scripted_world.py); tests/integration/test_k8s_scenarios.py runs
the same experiments with the real ones.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from inferchaos.faults.ledger import Ledger
from inferchaos.run.probe_set import k8s_probe_of
from inferchaos.run.runner import Runner, RunOptions
from inferchaos.run.spec import load_and_validate
from inferchaos.steady_state.canary import CanaryPace
from inferchaos.steady_state.probe_base import Probe
from tests.fakes.apiserver import FakeApiServer, FakeCluster
from tests.fakes.k8s_scenario import (
    EXPERIMENTS,
    K8S_READ_INTERVAL_S,
    ClusterWithFakeRay,
    faked_layers_config,
    k8s_state,
)
from tests.fakes.scripted_world import FakeProbeFactory, World

pytestmark = pytest.mark.long_running


@pytest.mark.parametrize(
    ("name", "scheduler_says"),
    [
        ("gpu_ledger_squat", "3 Insufficient nvidia.com/gpu"),
        ("anti_affinity_pending", "3 node(s) didn't match pod anti-affinity rules"),
        ("k8s_node_loss", "1 node(s) had untolerated taint {node.kubernetes.io/unreachable: }"),
    ],
)
def test_experiment_passes_names_k8s_and_restores_the_cluster(
    name: str,
    scheduler_says: str,
    fake_server: FakeApiServer,
    world_cluster: tuple[FakeCluster, Any],
    tmp_path: Path,
) -> None:
    cluster, runtime = world_cluster
    before = k8s_state(cluster)
    _, config = faked_layers_config(tmp_path, "cluster", fake_server.url, runtime)
    env = ClusterWithFakeRay(config)
    spec = load_and_validate(EXPERIMENTS / f"{name}.yaml")
    spec = replace(spec, baseline_s=1.5, fault=replace(spec.fault, duration_s=4.0))
    fakes = FakeProbeFactory(World())

    def probes(environment: Any, pace: CanaryPace, named: frozenset[str]) -> tuple[list[Probe], Any]:
        built, canary = fakes(environment, pace, named)
        return [*built, k8s_probe_of(environment)], canary

    verdict = (
        Runner(spec, env, RunOptions(interval_s=K8S_READ_INTERVAL_S, run_dir=tmp_path / "run"), None, probes)
        .run()
        .to_dict()
    )
    env.close()

    assert verdict["status"] == "passed", verdict["reason"]
    assert verdict["fault"]["effect_observed"]
    assert any(scheduler_says in p for p in verdict["fault"]["evidence"]["symptoms"]["pending"])
    assert verdict["triage"]["layer"] == "k8s" and scheduler_says in verdict["triage"]["reason"]
    assert verdict["timing"]["recovered"]
    assert Ledger().entries() == []
    assert k8s_state(cluster) == before
