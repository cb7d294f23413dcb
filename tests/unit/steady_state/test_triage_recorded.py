"""Triage on timelines recorded from the real local environment, one per fault type.

Each file in tests/fixtures/timelines/ is the timeline.csv of a real `inferchaos run` of the
scenario of that name (2 replicas, 2 workers, 1 s sampling).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from inferchaos.steady_state.timeline import Mark, read_timeline
from inferchaos.steady_state.triage import triage

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "timelines"
REPLICA_NEEDS_BYTES = 1.9e9


@pytest.mark.parametrize(
    ("scenario", "layer", "words"),
    [
        ("kv_flood", "vllm", "KV cache"),
        ("actor_leak", "ray", "pending node assignment"),
        ("strict_pg_stall", "ray", "placement group"),
        ("node_loss", "ray", "node"),
        ("gpu_memory_squat", "device", "free memory"),
        # engine_death's control: replica-0's engine killed while replica-1's hangs. Replica-0's
        # restart takes its device's memory too, gradually: not a squat.
        ("engine_death_survivor_hung", "vllm", "vLLM replica"),
    ],
)
def test_recorded_fault_is_blamed_on_its_layer(scenario: str, layer: str, words: str) -> None:
    timeline = read_timeline(FIXTURES / f"{scenario}.csv")
    injected = timeline.marks[Mark.INJECTED]
    result = triage(timeline, injected, since=injected, thresholds={"device.free_bytes": REPLICA_NEEDS_BYTES})
    assert result.layer == layer, result
    assert words in result.reason, result.reason


def test_recorded_baseline_alone_names_no_layer() -> None:
    # Before the injection nothing is wrong: triage must not invent a culprit.
    timeline = read_timeline(FIXTURES / "kv_flood.csv")
    start = timeline.marks[Mark.BASELINE_START]
    result = triage(timeline, start + 5, since=start, lookback_s=5, lookahead_s=3)
    assert result.layer == "unknown", result


def test_a_replica_restarting_on_its_device_is_not_a_squat() -> None:
    # engine_death, healthy: replica-0's replacement loads on host:0 within the triage window.
    timeline = read_timeline(FIXTURES / "engine_death.csv")
    injected = timeline.marks[Mark.INJECTED]
    result = triage(timeline, injected, since=injected, thresholds={"device.free_bytes": REPLICA_NEEDS_BYTES})
    assert result.layer == "vllm", result


def test_a_gcs_held_down_is_ray_although_a_replica_stopped_answering_too() -> None:
    # gcs_loss's control: no SLO breached during the outage, so the run is triaged over the
    # fault window (as the runner does for a failed recovery); replica-0's /metrics timed out
    # meanwhile, a symptom.
    timeline = read_timeline(FIXTURES / "gcs_loss_held.csv")
    injected, reverted = timeline.marks[Mark.INJECTED], timeline.marks[Mark.REVERTED]
    result = triage(timeline, reverted, since=injected, lookback_s=reverted - injected + 30, lookahead_s=5)
    assert result.layer == "ray", result
    assert "state API silent" in result.reason
