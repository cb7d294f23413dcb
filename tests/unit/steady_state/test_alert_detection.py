"""The platform's own alerts in a run's detection list: which fired, when, and how long
before users felt the fault."""

from __future__ import annotations

from typing import TYPE_CHECKING

from inferchaos.primitives.alert_rules import CLUSTER, alerts_for
from inferchaos.steady_state.detection import (
    NO_ALERT,
    FaultAlert,
    alert_coverage,
    detect_signals,
    noticed_line,
)
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
        Row(
            synth.t0 + t,
            "canary.success",
            {"replica": "replica-0"},
            0.0 if fails_from is not None and t >= fails_from else 1.0,
        )
        for t in range(51)
    ]


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


def with_rows(synth: Synth, probe: str, labels: dict[str, str], seconds: range) -> list[Row]:
    return [Row(synth.t0 + t, probe, labels, 1.0) for t in seconds]


def why(timeline: object, fault: str) -> str:
    own = [FaultAlert(a.name, a.layer, a.reads) for a in alerts_for(fault, CLUSTER)]
    coverage = alert_coverage(detect_signals(timeline, fault=fault, fault_alerts=own))  # type: ignore[arg-type]
    assert coverage is not None and coverage.alert is None
    return coverage.text()


def test_an_alert_whose_condition_held_too_briefly_is_why_none_fired(synth: Synth) -> None:
    """A partition of 3 s: the worker's alert was pending for 2 s, less than its for:."""
    unreachable = {"alertname": "InferchaosWorkerUnreachable", "layer": "network", "node": "worker-1"}
    pending = with_rows(synth, "alerts.pending", unreachable, range(12, 14))
    text = why(
        synth.timeline(alerts_read(synth), pending, canary(synth, None), **MARKS), "network.partition_node"
    )
    assert text == f"{NO_ALERT}: InferchaosWorkerUnreachable held its condition for 2 s, less than its for:"


def test_a_metric_the_faults_own_alert_reads_and_prometheus_lacks_is_why_none_fired(synth: Synth) -> None:
    """No DCGM exporter: the device alert could not have fired. Another alert's metric missing
    (kube-state-metrics) says nothing of this fault."""
    missing = [
        *with_rows(synth, "alerts.unscraped", {"metric": "DCGM_FI_DEV_FB_USED"}, range(51)),
        *with_rows(synth, "alerts.unscraped", {"metric": "kube_pod_status_unschedulable"}, range(51)),
    ]
    text = why(
        synth.timeline(alerts_read(synth), missing, canary(synth, 12), **MARKS), "device.squat_device_memory"
    )
    assert text == (
        f"{NO_ALERT}: InferchaosDeviceMemoryOutsideReplicas reads DCGM_FI_DEV_FB_USED, "
        "which this Prometheus holds no series of"
    )
    # A metric that appeared during the fault was there to be read.
    appeared = with_rows(synth, "alerts.unscraped", {"metric": "DCGM_FI_DEV_FB_USED"}, range(0, 20))
    text = why(
        synth.timeline(alerts_read(synth), appeared, canary(synth, 12), **MARKS), "device.squat_device_memory"
    )
    assert text == f"{NO_ALERT}: InferchaosDeviceMemoryOutsideReplicas never held its condition"


def test_a_fault_no_rule_stands_for_says_so(synth: Synth) -> None:
    text = why(synth.timeline(alerts_read(synth), canary(synth, None), **MARKS), "vllm.unknown_verb")
    assert text == f"{NO_ALERT}: no alert of inferchaos' rules stands for vllm.unknown_verb"


def test_alerts_of_other_layers_do_not_hide_that_none_of_the_faults_own_fired(synth: Synth) -> None:
    """A squatted device made replica-1 restart: its vLLM alert fired, and no device alert could
    (no DCGM exporter). The vLLM alert is the first, and the coverage says what of the device."""
    down = {"alertname": "InferchaosReplicaNotAnswering", "layer": "vllm", "replica": "replica-1"}
    missing = with_rows(synth, "alerts.unscraped", {"metric": "DCGM_FI_DEV_FB_USED"}, range(51))
    timeline = synth.timeline(alerts_read(synth, {16: down}), missing, canary(synth, 12), **MARKS)
    own = [FaultAlert(a.name, a.layer, a.reads) for a in alerts_for("device.squat_device_memory", CLUSTER)]
    detections = detect_signals(timeline, fault="device.squat_device_memory", fault_alerts=own)
    coverage = alert_coverage(detections)
    assert coverage is not None and coverage.text() == (
        "InferchaosReplicaNotAnswering (vllm) 6.0 s, 4.0 s after users failed; no device alert fired: "
        "InferchaosDeviceMemoryOutsideReplicas reads DCGM_FI_DEV_FB_USED, which this Prometheus holds no series of"
    )
    assert "no device alert fired" in noticed_line(detections)
    # Once one of the fault's own layer fires, nothing is said of it.
    squat = {"alertname": "InferchaosDeviceMemoryOutsideReplicas", "layer": "device", "gpu": "0"}
    timeline = synth.timeline(alerts_read(synth, {16: down, 18: squat}), canary(synth, 12), **MARKS)
    detections = detect_signals(timeline, fault="device.squat_device_memory", fault_alerts=own)
    assert not [d for d in detections if d.signal == "alerts"]
