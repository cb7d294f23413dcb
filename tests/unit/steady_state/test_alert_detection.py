"""The platform's own alerts in a run's detection list: which fired, when, and how long
before users felt the fault."""

from __future__ import annotations

from typing import TYPE_CHECKING

from inferchaos.steady_state.detection import NO_ALERT, alert_coverage, detect_signals, noticed_line
from inferchaos.steady_state.timeline import Row

if TYPE_CHECKING:
    from conftest import Synth

MARKS = {"baseline_start": 0, "injected": 10, "reverted": 30, "end": 50}
STALLED = {
    "alertname": "InferchaosEngineStalled",
    "layer": "vllm",
    "severity": "critical",
    "replica": "replica-0",
}


def alerts_read(synth: Synth, firing: dict[float, dict[str, str]] | None = None) -> list[Row]:
    """The alerts probe's rows, each second: the alerts firing from the given offsets on."""
    rows = []
    for t in range(51):
        now = [labels for since, labels in (firing or {}).items() if t >= since]
        rows += [Row(synth.t0 + t, "alerts.firing", labels, 1.0) for labels in now]
        rows.append(Row(synth.t0 + t, "alerts.firing_count", {}, float(len(now))))
    return rows


def canary(synth: Synth, fails_from: float | None) -> list[Row]:
    return [
        Row(synth.t0 + t, "canary.success", {"replica": "replica-0"}, 0.0 if fails_from is not None and t >= fails_from else 1.0)
        for t in range(51)
    ]  # fmt: skip


def test_an_alert_that_fired_is_a_row_of_its_layer_with_its_lead_over_the_first_failed_request(
    synth: Synth,
) -> None:
    timeline = synth.timeline(alerts_read(synth, {14: STALLED}), canary(synth, 17), **MARKS)
    (row,) = [d for d in detect_signals(timeline) if d.signal.startswith("alert.")]
    assert (row.layer, row.signal, row.noticed_after_s, row.lead_s) == (
        "vllm",
        "alert.InferchaosEngineStalled",
        4.0,
        3.0,
    )
    assert row.detail == "replica=replica-0"
    coverage = alert_coverage(detect_signals(timeline))
    assert (
        coverage is not None
        and coverage.text() == "InferchaosEngineStalled (vllm) 4.0 s, 3.0 s before users failed"
    )
    assert "InferchaosEngineStalled 4.0 s (3.0 s before users failed)" in noticed_line(
        detect_signals(timeline)
    )


def test_an_alert_later_than_the_users_has_a_negative_lead(synth: Synth) -> None:
    timeline = synth.timeline(alerts_read(synth, {20: STALLED}), canary(synth, 12), **MARKS)
    coverage = alert_coverage(detect_signals(timeline))
    assert coverage is not None and coverage.lead_s == -8.0
    assert coverage.text().endswith("8.0 s after users failed")


def test_alerts_read_but_none_fired_is_a_finding(synth: Synth) -> None:
    timeline = synth.timeline(alerts_read(synth), canary(synth, 12), **MARKS)
    rows = [d for d in detect_signals(timeline) if d.layer == "alerts"]
    assert [(d.signal, d.noticed_after_s, d.detail) for d in rows] == [("alerts", None, NO_ALERT)]
    coverage = alert_coverage(detect_signals(timeline))
    assert coverage is not None and coverage.alert is None and coverage.text() == NO_ALERT
    assert NO_ALERT in noticed_line(detect_signals(timeline))


def test_an_alert_already_firing_at_baseline_is_a_false_alarm_not_a_catch(synth: Synth) -> None:
    """Fired 4 s into the baseline and never stopped: a row 6 s before the injection, and the
    fault itself was caught by no alert."""
    timeline = synth.timeline(alerts_read(synth, {4: STALLED}), canary(synth, 12), **MARKS)
    detections = detect_signals(timeline)
    (row,) = [d for d in detections if d.signal.startswith("alert.")]
    assert row.noticed_after_s == -6.0
    coverage = alert_coverage(detections)
    assert coverage is not None and coverage.alert is None


def test_a_run_that_read_no_alerts_has_no_alert_rows(synth: Synth) -> None:
    timeline = synth.timeline(canary(synth, 12), **MARKS)
    assert not [d for d in detect_signals(timeline) if d.layer == "alerts" or d.signal.startswith("alert.")]
    assert alert_coverage(detect_signals(timeline)) is None
