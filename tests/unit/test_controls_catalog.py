"""Every built-in scenario ships a negative control that loads, breaks something, and names its layer.

At least one control of each scenario breaks the platform itself, not the harness: a real
platform setting (a health check that cannot see the failure, a stray taint), or a failure in another layer
than the fault's or in another phase (a replica frozen at baseline or as the platform
recovers). A control that only holds the scenario's own revert fails any platform.
"""

from __future__ import annotations

import pytest

from inferchaos.faults.registry import get_fault
from inferchaos.layers import Layer
from inferchaos.run.controls import SabotageAt, control_path, load_control
from inferchaos.run.suites import SUITES, suite_paths

# The layer each control's break must be found in: the layer of what it broke.
EXPECTED_LAYER = {
    "kv_flood": Layer.VLLM,
    "actor_leak": Layer.VLLM,
    "strict_pg_stall": Layer.VLLM,
    "node_loss": Layer.RAY,
    "node_loss.survivor_hangs": Layer.VLLM,
    "serve_controller_loss": Layer.VLLM,
    "engine_hang": Layer.VLLM,
    "engine_hang.other_replica_hangs_at_baseline": Layer.VLLM,
    "slow_replica": Layer.VLLM,
    "slow_replica.other_replica_frozen_at_baseline": Layer.VLLM,
    "engine_death": Layer.VLLM,
    "gcs_loss": Layer.VLLM,
    "network_partition_short": Layer.VLLM,
    "network_partition_long": Layer.NETWORK,
    "network_partition_long.other_replica_hangs_at_baseline": Layer.VLLM,
    "slow_link": Layer.NETWORK,
    "slow_link.other_replica_hangs": Layer.VLLM,
    "gpu_memory_squat": Layer.VLLM,
    "gpu_ledger_squat": Layer.K8S,
    "gpu_ledger_squat.node_lost_at_recovery": Layer.K8S,
    "anti_affinity_pending": Layer.K8S,
    "anti_affinity_pending.node_lost_at_recovery": Layer.K8S,
    "k8s_node_loss": Layer.K8S,
    "k8s_node_loss.gpu_nodes_tainted": Layer.K8S,
}
SCENARIOS = sorted({path for name in SUITES for path in suite_paths(name)})


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_each_scenario_ships_a_control_of_itself(scenario) -> None:  # type: ignore[no-untyped-def]
    control = load_control(control_path(scenario))
    assert control.scenario.path == scenario.resolve()
    assert control.name == f"{scenario.stem}.control"
    assert control.hold_fault or control.sabotage
    # The scenario runs exactly as written: the control adds a break, never edits an SLO.
    assert control.run_spec().slos == control.scenario.slos
    assert control.expect_layer == EXPECTED_LAYER[scenario.stem]


# Faults that set a real platform setting wrong rather than break a component.
# A stray NoSchedule taint on the GPU nodes is one too.
SETTINGS = frozenset({"vllm.blind_health_check", "k8s.taint_gpu_nodes"})


def _breaks_the_platform(path) -> bool:  # type: ignore[no-untyped-def]
    control = load_control(path)
    layer = get_fault(control.scenario.fault.fault).layer
    return any(
        step.fault in SETTINGS
        or get_fault(step.fault).layer != layer
        or step.at in (SabotageAt.BASELINE, SabotageAt.RECOVERY)
        for step in control.sabotage
    )


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_each_scenario_ships_a_control_that_breaks_the_platform(scenario) -> None:  # type: ignore[no-untyped-def]
    controls = [
        control_path(scenario),
        *sorted(control_path(scenario).parent.glob(f"{scenario.stem}.*.yaml")),
    ]
    for path in controls[1:]:
        assert load_control(path).expect_layer == EXPECTED_LAYER[path.stem]
    assert any(_breaks_the_platform(path) for path in controls), [p.name for p in controls]
