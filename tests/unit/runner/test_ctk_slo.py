"""An SLO as a Chaos Toolkit probe and tolerance: which judgements a value decides."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferchaos.errors import ProbeError
from inferchaos.experiments.ctk_slo import slo_holds, slo_observed, value_decides

SLO = {"name": "availability", "probe": "canary.success", "agg": "mean", "op": ">=", "threshold": 0.9,
       "phase": "during"}  # fmt: skip


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
