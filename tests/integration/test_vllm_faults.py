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
    evidence = fault.evidence(local_env, handle)
    print("flood evidence:", evidence)
    assert evidence.bit, evidence.reason
    assert evidence.symptoms["max_kv_cache_usage"] >= 0.9
    assert evidence.symptoms["saturated_after_s"] is not None
    assert evidence.symptoms["max_waiting"] > 0 or evidence.symptoms["preemptions"] > 0
    before, during = evidence.symptoms["probe_ttft_before_s"], evidence.symptoms["probe_ttft_during_s"]
    assert before is not None and during is not None and during > before, (before, during)

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
            stream_completion(status.front_door.url, status.model.name, "anyone?", max_tokens=4, timeout_s=15)
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
