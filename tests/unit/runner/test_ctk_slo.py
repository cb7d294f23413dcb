"""An SLO as a Chaos Toolkit probe and tolerance: which judgements a value decides."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferchaos.errors import ProbeError
from inferchaos.run.hypothesis import slo_holds, slo_observed, value_decides
from inferchaos.steady_state.timeline import Row, Timeline, TimelineWriter

SLO = {
    "name": "availability",
    "probe": "canary.success",
    "agg": "mean",
    "op": ">=",
    "threshold": 0.9,
    "phase": "during",
}


@pytest.mark.parametrize(
    ("observed", "ok", "threshold", "decides"),
    [
        (1.0, True, 0.9, True),  # held
        (0.5, False, 0.9, True),  # breached by its value
        (None, False, 0.9, False),  # no data
        (0.5, False, None, False),  # a baseline-relative threshold without a baseline
        (0.95, False, 0.9, False),  # failed closed although the value meets the threshold
    ],
)
def test_value_decides(observed: float | None, ok: bool, threshold: float | None, decides: bool) -> None:
    assert value_decides(observed, ok, ">=", threshold) is decides


def test_slo_holds_compares_and_never_holds_without_a_value_or_threshold() -> None:
    assert slo_holds(">=", 0.9, 0.95) is True
    assert slo_holds(">=", 0.9, 0.5) is False
    assert slo_holds(">=", 0.9) is False
    assert slo_holds(">=", None, 0.95) is False


def test_slo_observed_names_the_slo_when_it_cannot_read_the_timeline(tmp_path: Path) -> None:
    with pytest.raises(ProbeError, match="cannot judge SLO 'availability'") as caught:
        slo_observed(str(tmp_path / "timeline.csv"), SLO)
    assert caught.value.__cause__ is not None


TTFT_AFTER = {
    "name": "ttft_after",
    "probe": "canary.ttft_s",
    "agg": "p95",
    "op": "<=",
    "threshold": {"times_baseline": 3, "at_least": 0.3},
    "phase": "recovery",
    "window_s": 5,
}
RECOVERY = {"within_s": 15, "hold_s": 3, "steady": ["ttft_after"]}


def test_a_replayed_recovery_slo_is_judged_where_recovery_was_confirmed(tmp_path: Path) -> None:
    # Two canary answers a second: 0.09 s at baseline, 1.0 s during the fault, 0.04 s after the
    # revert at +20, but one of 0.53 s at +23.5, after the hold from +20 confirmed recovery at +23.
    t0 = 1_800_000_000.0
    path = tmp_path / "timeline.csv"
    with TimelineWriter(path) as writer:
        timeline = Timeline(writer)
        for mark, at in (("baseline_start", 0.0), ("injected", 10.0), ("reverted", 20.0)):
            timeline.mark(mark, t0 + at)
        for k in range(48):
            t = k / 2
            value = 0.09 if t < 10 else 1.0 if t < 20 else 0.53 if t == 23.5 else 0.04
            timeline.append_tick([Row(t0 + t, "canary.ttft_s", {}, value)])
        timeline.mark("end", t0 + 24.25)
    # What the verdict says: the state recovery was confirmed in.
    assert slo_observed(str(path), TTFT_AFTER, RECOVERY, [TTFT_AFTER]) == pytest.approx(0.04)
    # Without the recovery declaration the SLO is judged where the run last looked.
    assert slo_observed(str(path), TTFT_AFTER) > 0.3
