"""vLLM-layer faults on the real local environment: each bites, reverts cleanly, and recovers."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from env_checks import healthy_replica_names

from inferchaos.environments.local.config import LocalEnvConfig
from inferchaos.environments.local.env import LocalEnvironment
from inferchaos.faults.base import wait_until
from inferchaos.faults.ledger import Ledger
from inferchaos.faults.vllm.engine import KillEngine
from inferchaos.faults.vllm.flood import FloodKvCache
from inferchaos.faults.vllm.hang import HangEngine
from inferchaos.faults.vllm.processes import process_state
from inferchaos.primitives.openai_stream import stream_completion
from inferchaos.primitives.vllm_metrics import parse_metrics

pytestmark = pytest.mark.integration


def test_kv_flood_saturates_the_cache_and_the_queue_drains_after_revert(
    local_env: LocalEnvironment, tmp_path: Path
) -> None:
    ledger = Ledger(tmp_path / "ledger")
    fault = FloodKvCache()
    plan = fault.plan(local_env, {"target": "replica-0"})
    print("flood plan:", plan.description)

    handle = fault.inject(local_env, {"target": "replica-0"}, ledger)
    try:
        evidence = fault.evidence(local_env, handle)
        print("flood evidence:", evidence)
        assert evidence.bit, evidence.reason
        assert evidence.symptoms["saturated_after_s"] is not None
        assert evidence.symptoms["max_waiting"] > 0 or evidence.symptoms["preemptions"] > 0
        before, during = evidence.symptoms["probe_ttft_before_s"], evidence.symptoms["probe_ttft_during_s"]
        assert before is not None and during is not None and during > before, (before, during)
        # inject returns once the cache holds 0.85 (the fault's own bar; a fresh-clone run read
        # 0.87 then); the cache fills further as the admitted prompts decode.
        full = wait_until(lambda: fault.evidence(local_env, handle).symptoms["max_kv_cache_usage"] >= 0.9, 20)
        assert full is not None, fault.evidence(local_env, handle).symptoms
    finally:
        fault.revert(local_env, handle, ledger)
    after = fault.evidence(local_env, handle)
    print("flood evidence after revert:", after)
    assert after.symptoms["queue_drained_after_s"] is not None, "the queue must drain after revert"
    metrics = parse_metrics(httpx.get(local_env.status().vllm.replicas[0].metrics_url, timeout=5).text)
    assert metrics.running == 0 and metrics.waiting == 0
    assert ledger.is_empty()
    fault.revert(local_env, handle, ledger)  # idempotent


def test_kill_engine_makes_replica_unhealthy_front_door_serves_and_replica_returns(
    local_env: LocalEnvironment, env_config: LocalEnvConfig, tmp_path: Path
) -> None:
    import psutil

    ledger = Ledger(tmp_path / "ledger")
    fault = KillEngine()
    status = local_env.status()
    handle = fault.inject(local_env, {"replica": 0}, ledger)
    try:
        evidence = fault.evidence(local_env, handle)
        print("engine death evidence:", evidence)
        assert evidence.bit, evidence.reason
        assert (
            not psutil.pid_exists(handle.state["server_pid"])
            or psutil.Process(handle.state["server_pid"]).status() == "zombie"
        )
        # Serve routes around the dead replica once its health checks have failed (1 s period,
        # 3 failures); until then some requests still land on it. Measure how long that lasts.
        results = []

        def five_in_a_row_from_survivor() -> bool:
            results.append(
                stream_completion(
                    status.front_door.url, status.model.name, "anyone?", max_tokens=4, timeout_s=15
                )
            )
            tail = results[-5:]
            return len(tail) == 5 and all(r.ok and r.replica == "replica-1" for r in tail)

        settled = wait_until(five_in_a_row_from_survivor, 60, 0.2)
        availability = sum(r.ok for r in results) / len(results)
        print(
            f"front door during engine death: {availability:.2f} of {len(results)} requests ok; "
            f"only the survivor serves {settled - handle.injected_at if settled else float('nan'):.1f} s after the kill"
        )
        assert settled is not None, "the front door must serve from the surviving replica"
    finally:
        # A failed assertion must not leave replica-0 dead for the tests after this one.
        fault.revert(local_env, handle, ledger)
    back = wait_until(lambda: healthy_replica_names(local_env) == {"replica-0", "replica-1"}, 240, 1.0)
    assert back is not None, "replica-0 must be healthy again"
    after = fault.evidence(local_env, handle)
    print("engine death evidence after revert:", after)
    assert after.symptoms["replica_healthy_again"]
    print(
        f"engine death recovery: replica healthy {after.timestamps['replica_healthy_at'] - handle.injected_at:.1f} s after the kill"
    )
    assert ledger.is_empty()


def test_hang_engine_keeps_health_200_while_nothing_is_generated_and_the_replica_serves_after_revert(
    local_env: LocalEnvironment, tmp_path: Path
) -> None:
    ledger = Ledger(tmp_path / "ledger")
    fault = HangEngine()
    model = local_env.status().model.name
    (replica,) = [r for r in local_env.replica_records() if r.name == "replica-0"]
    handle = fault.inject(local_env, {"replica": 0, "what": "engine"}, ledger)
    pids = [p["pid"] for p in handle.state["processes"]]
    try:
        assert {pid: process_state(pid) for pid in pids} == dict.fromkeys(pids, "T")
        assert httpx.get(f"{replica.url}/health", timeout=5).status_code == 200, "hung but healthy"
        # Straight to replica-0, not through the front door: Serve would route half of them away.
        stuck = stream_completion(replica.url, model, "anyone there?", max_tokens=4, timeout_s=5)
        print("request to the hung replica:", stuck)
        assert not stuck.ok and stuck.ttft_s is None and stuck.e2e_s >= 4.5, stuck
        evidence = fault.evidence(local_env, handle)
        print("hang evidence:", evidence)
        assert evidence.bit, evidence.reason
        assert evidence.symptoms["health_status"] == 200
        assert evidence.symptoms["generation_tokens_delta"] == 0, "tokens were generated by a stopped engine"
    finally:
        fault.revert(local_env, handle, ledger)

    assert not [pid for pid in pids if process_state(pid) == "T"]
    served = wait_until(
        lambda: stream_completion(replica.url, model, "back?", max_tokens=4, timeout_s=30).ok, 60, 1.0
    )
    assert served is not None, "replica-0 must serve again once its engine is resumed"
    print(f"hang recovery: replica-0 served {served - handle.state['resumed_at']:.1f} s after the resume")
    assert "replica-0" in healthy_replica_names(local_env)
    assert ledger.is_empty()
