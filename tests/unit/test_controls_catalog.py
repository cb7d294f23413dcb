"""Every built-in scenario ships a negative control that loads, breaks something, and names its layer."""

from __future__ import annotations

import pytest

from inferchaos.experiments.controls import control_path, load_control
from inferchaos.experiments.suites import SUITES, suite_paths
from inferchaos.layers import Layer

# The layer each control's break must be found in: the layer of the scenario's own fault.
EXPECTED_LAYER = {
    "kv_flood": Layer.VLLM,
    "actor_leak": Layer.RAY,
    "strict_pg_stall": Layer.RAY,
    "node_loss": Layer.RAY,
    "serve_controller_loss": Layer.RAY,
    "engine_hang": Layer.VLLM,
    "slow_replica": Layer.VLLM,
    "engine_death": Layer.VLLM,
    "gcs_loss": Layer.RAY,
    "network_partition_short": Layer.NETWORK,
    "network_partition_long": Layer.NETWORK,
    "slow_link": Layer.NETWORK,
    "gpu_memory_squat": Layer.DEVICE,
    "gpu_ledger_squat": Layer.K8S,
    "anti_affinity_pending": Layer.K8S,
    "k8s_node_loss": Layer.K8S,
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
