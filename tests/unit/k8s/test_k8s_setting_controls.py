"""The Kubernetes scenarios' controls that break the platform itself, not the harness, run against
the fake API server and its simulated control plane: a real platform setting wrong (a stray
NoSchedule taint on every GPU node) or a second failure in another phase (a GPU node lost for
good as the platform recovers). Each scenario FAILS on the SLOs that see the break, names the
Kubernetes layer, and leaves the cluster as it found it. So does each scenario with a GPU node
lost, for good, while its fault acts or as the platform recovers, and k8s_node_loss with one
lost before its fault (its own nodes_before sees it)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from inferchaos.faults.ledger import Ledger
from inferchaos.run.controls import ControlSpec, load_control
from inferchaos.run.probe_set import k8s_probe_of
from inferchaos.run.runner import Runner, RunOptions
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

# A node lost for good is seen by the scenario's own node and Pending SLOs where it declares
# them, and by the platform steady state's where it does not.
NODE_LOST = ("platform.k8s_nodes_after", "nodes_back", "nothing_pending", "platform.pods_pending_after")
# A tainted node is Ready but takes no replica: its Pod stays Pending, its Deployment short.
NOWHERE_TO_RUN = (
    "nothing_pending",
    "replicas_back",
    "platform.pods_pending_after",
    "platform.vllm.ready_after",
)
# Control -> the SLOs of which at least one must fail.
CONTROLS = {
    "k8s_node_loss.gpu_nodes_tainted": NOWHERE_TO_RUN,
    "gpu_ledger_squat.node_lost_at_recovery": NODE_LOST,
    "anti_affinity_pending.node_lost_at_recovery": NODE_LOST,
}


# Scenario, phase, and the node lost then: one its fault does not stop.
NODE_LOST_IN_EACH_PHASE = [
    ("k8s_node_loss", "baseline", "inferchaos-worker3"),
    ("k8s_node_loss", "inject", "inferchaos-worker3"),
    ("k8s_node_loss", "recovery", "inferchaos-worker3"),
    ("gpu_ledger_squat", "inject", "inferchaos-worker2"),
    ("anti_affinity_pending", "inject", "inferchaos-worker2"),
]


def _run(control: ControlSpec, fake_server: FakeApiServer, runtime: Any, tmp_path: Path) -> dict[str, Any]:
    """``control`` through the runner against the fake cluster, on windows short enough for it."""
    _, config = faked_layers_config(tmp_path, "cluster", fake_server.url, runtime)
    env = ClusterWithFakeRay(config)
    spec = control.scenario
    # The fake control plane heals in seconds: short windows, as the game day test uses.
    spec = replace(spec, baseline_s=1.5, fault=replace(spec.fault, duration_s=4.0))
    if spec.slos.recovery is not None:
        spec = replace(spec, slos=replace(spec.slos, recovery=replace(spec.slos.recovery, within_s=6.0)))
    control = replace(control, scenario=spec)
    fakes = FakeProbeFactory(World())

    def probes(environment: Any, pace: CanaryPace, named: frozenset[str]) -> tuple[list[Probe], Any]:
        built, canary = fakes(environment, pace, named)
        return [*built, k8s_probe_of(environment)], canary

    options = RunOptions(interval_s=K8S_READ_INTERVAL_S, run_dir=tmp_path / "run", control=control)
    verdict = Runner(spec, env, options, None, probes).run().to_dict()
    env.close()
    return verdict


def _failed(verdict: dict[str, Any]) -> set[str]:
    """SLOs that failed, and those back too late for the recovery window."""
    failed = {slo["name"] for slo in verdict["slos"] if not slo["ok"]}
    return failed | set(verdict["timing"].get("recovery_blocked_by") or ())


def _assert_failed_as_expected_in_k8s(verdict: dict[str, Any]) -> None:
    assert verdict["status"] == "failed", verdict["reason"]
    assert verdict["triage"]["layer"] == "k8s", verdict["triage"]
    assert verdict["control"]["result"] == "failed_as_expected", verdict["control"]


def _assert_nothing_left(cluster: FakeCluster, before: dict[str, Any]) -> None:
    """The ledger is empty and the cluster is as the run found it: the break was released too."""
    assert Ledger().entries() == []
    assert k8s_state(cluster) == before


@pytest.mark.parametrize(("name", "failing"), CONTROLS.items(), ids=list(CONTROLS))
def test_a_k8s_control_that_breaks_the_platform_fails_the_scenario_in_the_k8s_layer(
    name: str,
    failing: tuple[str, ...],
    fake_server: FakeApiServer,
    world_cluster: tuple[FakeCluster, Any],
    tmp_path: Path,
) -> None:
    cluster, runtime = world_cluster
    before = k8s_state(cluster)
    verdict = _run(load_control(EXPERIMENTS / "controls" / f"{name}.yaml"), fake_server, runtime, tmp_path)

    _assert_failed_as_expected_in_k8s(verdict)
    # The break comes on top of the scenario's own fault, which still bites.
    assert verdict["fault"]["effect_observed"], verdict["fault"]
    assert _failed(verdict) & set(failing), (_failed(verdict), verdict["reason"])
    _assert_nothing_left(cluster, before)


@pytest.mark.parametrize(("scenario", "at", "node"), NODE_LOST_IN_EACH_PHASE)
def test_a_node_lost_for_good_in_any_phase_fails_the_scenario_in_the_k8s_layer(
    scenario: str,
    at: str,
    node: str,
    fake_server: FakeApiServer,
    world_cluster: tuple[FakeCluster, Any],
    tmp_path: Path,
) -> None:
    cluster, runtime = world_cluster
    before = k8s_state(cluster)
    path = tmp_path / f"{scenario}.node_lost_at_{at}.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "control": {
                    "of": str(EXPERIMENTS / f"{scenario}.yaml"),
                    "breaks": f"{node} is lost for good at {at}",
                    "sabotage": [{"fault": "k8s.stop_node_container", "at": at, "arguments": {"node": node}}],
                    "expect": {"layer": "k8s"},
                }
            }
        )
    )
    verdict = _run(load_control(path), fake_server, runtime, tmp_path)

    _assert_failed_as_expected_in_k8s(verdict)
    if at == "baseline":
        # Not steady before the fault: nothing injected, and the verdict says what failed.
        assert verdict["fault"] is None and verdict["platform"]["failure"]["phase"] == "baseline", verdict
    else:
        assert verdict["fault"]["effect_observed"], verdict["fault"]
    assert _failed(verdict), verdict["reason"]
    _assert_nothing_left(cluster, before)
