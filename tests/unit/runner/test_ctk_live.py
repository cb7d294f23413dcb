"""The live hypothesis of a plain `chaos run`: what each SLO probe judges before and after the
method, and that every local experiment's hypothesis lists all its SLOs, with a sampler beside
the fault for the during-phase ones."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from inferchaos.ctk.live import sampled, slo_live, slo_met
from inferchaos.run.spec import ROLLBACK_PREFIX, ensure_experiment_is_valid, load_experiment
from inferchaos.steady_state.canary import CanaryPace
from inferchaos.steady_state.timeline import Row, Timeline, TimelineWriter

EXPERIMENTS = Path(__file__).resolve().parents[3] / "experiments"
LOCAL = sorted(
    p for p in EXPERIMENTS.glob("*.yaml") if yaml.safe_load(p.read_text())["environment"]["name"] == "local"
)

T0 = 1_800_000_000.0
SERVES_BEFORE = {
    "name": "serves_before",
    "probe": "canary.success",
    "agg": "mean",
    "op": ">=",
    "threshold": 0.9,
    "phase": "baseline",
}
TTFT_AFTER = {
    "name": "ttft_after",
    "probe": "canary.ttft_s",
    "agg": "p95",
    "op": "<=",
    "threshold": {"times_baseline": 3, "at_least": 0.3},
    "phase": "recovery",
    "window_s": 5,
}
SERVES_AFTER = {
    "name": "serves_after",
    "probe": "canary.success",
    "agg": "mean",
    "op": ">=",
    "threshold": 0.9,
    "phase": "recovery",
    "window_s": 3,
}
# Judged only while the fault acts: a slowed replica's share of the traffic, from 5 s in.
SLOW_SHARE = {
    "name": "slow_share",
    "probe": "canary.routed",
    "labels": {"replica": "replica-0"},
    "agg": "mean",
    "op": "<=",
    "threshold": 0.1,
    "phase": "during",
    "after_s": 5,
}
RECOVERY = {"within_s": 30, "hold_s": 3, "steady": ["ttft_after", "serves_after"]}
STEADY = [TTFT_AFTER, SERVES_AFTER]


def _timeline(
    path: Path, after: list[tuple[float, float, float]] | None, share: list[tuple[float, float]] = ()
) -> None:
    """A baseline of 8 s (every request served in 0.2 s, half of them by replica-0), replica-0's
    ``share`` of the requests while the method ran as (seconds after the injection, share) and,
    when ``after`` is given, the samples after the method as (seconds after it, success, ttft)."""
    with TimelineWriter(path) as writer:
        timeline = Timeline(writer)
        timeline.mark("baseline_start", T0)
        for k in range(16):
            t = T0 + k / 2
            timeline.append_tick(
                [
                    Row(t, "canary.success", {}, 1.0),
                    Row(t, "canary.ttft_s", {}, 0.2),
                    Row(t, "canary.routed", {"replica": "replica-0"}, 0.5),
                ]
            )
        timeline.mark("injected", T0 + 8)
        for at, routed in share:
            timeline.append_tick([Row(T0 + 8 + at, "canary.routed", {"replica": "replica-0"}, routed)])
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


def test_a_during_slo_is_not_judged_before_the_method_and_is_judged_over_the_fault_after_it(
    tmp_path: Path,
) -> None:
    before = tmp_path / "before.csv"
    _timeline(before, None)
    # At rest replica-0 takes half the requests: a during SLO that holds only under the fault.
    judged = _judge(before, SLOW_SHARE)
    assert slo_met(judged) is True and judged["samples"] == 0 and judged["observed"] is None, judged
    assert "judged after the method" in judged["reason"]
    served = [(k / 2, 1.0, 0.2) for k in range(16)]
    # Routed away within 4 s of the injection: from 5 s in, replica-0 took nothing.
    away = tmp_path / "away.csv"
    _timeline(away, served, share=[(k / 2, 0.5 if k < 8 else 0.0) for k in range(60)])
    judged = _judge(away, SLOW_SHARE)
    assert judged["phase"] == "during" and slo_met(judged) is True and judged["observed"] == 0.0, judged
    # Still taking a third of the requests: the hypothesis after the method misses.
    kept = tmp_path / "kept.csv"
    _timeline(kept, served, share=[(k / 2, 0.33) for k in range(60)])
    judged = _judge(kept, SLOW_SHARE)
    assert slo_met(judged) is False and judged["observed"] == pytest.approx(0.33), judged
    # Nothing sampled while the fault acted (no sampler in the method): missed, never passed.
    blind = tmp_path / "blind.csv"
    _timeline(blind, served)
    judged = _judge(blind, SLOW_SHARE)
    assert slo_met(judged) is False and judged["samples"] == 0, judged


def test_tolerances_need_a_value() -> None:
    assert slo_met() is False and slo_met({"ok": False}) is False
    assert sampled() is False and sampled({"ticks": 0}) is False and sampled({"ticks": 9}) is True
    # Samples over which the platform steady state failed do not meet it.
    assert sampled({"ticks": 9, "platform_failures": ["platform.replica-1.serves_after: ..."]}) is False


@pytest.mark.parametrize("path", LOCAL, ids=lambda p: p.stem)
def test_the_hypothesis_lists_every_slo_as_declared_and_the_method_samples_beside_the_fault(
    path: Path,
) -> None:
    spec = ensure_experiment_is_valid(load_experiment(path), path)
    raw = spec.raw
    declared = [s for s in raw["slos"] if s["phase"] in ("baseline", "recovery")]
    during = [s for s in raw["slos"] if s["phase"] == "during"]
    probes = raw["steady-state-hypothesis"]["probes"]
    live = [p for p in probes if p["provider"]["func"] == "slo_live"]
    assert [p["provider"]["arguments"]["slo"] for p in live] == declared + during
    assert [p["name"] for p in live] == [s["name"] for s in declared + during]
    # Started first and in the background, so that it samples while the fault's action runs.
    first = raw["method"][0]
    assert first["background"] is True and first["provider"]["func"] == "sample_during", first
    assert first["provider"]["arguments"]["fault"] == spec.fault.fault
    by_name = {s["name"]: s for s in raw["slos"]}
    steady = [by_name[name] for name in raw["recovery"]["steady"]]
    for probe in live:
        assert probe["provider"]["arguments"]["recovery"] == raw["recovery"]
        assert probe["provider"]["arguments"]["steady"] == steady
        # The canary's timeout caps the relative latency bounds as in the runner (kv_flood's is 30 s).
        timeout = probe["provider"]["arguments"].get("canary_timeout_s", CanaryPace().request_timeout_s)
        assert timeout == spec.canary_timeout_s, probe["name"]
    (sampler,) = [p for p in probes if p["provider"]["func"] == "sample_steady_state"]
    # Every SLO, during-phase ones too: the baseline samples on while one has nothing to scale from.
    assert sampler["provider"]["arguments"]["slos"] == raw["slos"]
    assert sampler["provider"]["arguments"]["baseline_s"] == spec.baseline_s
    # What the fault may take out, so that the platform steady state is judged as in the runner.
    assert sampler["provider"]["arguments"].get("platform") == raw.get("platform")
    # The canary waits as long for its answers, with as many in flight, as in the runner
    # (kv_flood's queue takes 30 s).
    for arguments in (sampler["provider"]["arguments"], first["provider"]["arguments"]):
        assert arguments.get("canary_timeout_s", CanaryPace().request_timeout_s) == spec.canary_timeout_s
        assert arguments.get("canary_max_in_flight", CanaryPace().max_in_flight) == spec.canary_max_in_flight
    # The method reverts its fault last, so that the hypothesis after it judges recovery.
    last = raw["method"][-1]["provider"]
    assert (last["module"], last["func"]) == (spec.fault.module, f"{ROLLBACK_PREFIX}{spec.fault.func}")
