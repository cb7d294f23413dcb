"""SLOs fail closed: a source that went silent is no data, never a pass on its neighbours' numbers.

The story (seconds after t0): baseline 0-10, fault injected at 10, reverted at 20, end at 40;
two vLLM replicas read once a second. A frozen replica's reads all time out: the sampler
writes one error row per tick named after the Probe object, ``vllm@replica-0``, with its
labels (``replica=replica-0``), and no readings.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import yaml

from inferchaos.steady_state.evaluation import (
    counts_toward,
    detect,
    evaluate,
    evaluate_slo,
    recover,
)
from inferchaos.steady_state.slo import SloSpec, ensure_slos_are_valid
from inferchaos.steady_state.timeline import Row, Timeline

if TYPE_CHECKING:
    from conftest import Synth

MARKS = {"baseline_start": 0, "injected": 10, "reverted": 20, "end": 40}
TICKS = range(41)
TIMEOUT = "TimeoutError: no answer within 0.8 s"
REPLICA_0 = {"replica": "replica-0"}
REPLICA_1 = {"replica": "replica-1"}

# kv_flood's recovery SLO: no labels, so every replica's queue is judged.
QUEUE_AFTER = (
    '{name: queue_after, probe: vllm.num_requests_waiting, agg: max, op: "<=", threshold: 0,'
    " phase: recovery, window_s: 5}"
)
RECOVERY = "{within_s: 30, hold_s: 5, steady: [queue_after]}"


def spec(*slos: str, recovery: str | None = None) -> SloSpec:
    doc: dict[str, object] = {"slos": [yaml.safe_load(s) for s in slos]}
    if recovery:
        doc["recovery"] = yaml.safe_load(recovery)
    return ensure_slos_are_valid(doc)


def replica(synth: Synth, name: str, probe: str, value: float, silent: set[int]) -> list[Row]:
    """One replica's readings of ``probe`` on every tick but the ``silent`` ones, where its
    read timed out instead."""
    labels = {"replica": name}
    readings = [
        r for r in synth.rows(probe, [value] * len(TICKS), labels=labels) if r.t - synth.t0 not in silent
    ]
    return readings + synth.error_rows(f"vllm@{name}", sorted(silent), TIMEOUT, labels)


def queue_run(synth: Synth, silent_0: set[int], silent_1: frozenset[int] = frozenset()) -> Timeline:
    """Both replicas with an empty queue; replica-0 (and -1) answer nothing on the silent ticks."""
    rows = replica(synth, "replica-0", "vllm.num_requests_waiting", 0.0, silent_0)
    rows += replica(synth, "replica-1", "vllm.num_requests_waiting", 0.0, set(silent_1))
    return synth.timeline(rows, **MARKS)


def both_heard(synth: Synth, probe: str, value: float) -> Timeline:
    """Both replicas read ``probe`` = ``value`` on every tick."""
    rows = replica(synth, "replica-0", probe, value, set()) + replica(synth, "replica-1", probe, value, set())
    return synth.timeline(rows, **MARKS)


# The frozen replica of the kv_flood run


def test_a_frozen_replica_fails_the_queue_slo_its_neighbour_would_pass(synth: Synth) -> None:
    # replica-0 froze at 12 and stayed frozen; replica-1 kept reporting an empty queue.
    timeline = queue_run(synth, silent_0=set(range(12, 41)))
    evaluation = evaluate(timeline, spec(QUEUE_AFTER, recovery=RECOVERY))
    (queue,) = evaluation.slos
    assert not queue.ok
    assert queue.reason.startswith("no data from vllm@replica-0 (replica=replica-0) in the recovery phase")
    # The last 5 s window (35, 40] held five timed-out reads.
    assert queue.reason.endswith(f"5 failed reads ({TIMEOUT})")
    assert "\n" not in queue.reason
    assert evaluation.recovery is not None and not evaluation.recovery.recovered
    assert evaluation.recovery.failing_at_end == ("queue_after",)
    assert "queue_after: no data from vllm@replica-0 (replica=replica-0)" in evaluation.recovery.reason
    assert not evaluation.ok


def test_recovery_waits_for_a_silent_replica_to_answer_again(synth: Synth) -> None:
    # replica-0 is silent from 12 and answers again at 30: recovered from 30, not from 20.
    timeline = queue_run(synth, silent_0=set(range(12, 30)))
    result = recover(timeline, spec(QUEUE_AFTER, recovery=RECOVERY))
    assert result is not None and result.recovered
    assert result.time_to_recover_s == 10.0


def test_an_all_silent_stretch_is_not_ok_rather_than_unknown(synth: Synth) -> None:
    # Both replicas frozen after the revert: no reading at all, only failed reads.
    everything = set(range(12, 41))
    timeline = queue_run(synth, silent_0=everything, silent_1=frozenset(everything))
    (queue,) = evaluate(timeline, spec(QUEUE_AFTER)).slos
    assert not queue.ok and queue.observed is None
    assert queue.reason.startswith(
        "no data from vllm@replica-0 (replica=replica-0), vllm@replica-1 (replica=replica-1) in the recovery phase"
    )
    assert queue.reason.endswith(f"10 failed reads ({TIMEOUT})")
    result = recover(timeline, spec(QUEUE_AFTER, recovery=RECOVERY))
    assert result is not None and not result.recovered
    assert "did not hold for 5 s" in result.reason and "no data from vllm@replica-0" in result.reason


# Transient errors are not silence


def test_a_single_failed_read_in_a_window_with_readings_still_passes(synth: Synth) -> None:
    # One read timed out at 37 (the Ray state API and /metrics do that under load), and one
    # on the recovery phase's first tick: readings just before it speak for the replica.
    timeline = queue_run(synth, silent_0={20, 37})
    evaluation = evaluate(timeline, spec(QUEUE_AFTER, recovery=RECOVERY))
    (queue,) = evaluation.slos
    assert queue.ok, queue.reason
    assert evaluation.recovery is not None and evaluation.recovery.time_to_recover_s == 0.0


def test_a_phase_verdict_without_window_needs_the_source_silent_for_the_whole_phase(synth: Synth) -> None:
    during = '{name: q, probe: vllm.num_requests_waiting, agg: max, op: "<=", threshold: 0, phase: during}'
    transient = queue_run(synth, silent_0={13})
    assert evaluate_slo(transient, spec(during).slos[0]).ok
    frozen = queue_run(synth, silent_0=set(range(10, 41)))
    result = evaluate_slo(frozen, spec(during).slos[0])
    assert not result.ok
    assert result.reason == (
        f"no data from vllm@replica-0 (replica=replica-0) in the during phase: 10 failed reads ({TIMEOUT})"
    )


def test_silence_of_another_replica_or_layer_does_not_concern_the_slo(synth: Synth) -> None:
    # node_loss's replica_back judges replica-1 only; replica-0 and the Ray probe are silent.
    replica_back = (
        '{name: replica_back, probe: vllm.healthy, labels: {replica: replica-1}, agg: min, op: ">=",'
        " threshold: 1, phase: recovery, window_s: 3}"
    )
    everything = set(range(12, 41))
    rows = replica(synth, "replica-0", "vllm.healthy", 1.0, everything)
    rows += replica(synth, "replica-1", "vllm.healthy", 1.0, set())
    rows += synth.error_rows("ray", everything, "TimeoutError: no answer within 0.8 s")
    timeline = synth.timeline(rows, **MARKS)
    assert evaluate_slo(timeline, spec(replica_back).slos[0]).ok


# Baseline


def test_a_baseline_slo_whose_only_source_is_silent_fails_naming_it(synth: Synth) -> None:
    headroom = (
        '{name: kv_headroom_before, probe: vllm.kv_cache_usage, agg: max, op: "<=", threshold: 0.5,'
        " phase: baseline}"
    )
    silent = set(range(0, 10))
    alone = replica(synth, "replica-0", "vllm.kv_cache_usage", 0.1, silent)
    result = evaluate_slo(synth.timeline(alone, **MARKS), spec(headroom).slos[0])
    assert not result.ok
    assert result.reason == (
        f"no data from vllm@replica-0 (replica=replica-0) in the baseline phase: 10 failed reads ({TIMEOUT})"
    )
    # Next to a healthy replica it fails all the same: replica-1's headroom says nothing of replica-0.
    pair = alone + replica(synth, "replica-1", "vllm.kv_cache_usage", 0.1, set())
    result = evaluate_slo(synth.timeline(pair, **MARKS), spec(headroom).slos[0])
    assert not result.ok and result.reason.startswith("no data from vllm@replica-0")


def test_a_relative_threshold_whose_baseline_source_was_silent_fails_closed(synth: Synth) -> None:
    ttft_after = (
        '{name: ttft_after, probe: vllm.ttft_p95_s, agg: max, op: "<=", threshold: {times_baseline: 3},'
        " phase: recovery}"
    )
    silent = set(range(0, 10))
    rows = replica(synth, "replica-0", "vllm.ttft_p95_s", 0.1, silent)
    rows += replica(synth, "replica-1", "vllm.ttft_p95_s", 0.1, set())
    timeline = synth.timeline(rows, **MARKS)
    (result,) = evaluate(timeline, spec(ttft_after)).slos
    assert not result.ok
    assert result.baseline is None and result.to_dict()["threshold"] is None
    assert result.reason == (
        "no baseline of max(vllm.ttft_p95_s) to scale its threshold from: no data from vllm@replica-0"
        f" (replica=replica-0) in the baseline phase: 10 failed reads ({TIMEOUT})"
    )
    # With both replicas heard in the baseline, the same run passes against 3 x 0.1.
    (healthy,) = evaluate(both_heard(synth, "vllm.ttft_p95_s", 0.1), spec(ttft_after)).slos
    assert healthy.ok and math.isclose(healthy.threshold, 0.3)


# Detection


def test_per_sample_detection_fires_at_a_silent_tick(synth: Synth) -> None:
    during = '{name: q, probe: vllm.num_requests_waiting, agg: max, op: "<=", threshold: 0, phase: during}'
    detection = detect(queue_run(synth, silent_0={13}), spec(during))
    assert detection is not None
    assert (detection.slo, detection.time_to_detect_s, detection.observed) == ("q", 3.0, 0.0)
    # Every replica silent from 13: no value at all there, and still a detection.
    everything = set(range(13, 41))
    detection = detect(queue_run(synth, silent_0=everything, silent_1=frozenset(everything)), spec(during))
    assert detection is not None and detection.time_to_detect_s == 3.0 and detection.observed is None
    assert detect(queue_run(synth, silent_0=set()), spec(during)) is None


# Unattributed canary failures


SURVIVOR_SERVES = (
    '{name: survivor_serves, probe: canary.success, labels: {replica: replica-0}, agg: mean, op: ">=",'
    " threshold: 0.95, phase: during}"
)


def canary_run(
    synth: Synth, failures: dict[str, str] | None, successes: dict[str, str] | None = None
) -> Timeline:
    """replica-0 serves every canary request of the fault; five more requests fail (labelled
    ``failures``: {} when they timed out before the front door named a replica), and five
    more succeed labelled ``successes``."""
    rows = synth.rows("canary.success", [1.0] * 10, start=10, labels=REPLICA_0)
    if failures is not None:
        rows += synth.rows("canary.success", [0.0] * 5, start=12.5, labels=failures)
    if successes is not None:
        rows += synth.rows("canary.success", [1.0] * 5, start=12.25, labels=successes)
    return synth.timeline(rows, **MARKS)


def test_an_unattributed_canary_failure_counts_against_a_replica_slo(synth: Synth) -> None:
    result = evaluate_slo(canary_run(synth, failures={}), spec(SURVIVOR_SERVES).slos[0])
    assert not result.ok
    assert result.samples == 15 and math.isclose(result.observed or 0.0, 10 / 15)


def test_a_failure_attributed_to_another_replica_does_not(synth: Synth) -> None:
    result = evaluate_slo(canary_run(synth, failures=REPLICA_1), spec(SURVIVOR_SERVES).slos[0])
    assert result.ok and result.samples == 10 and result.observed == 1.0


def test_an_unattributed_success_is_attributed_to_no_one(synth: Synth) -> None:
    result = evaluate_slo(canary_run(synth, failures=None, successes={}), spec(SURVIVOR_SERVES).slos[0])
    assert result.ok and result.samples == 10


def test_the_rule_is_for_failures_that_lack_the_label_only(synth: Synth) -> None:
    slo = spec(SURVIVOR_SERVES).slos[0]
    t = synth.t0 + 12
    assert counts_toward(Row(t, "canary.success", {}, 0.0), slo)
    assert counts_toward(Row(t, "canary.success", REPLICA_0, 0.0), slo)
    assert not counts_toward(Row(t, "canary.success", REPLICA_1, 0.0), slo)
    assert not counts_toward(Row(t, "canary.success", {}, 1.0), slo)
    # Latency has no failure value to attribute.
    ttft = spec(SURVIVOR_SERVES.replace("canary.success", "canary.ttft_s")).slos[0]
    assert not counts_toward(Row(t, "canary.ttft_s", {}, 0.0), ttft)


# A replica that went quiet after the revert: taken out of rotation, it gets no canary request,
# so it leaves neither a failure nor an error row behind, only silence.

REPLICA_0_SERVES_AFTER = (
    "{name: replica_0_serves_after, probe: canary.success, labels: {replica: replica-0}, agg: mean,"
    ' op: ">=", threshold: 0.9, phase: recovery, window_s: 5}'
)


def rotation_run(synth: Synth, replica_0_until: float) -> Timeline:
    """After the revert (20) both replicas serve one canary request a second; replica-0's stop
    after ``replica_0_until`` while replica-1's go on to the end (40)."""
    rows = synth.rows("canary.success", [1.0] * int(replica_0_until - 20), start=20.5, labels=REPLICA_0)
    rows += synth.rows("canary.success", [1.0] * 20, start=20.75, labels=REPLICA_1)
    return synth.timeline(rows, **MARKS)


def test_a_replica_that_went_quiet_fails_its_windowed_recovery_slo(synth: Synth) -> None:
    # replica-0 served 20-25 and was then out of rotation until the end: its last 5 s window
    # (ending at the phase's last reading, 39.75) holds no request.
    result = evaluate_slo(rotation_run(synth, replica_0_until=25), spec(REPLICA_0_SERVES_AFTER).slos[0])
    assert not result.ok and result.observed is None
    assert result.reason.startswith("no samples of canary.success{replica=replica-0} in the last 5 s")
    # Serving to the end, it passes.
    result = evaluate_slo(rotation_run(synth, replica_0_until=40), spec(REPLICA_0_SERVES_AFTER).slos[0])
    assert result.ok and result.observed == 1.0


def test_recovery_is_not_confirmed_on_a_window_left_empty(synth: Synth) -> None:
    # replica-0 answered once (20.5) and then went quiet while replica-1 served on: its 5 s
    # window is ok until 25.5 and empty from then, so a 5 s hold from 20.5 never completes.
    both = spec(
        REPLICA_0_SERVES_AFTER,
        REPLICA_0_SERVES_AFTER.replace("replica_0", "replica_1").replace("replica-0", "replica-1"),
        recovery="{within_s: 30, hold_s: 5, steady: [replica_0_serves_after, replica_1_serves_after]}",
    )
    result = recover(rotation_run(synth, replica_0_until=21), both)
    assert result is not None and not result.recovered
    result = recover(rotation_run(synth, replica_0_until=40), both)
    assert result is not None and result.recovered and result.time_to_recover_s == 0.75


def test_a_labelled_relative_threshold_scales_from_that_replicas_own_baseline(synth: Synth) -> None:
    # replica-0 answered in 0.1 s and replica-1 in 1.0 s before the fault; during it both take
    # 0.5 s. replica-0 is 5x its own baseline (fails 3x); replica-1 is faster than its own.
    survivor = (
        '{name: survivor_ttft, probe: canary.ttft_s, labels: {replica: REPLICA}, agg: p95, op: "<=",'
        " threshold: {times_baseline: 3}, phase: during}"
    )
    rows = synth.rows("canary.ttft_s", [0.1] * 10, labels=REPLICA_0)
    rows += synth.rows("canary.ttft_s", [1.0] * 10, labels=REPLICA_1)
    rows += synth.rows("canary.ttft_s", [0.5] * 10, start=10, labels=REPLICA_0)
    rows += synth.rows("canary.ttft_s", [0.5] * 10, start=10, labels=REPLICA_1)
    timeline = synth.timeline(rows, **MARKS)
    on_0 = evaluate_slo(timeline, spec(survivor.replace("REPLICA", "replica-0")).slos[0])
    on_1 = evaluate_slo(timeline, spec(survivor.replace("REPLICA", "replica-1")).slos[0])
    assert (on_0.ok, on_0.baseline, on_0.threshold) == (False, 0.1, 0.30000000000000004)
    assert (on_1.ok, on_1.baseline, on_1.threshold) == (True, 1.0, 3.0)


# Failed reads of a replica's server are readings of "not up" for its availability.

REPLICA_0_UP = (
    '{name: replica_0_up, probe: vllm.healthy, labels: {replica: replica-0}, agg: mean, op: ">=",'
    " threshold: 0.9, phase: during}"
)


def test_a_replica_that_answers_one_read_in_two_is_not_available(synth: Synth) -> None:
    # replica-0's /metrics failed on every odd tick of the fault and said healthy on the even
    # ones: half its reads are no answer, and it fails an availability SLO of 0.9.
    odd = set(range(11, 20, 2))
    timeline = synth.timeline(
        replica(synth, "replica-0", "vllm.healthy", 1.0, odd)
        + replica(synth, "replica-1", "vllm.healthy", 1.0, set()),
        **MARKS,
    )
    result = evaluate_slo(timeline, spec(REPLICA_0_UP).slos[0])
    assert not result.ok and result.observed == 0.5 and result.samples == 10
    neighbour = spec(REPLICA_0_UP.replace("replica_0", "replica_1").replace("replica-0", "replica-1"))
    assert evaluate_slo(timeline, neighbour.slos[0]).ok, "replica-0's failed reads are not replica-1's"
    # A queue length says nothing when its read fails: the same gaps leave it passing.
    queue = evaluate_slo(
        queue_run(synth, silent_0=odd), spec(QUEUE_AFTER.replace("recovery", "during")).slos[0]
    )
    assert queue.ok
