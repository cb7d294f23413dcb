"""A scenario whose fault strikes one replica judges that replica and its neighbours apart.

The struck replica must serve again: a recovery SLO labelled with it, among the SLOs recovery
waits for. Every other replica must stay isolated while the fault holds: a during-phase TTFT
SLO labelled with it whose threshold is relative to that replica's own baseline. Without them a
front-door average hides a target that never comes back, or a neighbour the fault dragged down.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from inferchaos.run.spec import ExperimentSpec, load_and_validate
from inferchaos.steady_state.slo import Phase

REPO = Path(__file__).resolve().parents[3]
# The local environment's default replicas, as every local scenario is written for.
REPLICAS = ("replica-0", "replica-1")
# Faults whose parameters name a device rather than a replica: which replica the device holds
# on the local environment (replica-k runs on host:k).
DEVICE_REPLICA = {"host:0": "replica-0", "host:1": "replica-1"}


def struck_replica(spec: ExperimentSpec) -> str | None:
    """The one replica the scenario's fault strikes, read from its parameters; None for a fault
    of the whole platform (the front door, Ray's control plane, the cluster's GPUs)."""
    params = spec.fault.params
    for key in ("replica", "target"):
        value = params.get(key)
        if isinstance(value, str) and value in REPLICAS:
            return value
    device = params.get("device")
    return DEVICE_REPLICA.get(device) if isinstance(device, str) else None


LOCAL = [
    spec
    for spec in (load_and_validate(p) for p in sorted((REPO / "experiments").glob("*.yaml")))
    if spec.env == "local"
]
ONE_REPLICA = [spec for spec in LOCAL if struck_replica(spec) is not None]


def test_the_scenarios_that_strike_one_replica_are_found() -> None:
    # A new local scenario joins this list by its fault's parameters; a fault that names its
    # replica some other way must be taught to struck_replica, or this test says so.
    assert {spec.name: struck_replica(spec) for spec in ONE_REPLICA} == {
        "engine_death": "replica-0",
        "engine_hang": "replica-0",
        "slow_replica": "replica-0",
        "gpu_memory_squat": "replica-1",
        "node_loss": "replica-1",
        "network_partition_short": "replica-0",
        "network_partition_long": "replica-0",
        "slow_link": "replica-0",
    }


@pytest.mark.parametrize("spec", ONE_REPLICA, ids=[s.name for s in ONE_REPLICA])
def test_the_struck_replica_must_serve_again(spec: ExperimentSpec) -> None:
    target = struck_replica(spec)
    steady = set(spec.slos.recovery.steady) if spec.slos.recovery else set()
    judged = [
        slo.name
        for slo in spec.slos.slos
        if slo.phase is Phase.RECOVERY
        and dict(slo.labels) == {"replica": target}
        and slo.probe in ("canary.success", "vllm.healthy")
        and slo.name in steady
    ]
    assert judged, f"{spec.name}: no recovery SLO on {target} that recovery waits for"


@pytest.mark.parametrize("spec", ONE_REPLICA, ids=[s.name for s in ONE_REPLICA])
def test_every_other_replica_stays_within_its_own_baseline(spec: ExperimentSpec) -> None:
    target = struck_replica(spec)
    for neighbour in (r for r in REPLICAS if r != target):
        isolated = [
            slo.name
            for slo in spec.slos.slos
            if slo.phase is Phase.DURING
            and slo.probe == "canary.ttft_s"
            and dict(slo.labels) == {"replica": neighbour}
            and slo.scale is not None
        ]
        assert isolated, f"{spec.name}: no during-phase TTFT SLO on {neighbour} relative to its baseline"
