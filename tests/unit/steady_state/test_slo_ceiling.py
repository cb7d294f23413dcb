"""Bounds that can always fail: a relative threshold on the canary's latency gets a ceiling below
the canary's request timeout, and validation refuses a latency bound that could never be breached.

No canary latency reads more than the timeout (a failed request enters the percentiles at it), so
"30 x baseline" on a 0.34 s baseline (10.2 s) could never fail serve_controller_loss.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from inferchaos.errors import ConfigError
from inferchaos.run.spec import ensure_experiment_is_valid, load_and_validate
from inferchaos.steady_state.canary import CanaryPace
from inferchaos.steady_state.evaluation import evaluate
from inferchaos.steady_state.slo import (
    CANARY_LATENCY_PROBES,
    DEFAULT_CANARY_TIMEOUT_S,
    BaselineScale,
    Op,
    SloSpec,
    ensure_slos_are_valid,
)
from inferchaos.steady_state.timeline import Mark, Row, Timeline

EXPERIMENTS = Path(__file__).resolve().parents[3] / "experiments"
T0 = 1_800_000_000.0


def _slo(threshold: Any, *, probe: str = "canary.ttft_s", op: str = "<=", agg: str = "p95") -> dict[str, Any]:
    return {"name": "ttft", "probe": probe, "agg": agg, "op": op, "threshold": threshold, "phase": "during"}


def _spec(threshold: Any, canary_timeout_s: float = DEFAULT_CANARY_TIMEOUT_S, **kwargs: Any) -> SloSpec:
    return ensure_slos_are_valid({"slos": [_slo(threshold, **kwargs)]}, canary_timeout_s=canary_timeout_s)


def _run(baseline: float, during: float) -> Timeline:
    """10 s of baseline at ``baseline`` s TTFT, then 10 s of fault at ``during`` s."""
    timeline = Timeline()
    timeline.mark(Mark.BASELINE_START, T0)
    for t in range(20):
        timeline.append_tick([Row(T0 + t, "canary.ttft_s", {}, baseline if t < 10 else during)])
    timeline.mark(Mark.INJECTED, T0 + 10)
    timeline.mark(Mark.END, T0 + 20)
    return timeline


def test_the_default_ceiling_caps_a_slow_baseline_so_the_bound_can_fail() -> None:
    # serve_controller_loss's bound on a 0.34 s baseline: 10.2 s uncapped, past the 10 s timeout.
    spec = _spec({"times_baseline": 30, "at_least": 1.5})
    (result,) = evaluate(_run(0.34, 6.0), spec).slos
    assert result.threshold == pytest.approx(5.0)
    assert not result.ok, result.reason
    assert result.to_dict()["scale"] == "30 x baseline, at least 1.5, at most 5"


def test_below_the_ceiling_the_bound_still_scales_with_the_baseline() -> None:
    (result,) = evaluate(_run(0.1, 0.9), _spec({"times_baseline": 7, "at_least": 0.5})).slos
    assert result.threshold == pytest.approx(0.7)
    assert not result.ok


def test_a_declared_ceiling_caps_the_bound() -> None:
    spec = _spec({"times_baseline": 3, "at_most": 2})
    (slo,) = spec.slos
    assert slo.scale == BaselineScale(times=3.0, at_most=2.0)
    assert slo.scaled_by(1.5).threshold == pytest.approx(2.0)
    assert slo.threshold_text == "3 x baseline, at most 2"
    (result,) = evaluate(_run(1.5, 2.5), spec).slos
    assert not result.ok, "4.5 s uncapped would have passed"


def test_the_default_ceiling_follows_the_experiments_canary_timeout() -> None:
    (slo,) = _spec({"plus_baseline": 0.3}, canary_timeout_s=30).slos
    assert slo.scaled_by(20.0).threshold == pytest.approx(15.0)


def test_a_probe_without_a_timeout_keeps_an_uncapped_bound_unless_it_declares_one() -> None:
    (slo,) = _spec({"times_baseline": 3}, probe="vllm.num_requests_waiting", agg="max").slos
    assert slo.scale is not None and math.isinf(slo.scale.at_most)
    assert slo.threshold_text == "3 x baseline"
    (capped,) = _spec({"times_baseline": 3, "at_most": 40}, probe="vllm.num_requests_waiting", agg="max").slos
    assert capped.scaled_by(20.0).threshold == pytest.approx(40.0)


def test_a_lower_bound_on_latency_gets_no_ceiling() -> None:
    # ">= 0.5 x baseline" is met by any slow reading; a ceiling would only loosen it.
    (slo,) = _spec({"times_baseline": 0.5}, op=">=").slos
    assert slo.scale is not None and math.isinf(slo.scale.at_most)


@pytest.mark.parametrize(
    ("threshold", "kwargs", "message"),
    [
        (
            {"times_baseline": 3, "at_most": 10},
            {},
            "slos[0].threshold.at_most: must be below the canary's 10 s request timeout (canary.request_timeout_s): "
            "a bound at or above it can never be breached; got 10",
        ),
        (
            {"times_baseline": 3, "at_most": 12.5},
            {"probe": "canary.e2e_s"},
            "slos[0].threshold.at_most: must be below the canary's 10 s request timeout",
        ),
        ({"times_baseline": 3, "at_most": 0}, {}, "slos[0].threshold.at_most: must be more than 0, got 0"),
        (
            {"times_baseline": 3, "at_most": "5s"},
            {},
            "slos[0].threshold.at_most: must be a number, got str '5s'",
        ),
        (
            {"times_baseline": 3, "at_least": 2, "at_most": 2},
            {},
            "slos[0].threshold.at_least: must be below the ceiling (at_most 2), got 2",
        ),
        (
            {"times_baseline": 3, "at_least": 6},
            {},
            "slos[0].threshold.at_least: must be below the ceiling (5: by default 0.5 x the 10 s canary timeout), got 6",
        ),
        (
            {"times_baseline": 0.5, "at_most": 2},
            {"op": ">="},
            "slos[0].threshold.at_most: a ceiling only makes sense for < and <=, not >=",
        ),
        (
            10,
            {},
            "slos[0].threshold: 10 can never be breached: canary.ttft_s reads at most the canary's 10 s "
            "request timeout (canary.request_timeout_s); give a bound below it",
        ),
        (
            12.0,
            {"op": "<", "probe": "canary.itl_s", "agg": "max"},
            "slos[0].threshold: 12 can never be breached",
        ),
    ],
)
def test_a_bound_that_could_never_be_breached_is_refused_naming_the_key(
    threshold: Any, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        _spec(threshold, **kwargs)
    assert str(raised.value).startswith(message), str(raised.value)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("threshold", "kwargs"),
    [
        (9.9, {}),  # below the timeout: a slow enough platform breaches it
        (20, {"op": ">="}),  # a lower bound: any fast reading breaches it
        (50, {"agg": "count"}),  # a count of requests, not seconds
        (12, {"probe": "canary.oldest_wait_s", "agg": "max"}),  # not one of the latency percentiles
    ],
)
def test_bounds_that_can_fail_are_accepted(threshold: Any, kwargs: dict[str, Any]) -> None:
    _spec(threshold, **kwargs)


def test_an_experiment_judges_its_bounds_against_its_own_canary_timeout() -> None:
    # kv_flood's canary waits 20 s: its fixed 12 s bound is fine there, and refused at 10 s.
    doc = yaml.safe_load((EXPERIMENTS / "kv_flood.yaml").read_text())
    assert ensure_experiment_is_valid(doc, Path("kv_flood.yaml")).canary_timeout_s == 20
    del doc["canary"]
    with pytest.raises(ConfigError, match=r"^kv_flood.yaml: slos\[3\].threshold: 12 can never be breached"):
        ensure_experiment_is_valid(doc, Path("kv_flood.yaml"))


def test_a_stop_condition_that_could_never_fire_is_refused() -> None:
    doc = yaml.safe_load((EXPERIMENTS / "kv_flood.yaml").read_text())
    doc["stop_conditions"] = [
        {"name": "slow", "probe": "canary.ttft_s", "agg": "max", "op": "<=", "threshold": 45}
    ]
    with pytest.raises(
        ConfigError, match=r"^kv_flood.yaml: stop_conditions\[0\].threshold: 45 can never be breached"
    ):
        ensure_experiment_is_valid(doc, Path("kv_flood.yaml"))


@pytest.mark.parametrize("path", sorted(EXPERIMENTS.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_relative_latency_bound_of_every_scenario_has_a_ceiling_below_its_timeout(path: Path) -> None:
    spec = load_and_validate(path)
    for slo in spec.slos.slos:
        if slo.scale is not None and slo.probe in CANARY_LATENCY_PROBES and slo.op in (Op.LT, Op.LE):
            assert slo.scale.at_most < spec.canary_timeout_s, slo.name
            assert slo.scale.at_least < slo.scale.at_most, slo.name


def test_the_default_timeout_is_the_canarys() -> None:
    assert DEFAULT_CANARY_TIMEOUT_S == CanaryPace().request_timeout_s
