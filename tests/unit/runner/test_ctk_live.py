"""The live hypothesis of a plain `chaos run`: what each SLO probe judges before and after the
method, and that every local experiment's hypothesis lists its baseline and recovery SLOs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from inferchaos.experiments.ctk_live import sampled, slo_live, slo_met
from inferchaos.experiments.spec import ROLLBACK_PREFIX, ensure_experiment_is_valid, load_experiment
from inferchaos.steady_state.timeline import Row, Timeline, TimelineWriter

EXPERIMENTS = Path(__file__).resolve().parents[3] / "experiments"
LOCAL = sorted(
    p for p in EXPERIMENTS.glob("*.yaml") if yaml.safe_load(p.read_text())["environment"]["name"] == "local"
)

T0 = 1_800_000_000.0
SERVES_BEFORE = {"name": "serves_before", "probe": "canary.success", "agg": "mean", "op": ">=", "threshold": 0.9,
                 "phase": "baseline"}  # fmt: skip
TTFT_AFTER = {"name": "ttft_after", "probe": "canary.ttft_s", "agg": "p95", "op": "<=",
              "threshold": {"times_baseline": 3, "at_least": 0.3}, "phase": "recovery", "window_s": 5}  # fmt: skip
SERVES_AFTER = {"name": "serves_after", "probe": "canary.success", "agg": "mean", "op": ">=", "threshold": 0.9,
                "phase": "recovery", "window_s": 3}  # fmt: skip
RECOVERY = {"within_s": 30, "hold_s": 3, "steady": ["ttft_after", "serves_after"]}
STEADY = [TTFT_AFTER, SERVES_AFTER]


def _timeline(path: Path, after: list[tuple[float, float, float]] | None) -> None:
    """A baseline of 8 s (every request served in 0.2 s) and, when ``after`` is given, the samples
    after the method as (seconds after it, success, ttft); no samples while the method ran."""
    with TimelineWriter(path) as writer:
        timeline = Timeline(writer)
        timeline.mark("baseline_start", T0)
        for k in range(16):
            t = T0 + k / 2
            timeline.append_tick([Row(t, "canary.success", {}, 1.0), Row(t, "canary.ttft_s", {}, 0.2)])
        timeline.mark("injected", T0 + 8)
        if after is None:
            return
        timeline.mark("reverted", T0 + 40)
        for at, ok, ttft in after:
            t = T0 + 40 + at
            timeline.append_tick([Row(t, "canary.success", {}, ok), Row(t, "canary.ttft_s", {}, ttft)])
        timeline.mark("end", T0 + 40 + after[-1][0])


def _judge(path: Path, slo: dict[str, Any]) -> dict[str, Any]:
    return slo_live(slo, str(path), RECOVERY, STEADY)


def test_before_the_method_every_slo_is_judged_over_the_baseline(tmp_path: Path) -> None:
    path = tmp_path / "timeline.csv"
    _timeline(path, None)
    for slo in (SERVES_BEFORE, TTFT_AFTER, SERVES_AFTER):
        judged = _judge(path, slo)
        assert judged["phase"] == "baseline" and judged["samples"] == 16, judged
        assert slo_met(judged) is True, judged
    # A recovery SLO must hold at rest too, with its baseline-relative threshold from this baseline.
    assert _judge(path, TTFT_AFTER)["threshold"] == pytest.approx(0.6)


def test_after_the_method_slos_are_judged_over_the_hold_that_confirmed_recovery(tmp_path: Path) -> None:
    # 10 s of failed, slow requests after the revert, then served in 0.25 s: back from +10.
    after = [(k / 2, 0.0 if k < 20 else 1.0, 5.0 if k < 20 else 0.25) for k in range(32)]
    path = tmp_path / "timeline.csv"
    _timeline(path, after)
    for slo in (SERVES_BEFORE, TTFT_AFTER, SERVES_AFTER):
        judged = _judge(path, slo)
        assert judged["phase"] == "recovery" and slo_met(judged) is True, judged
    # The baseline SLO counted only the hold: over the whole recovery phase its mean is 0.375.
    assert _judge(path, SERVES_BEFORE)["observed"] == 1.0
    assert _judge(path, TTFT_AFTER)["observed"] == pytest.approx(0.25)


def test_after_the_method_a_platform_that_did_not_recover_misses(tmp_path: Path) -> None:
    after = [(k / 2, 1.0, 0.9) for k in range(32)]  # served, but 4.5 x slower than the baseline
    path = tmp_path / "timeline.csv"
    _timeline(path, after)
    judged = _judge(path, TTFT_AFTER)
    assert slo_met(judged) is False and judged["observed"] == pytest.approx(0.9), judged
    assert judged["threshold"] == pytest.approx(0.6)
    assert slo_met(_judge(path, SERVES_BEFORE)) is True


def test_tolerances_need_a_value() -> None:
    assert slo_met() is False and slo_met({"ok": False}) is False
    assert sampled() is False and sampled({"ticks": 0}) is False and sampled({"ticks": 9}) is True


@pytest.mark.parametrize("path", LOCAL, ids=lambda p: p.stem)
def test_the_hypothesis_lists_the_baseline_and_recovery_slos_as_declared(path: Path) -> None:
    spec = ensure_experiment_is_valid(load_experiment(path), path)
    raw = spec.raw
    declared = [s for s in raw["slos"] if s["phase"] in ("baseline", "recovery")]
    probes = raw["steady-state-hypothesis"]["probes"]
    live = [p for p in probes if p["provider"]["func"] == "slo_live"]
    assert [p["provider"]["arguments"]["slo"] for p in live] == declared
    assert [p["name"] for p in live] == [s["name"] for s in declared]
    by_name = {s["name"]: s for s in raw["slos"]}
    steady = [by_name[name] for name in raw["recovery"]["steady"]]
    for probe in live:
        assert probe["provider"]["arguments"]["recovery"] == raw["recovery"]
        assert probe["provider"]["arguments"]["steady"] == steady
    (sampler,) = [p for p in probes if p["provider"]["func"] == "sample_steady_state"]
    assert sampler["provider"]["arguments"]["slos"] == declared
    assert sampler["provider"]["arguments"]["baseline_s"] == spec.baseline_s
    # The method reverts its fault last, so that the hypothesis after it judges recovery.
    last = raw["method"][-1]["provider"]
    assert (last["module"], last["func"]) == (spec.fault.module, f"{ROLLBACK_PREFIX}{spec.fault.func}")
