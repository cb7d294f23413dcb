"""Ray-layer faults on the real local environment: each bites, reverts cleanly, and recovers."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from env_checks import free_gpus, healthy_replica_names

from inferchaos.environments.local.env import LocalEnvironment
from inferchaos.faults.base import wait_until
from inferchaos.faults.ledger import Ledger
from inferchaos.faults.ray.actors import LEAK_NAMESPACE, LeakActors
from inferchaos.faults.ray.placement import StallPlacementGroup

pytestmark = pytest.mark.integration


def test_leak_actors_exhausts_gpus_then_revert_kills_exactly_its_actors(
    local_env: LocalEnvironment, tmp_path: Path
) -> None:
    from ray.util.state import list_actors

    ledger = Ledger(tmp_path / "ledger")
    fault = LeakActors()
    free_before = free_gpus(local_env)
    handle = fault.inject(local_env, {"rate_per_s": 4.0}, ledger)
    evidence = fault.evidence(local_env, handle)
    print("leak evidence:", evidence)
    assert evidence.bit, evidence.reason
    assert evidence.symptoms["actors_alive"] == int(free_before)
    assert evidence.symptoms["gpus_free_now"] == 0
    assert evidence.symptoms["probe_task_state"] == "PENDING_NODE_ASSIGNMENT"
    assert not ledger.is_empty(), "the leak must be in the ledger while it is live"

    reverted = time.time()
    fault.revert(local_env, handle, ledger)
    ran_at = fault.probe_task_ran(handle, timeout_s=30)
    assert ran_at is not None, "the GPU task must run once the leak is reverted"
    print(f"leak recovery: GPU task ran {ran_at - reverted:.2f} s after revert")
    assert wait_until(lambda: free_gpus(local_env) == free_before, 20)
    leftover = [a for a in list_actors(filters=[("ray_namespace", "=", LEAK_NAMESPACE)]) if a.state != "DEAD"]
    assert leftover == []
    assert ledger.is_empty()
    fault.revert(local_env, handle, ledger)  # idempotent
    assert len(healthy_replica_names(local_env)) >= 2


@pytest.mark.parametrize("mode", ["strict_spread", "strict_pack", "hog"])
def test_placement_group_stall_pends_while_gpus_idle_and_revert_removes_it(
    local_env: LocalEnvironment, tmp_path: Path, mode: str
) -> None:
    import ray

    ledger = Ledger(tmp_path / "ledger")
    fault = StallPlacementGroup()
    free_before = free_gpus(local_env)
    handle = fault.inject(local_env, {"mode": mode, "pending_threshold_s": 3.0}, ledger)
    time.sleep(3.5)  # the stall is defined by its duration: PENDING for longer than the threshold
    evidence = fault.evidence(local_env, handle)
    print(f"pg {mode} evidence:", evidence)
    assert evidence.bit, evidence.reason
    if mode == "hog":
        assert evidence.symptoms["group_state"] == "CREATED" and evidence.symptoms["gpus_free"] == 0
    else:
        assert evidence.symptoms["group_state"] == "PENDING" and evidence.symptoms["gpus_free"] > 0
    assert not evidence.symptoms["waiting_work_started"]

    fault.revert(local_env, handle, ledger)
    fault.revert(local_env, handle, ledger)  # idempotent
    table = ray.util.placement_group_table()
    assert table.get(handle.state["pg_id"], {"state": "REMOVED"})["state"] == "REMOVED"
    recovered = wait_until(lambda: free_gpus(local_env) == free_before, 20)
    assert recovered is not None
    print(f"pg {mode} recovery: free GPUs back {recovered - handle.reverted_at:.2f} s after revert")
    assert ledger.is_empty()
