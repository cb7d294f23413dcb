"""SLO verdicts, phases, time to detect and time to recover on synthetic timelines.

The story of the main timeline (seconds after t0): baseline 0-10, fault injected at 10,
canary TTFT 2.0 s from 12 to 24 (0.1 s otherwise), canary failures 13-17, reverted at 20,
end at 40.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml

from inferchaos.steady_state.evaluation import (
    detect,
    evaluate,
    evaluate_slo,
    phase_windows,
    recover,
)
from inferchaos.steady_state.slo import Phase, SloSpec, ensure_slos_are_valid
from inferchaos.steady_state.timeline import Row, Timeline, TimelineWriter, read_timeline

if TYPE_CHECKING:
    from conftest import Synth

MARKS = {"baseline_start": 0, "injected": 10, "reverted": 20, "end": 40}


def ttft_values() -> list[float]:
    return [2.0 if 12 <= t <= 24 else 0.1 for t in range(41)]


def success_values() -> list[float]:
    return [0.0 if 13 <= t <= 17 else 1.0 for t in range(41)]


@pytest.fixture
def run(synth: Synth) -> Timeline:
    return synth.timeline(
        synth.rows("canary.ttft_s", ttft_values()),
        synth.rows("canary.success", success_values()),
        synth.rows("vllm.kv_cache_usage", [0.2] * 41, labels={"replica": "replica-0"}),
        synth.rows("vllm.kv_cache_usage", [0.97] * 41, labels={"replica": "replica-1"}),
        **MARKS,
    )


def spec(*slos: str, recovery: str | None = None) -> SloSpec:
    """SloSpec from YAML-flow SLO entries, e.g. ``{name: a, probe: ..., ...}``."""
    doc: dict[str, object] = {"slos": [yaml.safe_load(s) for s in slos]}
    if recovery:
        doc["recovery"] = yaml.safe_load(recovery)
    return ensure_slos_are_valid(doc)


TTFT = '{name: ttft, probe: canary.ttft_s, agg: p95, op: "<=", threshold: 1.5, phase: during}'
AVAILABILITY = (
    '{name: availability, probe: canary.success, agg: mean, op: ">=", threshold: 0.99, phase: during}'
)


# Phase slicing


def test_phases_are_cut_at_the_marks(run: Timeline, synth: Synth) -> None:
    windows = phase_windows(run)
    t0 = synth.t0
    baseline, during, recovery = windows[Phase.BASELINE], windows[Phase.DURING], windows[Phase.RECOVERY]
    assert (baseline.start, baseline.end, during.start, during.end) == (t0, t0 + 10, t0 + 10, t0 + 20)
    assert (recovery.start, recovery.end) == (t0 + 20, t0 + 40)
    # A reading taken at the injection belongs to the fault; the last reading to recovery.
    assert not baseline.contains(t0 + 10) and during.contains(t0 + 10)
    assert not during.contains(t0 + 20) and recovery.contains(t0 + 20) and recovery.contains(t0 + 40)


def test_a_run_killed_during_the_fault_has_no_recovery_phase(synth: Synth) -> None:
    timeline = synth.timeline(synth.rows("canary.success", [1.0] * 15), injected=10)
    windows = phase_windows(timeline)
    assert set(windows) == {Phase.BASELINE, Phase.DURING}
    assert windows[Phase.BASELINE].start == synth.t0  # no baseline_start mark: the first row
    assert windows[Phase.DURING].end == synth.t0 + 14 and windows[Phase.DURING].closed  # the last row


def test_an_empty_timeline_has_no_phases() -> None:
    assert phase_windows(Timeline()) == {}


# SLO verdicts


def test_baseline_slo_holds_on_baseline_data_only(run: Timeline) -> None:
    slo = spec(TTFT.replace("during", "baseline")).slos[0]
    result = evaluate_slo(run, slo)
    assert result.ok and result.observed == pytest.approx(0.1) and result.samples == 10


def test_during_slo_breaches(run: Timeline) -> None:
    result = evaluate_slo(run, spec(TTFT).slos[0])
    assert not result.ok
    assert result.observed == pytest.approx(2.0)
    assert "p95(canary.ttft_s) = 2, needs <= 1.5" in result.reason


def test_availability_is_the_mean_of_successes(run: Timeline) -> None:
    result = evaluate_slo(run, spec(AVAILABILITY).slos[0])
    assert result.observed == pytest.approx(5 / 10) and not result.ok


def test_labels_select_one_replica(run: Timeline) -> None:
    base = '{name: kv, probe: vllm.kv_cache_usage, agg: max, op: "<=", threshold: 0.95, phase: baseline'
    replica0 = evaluate_slo(run, spec(base + ", labels: {replica: replica-0}}").slos[0])
    every = evaluate_slo(run, spec(base + "}").slos[0])
    assert replica0.ok and replica0.observed == pytest.approx(0.2)
    assert not every.ok and every.observed == pytest.approx(0.97)


def test_no_samples_is_a_failure_with_a_reason(run: Timeline) -> None:
    slo = spec(
        '{name: q, probe: vllm.num_requests_waiting, agg: max, op: "<=", threshold: 0, phase: during}'
    ).slos[0]
    result = evaluate_slo(run, slo)
    assert (result.ok, result.observed) == (False, None)
    assert result.reason == "no samples of vllm.num_requests_waiting in the during phase"


def test_a_phase_that_never_happened_is_a_failure_with_a_reason(synth: Synth) -> None:
    timeline = synth.timeline(synth.rows("canary.ttft_s", [0.1] * 5), baseline_start=0)
    result = evaluate_slo(timeline, spec(TTFT).slos[0])
    assert (result.ok, result.observed) == (False, None)
    assert "during phase never happened" in result.reason


def test_windowed_slo_must_hold_in_every_window(run: Timeline) -> None:
    # Over the whole during phase 50 % succeed; the worst 3 s window has no success at all.
    whole = evaluate_slo(run, spec(AVAILABILITY.replace("0.99", "0.4")).slos[0])
    windowed = evaluate_slo(
        run, spec(AVAILABILITY.replace("0.99", "0.4").replace("}", ", window_s: 3}")).slos[0]
    )
    assert whole.ok and whole.observed == pytest.approx(0.5)
    assert not windowed.ok and windowed.observed == 0.0


def test_rate_is_computed_per_replica_and_summed(synth: Synth) -> None:
    timeline = synth.timeline(
        synth.rows("vllm.num_preemptions_total", [0, 1, 2, 3, 4], labels={"replica": "replica-0"}),
        synth.rows("vllm.num_preemptions_total", [100, 102, 104, 106, 108], labels={"replica": "replica-1"}),
        baseline_start=0,
        end=4,
    )
    slo = spec(
        '{name: p, probe: vllm.num_preemptions_total, agg: rate, op: "<=", threshold: 1, phase: baseline}'
    )
    result = evaluate_slo(timeline, slo.slos[0])
    assert result.observed == pytest.approx(3.0) and not result.ok


def test_verdict_per_layer_is_the_worst_of_its_slos(run: Timeline) -> None:
    kv = '{name: kv, probe: vllm.kv_cache_usage, agg: max, op: "<=", threshold: 0.5, phase: baseline, labels: {replica: replica-0}}'
    ttft_baseline = TTFT.replace("during", "baseline").replace("name: ttft", "name: ttft_baseline")
    evaluation = evaluate(run, spec(kv, ttft_baseline, AVAILABILITY))
    layers = {v.layer: v for v in evaluation.layers}
    assert layers["vllm"].ok and layers["vllm"].slos == ("kv",)
    assert not layers["canary"].ok and layers["canary"].slos == ("ttft_baseline", "availability")
    assert not evaluation.ok


def test_results_carry_the_verdict_json_fields(run: Timeline) -> None:
    entry = evaluate_slo(run, spec(TTFT).slos[0]).to_dict()
    assert {"name", "layer", "phase", "ok", "observed", "op", "threshold"} <= set(entry)
    assert (entry["name"], entry["layer"], entry["phase"], entry["op"], entry["threshold"]) == (
        "ttft",
        "canary",
        "during",
        "<=",
        1.5,
    )


# Time to detect


def test_time_to_detect_is_the_first_breach_of_any_during_slo(run: Timeline, synth: Synth) -> None:
    detection = detect(run, spec(AVAILABILITY, TTFT))
    assert detection is not None
    assert (detection.slo, detection.time_to_detect_s, detection.observed) == ("ttft", 2.0, 2.0)
    assert detection.at == synth.t0 + 12


def test_time_to_detect_per_window(run: Timeline) -> None:
    per_sample = detect(run, spec(AVAILABILITY.replace("0.99", "0.5")))
    windowed = detect(run, spec(AVAILABILITY.replace("0.99", "0.5").replace("}", ", window_s: 5}")))
    assert per_sample is not None and per_sample.time_to_detect_s == 3.0  # the first failure, at 13
    # Windows clipped to the fault: at 15 the window 11-15 holds 2 of 5 successes.
    assert (
        windowed is not None and windowed.time_to_detect_s == 5.0 and windowed.observed == pytest.approx(0.4)
    )


def test_baseline_breaches_are_not_detections(synth: Synth) -> None:
    timeline = synth.timeline(synth.rows("canary.ttft_s", [3.0] * 10 + [0.1] * 10), injected=10, reverted=15)
    assert detect(timeline, spec(TTFT)) is None


def test_nothing_detected_when_no_slo_breaks(run: Timeline) -> None:
    assert detect(run, spec(TTFT.replace("1.5", "5"))) is None


# Time to recover


def recovery_spec(hold_s: float = 5, within_s: float = 90) -> SloSpec:
    return spec(
        TTFT,
        AVAILABILITY,
        recovery=f"{{within_s: {within_s}, hold_s: {hold_s}, steady: [ttft, availability]}}",
    )


def test_recovers_when_every_steady_slo_held_for_hold_s(run: Timeline, synth: Synth) -> None:
    result = recover(run, recovery_spec(hold_s=5))
    assert result is not None and result.recovered
    # TTFT back to 0.1 s at 25; availability was back at 18, before the revert.
    assert result.time_to_recover_s == 5.0
    assert (result.steady_at, result.confirmed_at) == (synth.t0 + 25, synth.t0 + 30)


def test_never_recovers(synth: Synth) -> None:
    ttft = [0.1] * 10 + [2.0] * 31
    timeline = synth.timeline(
        synth.rows("canary.ttft_s", ttft), synth.rows("canary.success", [1.0] * 41), **MARKS
    )
    result = recover(timeline, recovery_spec())
    assert result is not None
    assert (result.recovered, result.time_to_recover_s) == (False, None)
    assert result.failing_at_end == ("ttft",)
    assert "did not hold for 5 s" in result.reason


def test_recovering_after_within_s_is_not_recovering(run: Timeline) -> None:
    result = recover(run, recovery_spec(within_s=3))
    assert result is not None and not result.recovered


def first_within_spec(ttft_first_within_s: float) -> SloSpec:
    return spec(
        TTFT,
        AVAILABILITY,
        recovery=f"{{within_s: 15, hold_s: 5, steady: [ttft, availability], first_within_s: {{ttft: {ttft_first_within_s}}}}}",
    )


def up_to(timeline: Timeline, synth: Synth, last: float) -> Timeline:
    return synth.timeline(
        *[
            [r for r in timeline.rows if r.probe == p and r.t <= synth.t0 + last]
            for p in ("canary.ttft_s", "canary.success")
        ],
        injected=10,
        reverted=20,
    )


def test_a_step_late_for_its_own_deadline_fails_recovery_once_the_deadline_has_passed(
    run: Timeline, synth: Synth
) -> None:
    # TTFT is back 5 s after the revert: within the 15 s window, late for its own 3 s.
    result = recover(run, first_within_spec(3))
    assert result is not None and not result.recovered and result.settled
    assert result.missed == ("ttft",)
    assert result.reason == "ttft did not hold for 5 s from within 3 s of the revert (its own deadline)"
    # TTFT failed at every moment within its deadline (20 + 3): settled as soon as the samples
    # reach the deadline, not a hold later; a runner or a chaos run may stop waiting then, not
    # before, and not for a deadline that was met.
    early = recover(up_to(run, synth, 22), first_within_spec(3))
    assert early is not None and not early.settled
    at_deadline = recover(up_to(run, synth, 23), first_within_spec(3))
    assert at_deadline is not None and at_deadline.settled
    assert (at_deadline.missed, at_deadline.reason) == (result.missed, result.reason)
    met = recover(run, first_within_spec(6))
    assert met is not None and met.recovered and met.missed == () and met.time_to_recover_s == 5.0


def test_a_hold_begun_within_the_deadline_keeps_it_open_until_it_ends_or_breaks(synth: Synth) -> None:
    # TTFT is back at +2 s (t 22), within its 3 s deadline: whether it held 5 s from there is
    # known only at t 27, or as soon as it breaks.
    ttft = [2.0 if 12 <= t <= 21 else 0.1 for t in range(41)]
    held = synth.timeline(
        synth.rows("canary.ttft_s", ttft), synth.rows("canary.success", [1.0] * 41), **MARKS
    )
    for last in (23, 26):
        open_ = recover(up_to(held, synth, last), first_within_spec(3))
        assert open_ is not None and not open_.settled and open_.missed == ()
    done = recover(held, first_within_spec(3))
    assert done is not None and done.recovered and done.missed == ()
    broke = [2.0 if 12 <= t <= 21 or t == 25 else 0.1 for t in range(41)]
    broken = synth.timeline(
        synth.rows("canary.ttft_s", broke), synth.rows("canary.success", [1.0] * 41), **MARKS
    )
    settled = recover(up_to(broken, synth, 25), first_within_spec(3))
    assert settled is not None and settled.settled and settled.missed == ("ttft",)


def test_a_step_never_sampled_after_the_revert_misses_its_deadline(synth: Synth) -> None:
    silent = synth.timeline(
        synth.rows("canary.ttft_s", [0.1] * 20), synth.rows("canary.success", [1.0] * 41), **MARKS
    )
    result = recover(silent, first_within_spec(3))
    assert result is not None and result.missed == ("ttft",) and result.settled


def test_a_steady_slo_with_no_sample_once_the_window_has_passed_settles_recovery(synth: Synth) -> None:
    """No request reaches the replica any more (the router gave up on it): its SLO has nothing to
    be steady on. Once the other readings pass the window, no hold can start in it."""
    silent = synth.timeline(
        synth.rows("canary.ttft_s", [0.1] * 20), synth.rows("canary.success", [1.0] * 41), **MARKS
    )
    result = recover(silent, recovery_spec(within_s=15))
    assert result is not None and not result.recovered and result.settled
    assert result.blocked_by == ("ttft",)
    # Inside the window a first sample may still come and start a hold.
    early = synth.timeline(
        synth.rows("canary.ttft_s", [0.1] * 20), synth.rows("canary.success", [1.0] * 30), **MARKS
    )
    result = recover(early, recovery_spec(within_s=15))
    assert result is not None and not result.recovered and not result.settled


def cold_start_rows(synth: Synth, seconds: float, start: float, count: int) -> list[Row]:
    return synth.rows("vllm.cold_start_s", [seconds] * count, start=start, labels={"replica": "replica-0"})


def test_a_window_of_cold_starts_is_sized_by_the_baselines_cold_start(run: Timeline, synth: Synth) -> None:
    # TTFT is back 5 s after the revert: too late for 3 s, in time for 2 cold starts of 4 s.
    scaled = spec(
        TTFT,
        AVAILABILITY,
        recovery="{within_s: 3, within_cold_starts: 2, hold_s: 5, steady: [ttft, availability]}",
    )
    slow_starts = synth.timeline(
        *(run.select(p) for p in ("canary.ttft_s", "canary.success")),
        cold_start_rows(synth, 4.0, 0, 10),
        **MARKS,
    )
    result = recover(slow_starts, scaled)
    assert result is not None and result.recovered and result.time_to_recover_s == 5.0
    assert result.within_s == 8.0
    # Fast starts leave the floor: 2 x 1 s is shorter than within_s.
    fast_starts = synth.timeline(
        *(run.select(p) for p in ("canary.ttft_s", "canary.success")),
        cold_start_rows(synth, 1.0, 0, 10),
        **MARKS,
    )
    result = recover(fast_starts, scaled)
    assert result is not None and not result.recovered and result.within_s == 3.0
    assert "from within 3 s of the revert (at least 3 s;" in result.reason


def test_only_the_baselines_cold_start_sizes_the_window(run: Timeline, synth: Synth) -> None:
    # A slow start-up after the injection is the fault's doing: it must not stretch the window
    # it is judged in. Without a baseline reading the window is within_s.
    scaled = spec(
        TTFT,
        AVAILABILITY,
        recovery="{within_s: 3, within_cold_starts: 2, hold_s: 5, steady: [ttft, availability]}",
    )
    late = synth.timeline(
        *(run.select(p) for p in ("canary.ttft_s", "canary.success")),
        cold_start_rows(synth, 30.0, 12, 20),
        **MARKS,
    )
    result = recover(late, scaled)
    assert result is not None and not result.recovered and result.within_s == 3.0


def test_a_window_of_cold_starts_says_what_it_was_sized_by(synth: Synth) -> None:
    never = synth.timeline(
        synth.rows("canary.ttft_s", [0.1] * 10 + [2.0] * 31),
        synth.rows("canary.success", [1.0] * 41),
        cold_start_rows(synth, 4.0, 0, 10),
        **MARKS,
    )
    scaled = spec(
        TTFT,
        AVAILABILITY,
        recovery="{within_s: 3, within_cold_starts: 2, hold_s: 5, steady: [ttft, availability]}",
    )
    result = recover(never, scaled)
    assert result is not None and not result.recovered
    assert "from within 8 s of the revert (2 x this platform's replica cold start)" in result.reason


def test_a_hold_the_samples_do_not_reach_is_not_confirmed(run: Timeline, synth: Synth) -> None:
    truncated = synth.timeline(
        *[
            [r for r in run.rows if r.probe == p and r.t <= synth.t0 + 27]
            for p in ("canary.ttft_s", "canary.success")
        ],
        injected=10,
        reverted=20,
    )
    result = recover(truncated, recovery_spec(hold_s=5))
    assert result is not None and not result.recovered


def test_a_single_bad_sample_restarts_the_hold(synth: Synth) -> None:
    ttft = [0.1] * 20 + [0.1, 0.1, 2.0, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1]
    timeline = synth.timeline(
        synth.rows("canary.ttft_s", ttft), synth.rows("canary.success", [1.0] * 31), injected=10, reverted=20
    )
    result = recover(timeline, recovery_spec(hold_s=3))
    assert result is not None and result.time_to_recover_s == 3.0  # from 23, after the blip at 22


def test_silence_after_the_revert_is_not_recovery(synth: Synth) -> None:
    # The canary only ever fails after the revert: no TTFT is measured at all.
    timeline = synth.timeline(
        synth.rows("canary.ttft_s", [0.1] * 20),
        synth.rows("canary.success", [1.0] * 20 + [0.0] * 21),
        **MARKS,
    )
    result = recover(timeline, recovery_spec())
    assert result is not None and not result.recovered
    assert result.reason == "no samples after the revert for ttft"


def test_no_revert_no_recovery(synth: Synth) -> None:
    timeline = synth.timeline(synth.rows("canary.ttft_s", [0.1] * 20), injected=10)
    result = recover(timeline, recovery_spec())
    assert result is not None and not result.recovered and result.reason == "the fault was never reverted"


def test_no_recovery_declared_no_recovery_result(run: Timeline) -> None:
    assert recover(run, spec(TTFT)) is None


def test_evaluation_timing_and_overall_verdict(run: Timeline) -> None:
    evaluation = evaluate(run, recovery_spec())
    assert evaluation.timing() == {"time_to_detect_s": 2.0, "time_to_recover_s": 5.0}
    assert not evaluation.ok  # the during SLOs breached


def test_the_csv_alone_gives_the_same_evaluation(run: Timeline, tmp_path: Path) -> None:
    path = tmp_path / "timeline.csv"
    with TimelineWriter(path) as writer:
        copy = Timeline(writer)
        for name, t in run.marks.items():
            copy.mark(name, t)
        copy.append_tick(run.rows)
    assert evaluate(read_timeline(path), recovery_spec()) == evaluate(run, recovery_spec())


# after_s: the time the platform is given to act before the during phase is judged


def test_after_s_judges_only_what_follows_the_grace_the_platform_is_given(run: Timeline) -> None:
    # Failures 13-17 fall in the first 8 s after the injection at 10; the rest of the phase serves.
    late = (
        '{name: late, probe: canary.success, agg: mean, op: ">=", threshold: 1.0, phase: during, after_s: 8}'
    )
    early = (
        '{name: early, probe: canary.success, agg: mean, op: ">=", threshold: 1.0, phase: during, after_s: 7}'
    )
    assert evaluate_slo(run, spec(late).slos[0]).ok
    result = evaluate_slo(run, spec(early).slos[0])
    assert not result.ok and result.observed == pytest.approx(2 / 3)  # readings at 17 (failed), 18, 19
    whole = evaluate_slo(run, spec(AVAILABILITY).slos[0])
    assert whole.samples > result.samples


def test_after_s_longer_than_the_phase_fails_closed(run: Timeline) -> None:
    never = '{name: never, probe: canary.success, agg: mean, op: ">=", threshold: 1.0, phase: during, after_s: 30}'
    result = evaluate_slo(run, spec(never).slos[0])
    assert not result.ok and result.observed is None
    assert "no samples" in result.reason


def test_a_breach_before_after_s_is_not_a_detection(run: Timeline, synth: Synth) -> None:
    late = (
        '{name: late, probe: canary.success, agg: mean, op: ">=", threshold: 1.0, phase: during, after_s: 8}'
    )
    assert detect(run, spec(late)) is None
    early = (
        '{name: early, probe: canary.success, agg: mean, op: ">=", threshold: 1.0, phase: during, after_s: 7}'
    )
    found = detect(run, spec(early))
    assert found is not None and found.at == synth.t0 + 17
