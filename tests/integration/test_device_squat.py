"""Device-memory squat on the real local environment.

Squat replica-1's memory budget: the preflight flags the device before the replica restarts,
the restarted replica fails fast (never hangs) with its reason captured while the front door
keeps serving through replica-0; revert ends the squatter and replica-1 serves again. One test
function, so the scenario costs one restart.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from inferchaos.environments.local.config import LocalEnvConfig
from inferchaos.environments.local.env import LocalEnvironment
from inferchaos.faults.gpu.launch import find_squatters
from inferchaos.faults.gpu.squat import SquatDeviceMemory
from inferchaos.faults.ledger import Ledger
from inferchaos.primitives.memory_budget import budget_name, budgets_available, find_budget
from inferchaos.primitives.openai_stream import StreamResult, stream_completion
from inferchaos.primitives.processes import pid_alive
from inferchaos.primitives.replica_slots import ReplicaRecord, replica_healthy

pytestmark = pytest.mark.integration

T = TypeVar("T")

RECOVERY_TIMEOUT_S = 240.0
# Requests that start this long after the restart go to replica-0 alone: Serve has noticed by then.
SERVE_NOTICE_S = 10.0


def _healthy(env: LocalEnvironment, name: str, started_after: float = 0.0) -> ReplicaRecord | None:
    for record in env.replica_records():
        if record.name == name and record.state == "healthy" and record.started_at > started_after:
            return record if replica_healthy(record) else None
    return None


def _wait_for(check: Callable[[], T | None], timeout_s: float, interval_s: float = 1.0) -> T | None:
    """Poll ``check`` until it returns something truthy; that value, or None at the timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(interval_s)
    return None


def test_squat_fails_the_restarted_replica_fast_keeps_serving_and_recovers(
    request: pytest.FixtureRequest, env_config: LocalEnvConfig, tmp_path: Path
) -> None:
    usable, why = budgets_available()
    if not usable:
        pytest.skip(f"host device squatting needs the replicas' memory budgets: {why}")
    if env_config.replica_memory_mib == 0:
        pytest.skip("the replicas' memory budgets are turned off (replica_memory_mib 0)")
    local_env: LocalEnvironment = request.getfixturevalue("local_env")
    both_up = _wait_for(
        lambda: _healthy(local_env, "replica-0") and _healthy(local_env, "replica-1"), RECOVERY_TIMEOUT_S
    )
    assert both_up is not None, "the squat starts from two healthy replicas"
    status = local_env.status()
    ledger = Ledger(tmp_path / "ledger")
    fault = SquatDeviceMemory()
    params = {"device": "host:1", "fraction": 0.75}

    plan = fault.plan(local_env, params)
    print("squat plan:", plan.description)
    assert {"device:host:1", "replica:replica-1"} <= set(plan.targets)

    served: list[tuple[float, StreamResult]] = []
    stop = threading.Event()

    def keep_asking() -> None:
        while not stop.is_set():
            sent = time.time()
            result = stream_completion(
                status.front_door.url, status.model.name, "still there?", max_tokens=4, timeout_s=10
            )
            served.append((sent, result))
            stop.wait(0.5)

    asker = threading.Thread(target=keep_asking, name="front-door-asker", daemon=True)
    asker.start()
    try:
        handle = fault.inject(local_env, params, ledger)
        evidence = fault.evidence(local_env, handle)
    finally:
        stop.set()
        asker.join(timeout=30)
    print("squat evidence:", evidence)

    assert evidence.bit, evidence.reason
    assert evidence.symptoms["outcome"] == "failed_fast", "the restarted replica must fail, never hang"
    assert evidence.symptoms["failure"], "the failure reason must be captured"
    assert evidence.symptoms["failed_after_start_s"] <= 60
    assert evidence.timestamps["preflight_flagged_at"] < evidence.timestamps["replica_started_at"]
    assert evidence.symptoms["allocated_bytes"] == plan.params["bytes"]
    assert not ledger.is_empty(), "the squat must be in the ledger while it is live"

    restarted_at = handle.state["restarted_at"]
    settled = [r for sent, r in served if sent > restarted_at + SERVE_NOTICE_S]
    availability = sum(r.ok for _, r in served) / len(served)
    print(f"front door during the squat: {len(served)} requests, availability {availability:.2f}; "
          f"after Serve noticed: {sum(r.ok for r in settled)}/{len(settled)} ok")  # fmt: skip
    assert settled, "requests must have been sent while the squat was live"
    assert sum(r.ok for r in settled) / len(settled) >= 0.9, [r.error for r in settled if not r.ok]
    assert {r.replica for r in settled if r.ok} == {"replica-0"}

    squatter_pid = handle.state["squatter_pid"]
    fault.revert(local_env, handle, ledger)
    fault.revert(local_env, handle, ledger)  # idempotent
    assert ledger.is_empty()
    assert not pid_alive(squatter_pid)
    assert find_squatters(handle.id) == []
    budget = find_budget(budget_name(local_env.load_state().env_id, 1))
    assert budget is not None and squatter_pid not in budget.pids()

    back = _wait_for(lambda: _healthy(local_env, "replica-1", started_after=restarted_at), RECOVERY_TIMEOUT_S)
    assert back is not None, f"replica-1 must serve again within {RECOVERY_TIMEOUT_S:.0f} s of the revert"
    after = fault.evidence(local_env, handle)
    print("squat evidence after revert:", after)
    assert after.timestamps["replica_healthy_at"] == back.ready_at
    assert back.ready_at is not None and handle.reverted_at is not None
    print(f"device squat recovery: replica-1 healthy {back.ready_at - handle.reverted_at:.1f} s after revert")
    assert _healthy(local_env, "replica-0") is not None
