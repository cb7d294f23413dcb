"""Thresholds read from the run's own baseline: ``threshold: {times_baseline: N, at_least: M}``,
or ``{plus_baseline: P}`` for a fault that adds a fixed delay.

The same scenario must judge a slow machine and a fast one alike: "TTFT may triple" is a
statement about the platform, "TTFT under 0.5 s" one about the hardware.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml

from inferchaos.errors import ConfigError
from inferchaos.reports.formatting import threshold as threshold_text
from inferchaos.reports.verdict_schema import SloRecord
from inferchaos.run.spec import ensure_experiment_is_valid
from inferchaos.steady_state.evaluation import detect, evaluate, evaluate_slo, missing_baselines, recover
from inferchaos.steady_state.slo import Op, Phase, SloSpec, ensure_slos_are_valid
from inferchaos.steady_state.timeline import Timeline

if TYPE_CHECKING:
    from conftest import Synth

EXPERIMENTS = Path(__file__).resolve().parents[3] / "experiments"
MARKS = {"baseline_start": 0, "injected": 10, "reverted": 20, "end": 40}


def spec(*slos: str, recovery: str | None = None) -> SloSpec:
    doc: dict[str, object] = {"slos": [yaml.safe_load(s) for s in slos]}
    if recovery:
        doc["recovery"] = yaml.safe_load(recovery)
    return ensure_slos_are_valid(doc)


def ttft_run(synth: Synth, baseline: float, during: float, after: float) -> Timeline:
    values = [baseline if t < 10 else during if t < 20 else after for t in range(41)]
    return synth.timeline(synth.rows("canary.ttft_s", values), **MARKS)


TRIPLE = (
    '{name: ttft, probe: canary.ttft_s, agg: p95, op: "<=", threshold: {times_baseline: 3}, phase: during}'
)
TRIPLE_FLOOR = (
    '{name: ttft, probe: canary.ttft_s, agg: p95, op: "<=", threshold: {times_baseline: 3, at_least: 0.3},'
    " phase: during}"
)


@pytest.mark.parametrize(
    ("baseline", "during", "ok"),
    [
        (0.1, 0.25, True),  # a fast machine, TTFT x2.5
        (0.1, 0.35, False),  # the same machine, x3.5
        (0.6, 1.5, True),  # a machine six times slower, x2.5: the same verdict as the fast one
        (0.6, 2.1, False),
    ],
)
def test_the_verdict_follows_the_ratio_not_the_machine(
    synth: Synth, baseline: float, during: float, ok: bool
) -> None:
    (result,) = evaluate(ttft_run(synth, baseline, during, baseline), spec(TRIPLE)).slos
    assert result.ok is ok
    assert result.baseline == pytest.approx(baseline)
    assert result.threshold == pytest.approx(3 * baseline)


def test_the_verdict_records_both_numbers(synth: Synth) -> None:
    (result,) = evaluate(ttft_run(synth, 0.1, 0.5, 0.1), spec(TRIPLE)).slos
    entry = result.to_dict()
    assert entry["baseline"] == pytest.approx(0.1)
    assert entry["threshold"] == pytest.approx(0.3)
    assert entry["scale"] == "3 x baseline, at most 5"  # half the canary's 10 s timeout
    assert not entry["ok"]
    assert "3 x baseline 0.1" in result.reason


def test_a_floor_keeps_a_tiny_baseline_from_turning_jitter_into_a_breach(synth: Synth) -> None:
    (result,) = evaluate(ttft_run(synth, 0.005, 0.05, 0.005), spec(TRIPLE_FLOOR)).slos
    assert result.ok and result.threshold == pytest.approx(0.3)
    (breach,) = evaluate(ttft_run(synth, 0.005, 0.4, 0.005), spec(TRIPLE_FLOOR)).slos
    assert not breach.ok


PLUS = (
    '{name: ttft, probe: canary.ttft_s, agg: p95, op: "<=", threshold: {plus_baseline: 0.75}, phase: during}'
)


@pytest.mark.parametrize(
    ("baseline", "during", "ok"),
    [
        (0.05, 0.46, True),  # a fast machine: a 200 ms link costs the slowed path's users 0.4 s
        (0.05, 1.17, False),  # the same machine, every path slowed: 1.1 s more
        (0.6, 1.05, True),  # a slow machine, the same 0.45 s more: the same verdict as the fast one
        (0.6, 1.73, False),  # CI's control: 1.1 s more, which "3 x baseline" (1.8 s) let pass
    ],
)
def test_a_fixed_delay_is_judged_by_the_seconds_it_adds_not_the_ratio(
    synth: Synth, baseline: float, during: float, ok: bool
) -> None:
    (result,) = evaluate(ttft_run(synth, baseline, during, baseline), spec(PLUS)).slos
    assert result.ok is ok
    assert result.threshold == pytest.approx(baseline + 0.75)
    assert result.to_dict()["scale"] == "baseline + 0.75, at most 5"


def test_a_ratio_to_a_slow_baseline_passes_what_headroom_above_it_catches(synth: Synth) -> None:
    ci_control = ttft_run(synth, 0.6, 1.73, 0.6)
    assert evaluate(ci_control, spec(TRIPLE)).slos[0].ok
    assert not evaluate(ci_control, spec(PLUS)).slos[0].ok


@pytest.mark.parametrize("baseline_reads", ["missing", "failed"])
def test_no_baseline_samples_fails_closed(synth: Synth, baseline_reads: str) -> None:
    if baseline_reads == "missing":
        rows = synth.rows("canary.ttft_s", [0.1] * 31, start=10)
    else:
        rows = synth.rows("canary.ttft_s", [math.nan if t < 10 else 0.1 for t in range(41)])
    (result,) = evaluate(synth.timeline(rows, **MARKS), spec(TRIPLE)).slos
    assert not result.ok
    assert "no baseline" in result.reason
    assert result.to_dict()["threshold"] is None


SURVIVOR = (
    '{name: survivor_ttft, probe: canary.ttft_s, labels: {replica: replica-1}, agg: p95, op: "<=",'
    " threshold: {times_baseline: 7, at_least: 0.5}, phase: during}"
)
AVAILABILITY = (
    '{name: availability, probe: canary.success, agg: mean, op: ">=", threshold: 0.9, phase: during}'
)


def test_an_slo_with_no_baseline_fails_the_run_but_is_no_detection(synth: Synth) -> None:
    # The front door may send the whole baseline to replica-0, leaving survivor_ttft nothing to
    # scale from. It must fail closed, but not read as a breach at its first sample: triage
    # would then search the seconds before the hang could show and answer "unknown", where
    # the failed request names vLLM.
    survivor = synth.rows("canary.ttft_s", [0.05] * 30, start=10, labels={"replica": "replica-1"})
    replica_0 = synth.rows("canary.ttft_s", [0.05] * 10, labels={"replica": "replica-0"})
    served = synth.rows("canary.success", [1.0] * 41)
    result = evaluate(synth.timeline(survivor, replica_0, served, **MARKS), spec(SURVIVOR, AVAILABILITY))
    assert [(s.name, s.ok) for s in result.slos] == [("survivor_ttft", False), ("availability", True)]
    assert not result.ok and "no baseline" in result.slos[0].reason
    assert result.detection is None
    one_failed = synth.rows("canary.success", [0.0 if t == 15 else 1.0 for t in range(41)])
    detection = detect(synth.timeline(survivor, replica_0, one_failed, **MARKS), spec(SURVIVOR, AVAILABILITY))
    assert detection is not None and detection.slo == "availability"
    assert detection.time_to_detect_s == pytest.approx(5)


def test_missing_baselines_names_the_slos_the_baseline_gives_nothing_to_scale_from(synth: Synth) -> None:
    slos = spec(TRIPLE, SURVIVOR, AVAILABILITY).slos
    replica_0 = synth.rows("canary.ttft_s", [0.05] * 8, labels={"replica": "replica-0"})
    so_far = synth.timeline(replica_0, baseline_start=0)
    assert [slo.name for slo in missing_baselines(so_far, slos)] == ["survivor_ttft"]
    replica_1 = synth.rows("canary.ttft_s", [0.05], start=8, labels={"replica": "replica-1"})
    assert missing_baselines(synth.timeline(replica_0, replica_1, baseline_start=0), slos) == []


def test_detection_and_recovery_use_the_scaled_threshold(synth: Synth) -> None:
    slos = spec(
        TRIPLE,
        '{name: ttft_after, probe: canary.ttft_s, agg: p95, op: "<=", threshold: {times_baseline: 2},'
        " phase: recovery, window_s: 3}",
        recovery="{within_s: 15, hold_s: 3, steady: [ttft_after]}",
    )
    healthy_again = ttft_run(synth, 0.2, 1.0, 0.3)
    detection = detect(healthy_again, slos)
    assert detection is not None and detection.slo == "ttft"
    assert recover(healthy_again, slos) is not None and recover(healthy_again, slos).recovered  # type: ignore[union-attr]
    # Recovery to 0.5 s is 2.5 x a 0.2 s baseline: not back.
    still_slow = ttft_run(synth, 0.2, 1.0, 0.5)
    result = recover(still_slow, slos)
    assert result is not None and not result.recovered
    assert not evaluate_slo(still_slow, slos.by_name("ttft_after")).ok


TTFT_AFTER = (
    '{name: ttft_after, probe: canary.ttft_s, agg: p95, op: "<=", threshold: {times_baseline: 3, at_least: 0.3},'
    " phase: recovery, window_s: 5}"
)


def hold_then_slow_run(synth: Synth, slow_at: float) -> Timeline:
    """Two canary answers a second: 0.09 s before the fault, 1.0 s while it acts, 0.04 s after
    the revert (20) but for one answer of 0.53 s at ``slow_at``; the run ends at 24.25."""
    rows = []
    for k in range(48):
        t = k / 2
        value = 0.09 if t < 10 else 1.0 if t < 20 else 0.53 if t == slow_at else 0.04
        rows += synth.rows("canary.ttft_s", [value], start=t)
    return synth.timeline(rows, **{**MARKS, "end": 24.25})


def test_the_recovery_verdict_judges_the_seconds_the_recovery_hold_confirmed(synth: Synth) -> None:
    # A CPU-hog run's gpu_memory_squat: the hold from +20 confirmed recovery at +23, and the
    # runner stopped a tick later. One slow answer at +23.5 lay after the hold, yet the final
    # ttft_after verdict judged the window ending at the last reading (+24) and failed the run
    # that the recovery check had just passed. Both now read the same seconds.
    slos = spec(TTFT_AFTER, recovery="{within_s: 15, hold_s: 3, steady: [ttft_after]}")
    after_the_hold = evaluate(hold_then_slow_run(synth, slow_at=23.5), slos)
    assert after_the_hold.recovery is not None and after_the_hold.recovery.recovered
    assert after_the_hold.recovery.confirmed_at == synth.t0 + 23
    assert after_the_hold.ok and after_the_hold.slos[0].observed == pytest.approx(0.04)
    # Inside the hold, the same answer breaks it: no 3 s hold fits in what the run saw, so
    # the run neither recovered nor passes ttft_after, judged where it last looked.
    inside = evaluate(hold_then_slow_run(synth, slow_at=21.5), slos)
    assert inside.recovery is not None and not inside.recovery.recovered
    (ttft_after,) = inside.slos
    assert not ttft_after.ok and ttft_after.observed is not None and ttft_after.observed > 0.3


@pytest.mark.parametrize(
    ("threshold", "phase", "op", "message"),
    [
        ("{times_baseline: 3}", "baseline", "<=", "cannot be relative to the baseline it judges"),
        ("{times_baseline: 0}", "during", "<=", "times_baseline: must be more than 0"),
        ("{times_baseline: .nan}", "during", "<=", "times_baseline: must be a finite number"),
        ("{at_least: 0.3}", "during", "<=", "needs times_baseline"),
        ("{plus_baseline: 0}", "during", "<=", "plus_baseline: must be more than 0"),
        ("{plus_baseline: 0.5}", "during", ">=", "headroom above the baseline only makes sense for < and <="),
        ("{times_baseline: 3, per: p95}", "during", "<=", "unknown"),
        ("{times_baseline: 3}", "during", "==", "needs <, <=, > or >="),
        ("{times_baseline: 0.5, at_least: 1}", "during", ">=", "only makes sense for < and <="),
    ],
)
def test_bad_relative_thresholds_are_one_line_errors(
    threshold: str, phase: str, op: str, message: str
) -> None:
    entry = f'{{name: t, probe: canary.ttft_s, agg: p95, op: "{op}", threshold: {threshold}, phase: {phase}}}'
    with pytest.raises(ConfigError) as error:
        spec(entry)
    assert str(error.value).startswith("slos[0].threshold")
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_reports_show_how_the_threshold_was_read() -> None:
    record = SloRecord("ttft", "canary", Phase.DURING, False, 0.5, Op.LE, 0.3, 3, "", 0.1, "3 x baseline")
    assert threshold_text(record) == "<= 0.3 (3 x baseline 0.1)"
    floored = SloRecord(
        "ttft", "canary", Phase.DURING, True, 0.1, Op.LE, 0.3, 3, "", 0.05, "3 x baseline, at least 0.3"
    )
    assert threshold_text(floored) == "<= 0.3 (3 x baseline 0.05, at least 0.3)"
    added = SloRecord("ttft", "canary", Phase.DURING, False, 1.7, Op.LE, 1.35, 3, "", 0.6, "baseline + 0.75")
    assert threshold_text(added) == "<= 1.35 (baseline 0.6 + 0.75)"
    added = SloRecord("ttft", "canary", Phase.DURING, False, 1.7, Op.LE, 1.35, 3, "", 0.6, "baseline + 0.75")
    assert threshold_text(added) == "<= 1.35 (baseline 0.6 + 0.75)"
    missing = SloRecord("ttft", "canary", Phase.DURING, False, None, Op.LE, None, 0, "", None, "3 x baseline")
    assert threshold_text(missing) == "<= 3 x baseline (no baseline)"


def test_a_stop_condition_needs_a_number(tmp_path: Path) -> None:
    raw = yaml.safe_load((EXPERIMENTS / "kv_flood.yaml").read_text())
    raw["stop_conditions"][0]["threshold"] = {"times_baseline": 0.5}
    with pytest.raises(
        ConfigError, match=r"stop_conditions\[0\]\.threshold: a stop condition needs a number"
    ):
        ensure_experiment_is_valid(raw, tmp_path / "kv_flood.yaml")
