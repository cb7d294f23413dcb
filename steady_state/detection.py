"""Who noticed the fault, and when: inferchaos' own judgement beside the platform's own signals.

Each signal is read from the timeline alone. It *notices* at its first sample at or after
``since`` (the run's ``injected`` mark: the during and recovery phases) that departs from what
it read at the end of the baseline (the last reading before ``since``). ``noticed_after_s``
counts from the fault's own ``injected_at`` (when its act landed), so every row is measured
from the same instant; it is None when the signal never noticed within the run.

The signals, in the order a report lists them:

- ``inferchaos.slo_or_detector``: the first breach of a during-phase SLO (evaluation's
  time to detect) or the first slow-failure detector finding, whichever came first;
- ``canary.first_failed_request``: the first canary request that failed (``canary.success``
  0, with or without a replica) or a failed read of the canary;
- ``vllm.health``: a replica's ``/health`` not answering 200 (``vllm.healthy`` 0) where it
  answered 200 at the end of the baseline: what ``/health`` itself said, nothing else;
- ``vllm.unanswered``: a replica not answering its probe at all (its ``/metrics`` read failed),
  where it answered at the end of the baseline;
- ``ray.nodes``: Ray's count of DEAD nodes rising, or of ALIVE nodes falling;
- ``ray.actors``: the ALIVE actors of a class falling, or its RESTARTING actors rising;
- ``ray.serve_replicas``: a Serve replica RUNNING at the end of the baseline no longer
  RUNNING, or gone (replaced by a new replica id);
- ``k8s.readiness``: ready replicas of a Deployment, ready RayCluster workers or head, or
  Ready nodes falling.

A signal whose probe left no row in the whole run (no kube API, so no ``k8s.*``) is
omitted: the environment cannot have it. One that was read but never departed is listed
with ``noticed_after_s`` None, which reports show as "never".
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from inferchaos.steady_state.detectors import DetectorConfig, Finding, run_detectors
from inferchaos.steady_state.evaluation import Detection
from inferchaos.steady_state.timeline import Mark, Row, Timeline

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class FaultAlert:
    """An alert that stands for the run's fault, its layer and the metrics it reads
    (primitives/alert_rules.py's ``alerts_for``)."""

    name: str
    layer: str
    reads: tuple[str, ...]


@dataclass(frozen=True)
class SignalDetection:
    """One entry of verdict.json ``detection``: when ``signal`` of ``layer`` noticed the fault.

    ``at`` is the epoch time of the noticing sample; ``noticed_after_s`` is ``at`` less the
    fault's injection time; both None when it never noticed. ``detail`` says what it saw.
    """

    layer: str
    signal: str
    noticed_after_s: float | None
    at: float | None = None
    detail: str = ""
    # An alert's lead over the first failed user request, in seconds: negative where users
    # felt the fault first; None where no user request failed (or for other signals).
    lead_s: float | None = None

    @property
    def noticed(self) -> bool:
        """Whether the signal noticed within the run."""
        return self.noticed_after_s is not None


# How each signal is named where a person reads it (the CLI line, the report).
SIGNAL_TITLES: dict[str, str] = {
    "inferchaos.slo_or_detector": "inferchaos",
    "canary.first_failed_request": "first failed request",
    "vllm.health": "vllm /health",
    "vllm.unanswered": "vllm not answering",
    "ray.nodes": "ray nodes",
    "ray.actors": "ray actors",
    "ray.serve_replicas": "serve",
    "k8s.readiness": "k8s readiness",
}


def signal_title(signal: str) -> str:
    """The short name of ``signal`` for people (an alert by its name); an unknown signal (a
    newer run) keeps its own."""
    return SIGNAL_TITLES.get(signal, signal.removeprefix("alert."))


# (at, detail) of the first departure, or None.
Noticed = tuple[float, str] | None


def _ordered(rows: Iterable[Row]) -> list[Row]:
    return sorted(rows, key=lambda r: r.t)


def _first(candidates: Iterable[tuple[float, str]]) -> Noticed:
    return min(candidates, default=None, key=lambda c: c[0])


def _readings(timeline: Timeline, probe: str) -> list[Row]:
    return _ordered(r for r in timeline.rows if r.probe == probe and r.ok)


def _level_drop(timeline: Timeline, probe: str, since: float, *, rise: bool = False) -> Noticed:
    """The first reading of ``probe`` (per label set) at or after ``since`` below (``rise``:
    above) the last reading of the same label set before ``since``."""
    last: dict[str, float] = {}
    for row in _readings(timeline, probe):
        key = row.label_text()
        if row.t < since:
            last[key] = row.value
            continue
        before = last.get(key)
        if before is None:
            last[key] = row.value  # first heard of after the injection: its own baseline
            continue
        if (row.value > before) if rise else (row.value < before):
            where = f"{{{key}}}" if key else ""
            return row.t, f"{probe}{where} {before:g} -> {row.value:g}"
    return None


def _ticks(timeline: Timeline, probe: str) -> dict[float, list[Row]]:
    """Readings of ``probe`` grouped by sample time: each group is one successful read."""
    ticks: dict[float, list[Row]] = {}
    for row in _readings(timeline, probe):
        ticks.setdefault(row.t, []).append(row)
    return dict(sorted(ticks.items()))


def _canary(timeline: Timeline, since: float) -> Noticed:
    failures = (
        (row.t, f"canary request failed{_on(row.labels.get('replica'))}")
        for row in timeline.rows
        if row.t >= since and row.probe == "canary.success" and row.ok and row.value == 0
    )
    errors = (
        (row.t, f"canary read failed: {row.error[:120]}")
        for row in timeline.errors(start=since)
        if row.probe == "canary"
    )
    return _first([*failures, *errors])


def _on(replica: str | None) -> str:
    return f" on {replica}" if replica else " before a replica was named"


def _replica_notice(events: dict[str, list[tuple[float, bool, str]]], since: float) -> Noticed:
    """The first failing event at or after ``since`` of a replica whose last event before it
    was not failing (a replica first seen after ``since`` is judged from its first event)."""
    candidates = []
    for replica_events in events.values():
        replica_events.sort(key=lambda e: e[0])
        before = [failing for t, failing, _ in replica_events if t < since]
        if before and before[-1]:
            continue  # failing already before the fault: not something the fault made it notice
        candidates += [(t, detail) for t, failing, detail in replica_events if t >= since and failing]
    return _first(candidates)


def _vllm_health(timeline: Timeline, since: float) -> Noticed:
    """A replica's /health not answering 200, as its own reads of /health say."""
    events: dict[str, list[tuple[float, bool, str]]] = {}  # replica -> (t, failing, detail)
    for row in timeline.rows:
        if row.probe == "vllm.healthy" and row.ok:
            replica = row.labels.get("replica", "?")
            events.setdefault(replica, []).append(
                (row.t, row.value == 0, f"{replica} /health did not answer 200")
            )
    return _replica_notice(events, since)


def _vllm_unanswered(timeline: Timeline, since: float) -> Noticed:
    """A replica whose probe failed to read it at all, where the read before ``since`` worked."""
    events: dict[str, list[tuple[float, bool, str]]] = {}
    for row in timeline.rows:
        if row.probe.startswith("vllm@"):
            replica = row.labels.get("replica", row.probe.partition("@")[2])
            detail = f"{replica} did not answer its probe: {row.error[:120]}"
            events.setdefault(replica, []).append((row.t, True, detail))
        elif row.probe == "vllm.healthy" and row.ok:
            events.setdefault(row.labels.get("replica", "?"), []).append((row.t, False, ""))
    return _replica_notice(events, since)


def _ray_nodes(timeline: Timeline, since: float) -> Noticed:
    return _first(
        n
        for n in (
            _level_drop(timeline, "ray.nodes_dead", since, rise=True),
            _level_drop(timeline, "ray.nodes_alive", since),
        )
        if n is not None
    )


def _ray_actors(timeline: Timeline, since: float) -> Noticed:
    """ALIVE actors of a class falling (a class absent from a read has none), or RESTARTING rising."""
    reads = _ticks(timeline, "ray.nodes_alive")  # every successful Ray read has this row
    alive: dict[float, dict[str, float]] = {t: {} for t in reads}
    restarting: dict[float, dict[str, float]] = {t: {} for t in reads}
    for row in _readings(timeline, "ray.actors_alive"):
        alive.setdefault(row.t, {})[row.labels.get("class", "?")] = row.value
    for row in _readings(timeline, "ray.actors"):
        if row.labels.get("state") == "RESTARTING":
            restarting.setdefault(row.t, {})[row.labels.get("class", "?")] = row.value
    baseline = [t for t in reads if t < since]
    if not baseline:
        return None
    alive_before, restarting_before = alive[baseline[-1]], restarting[baseline[-1]]
    for t in reads:
        if t < since:
            continue
        for cls, before in sorted(alive_before.items()):
            now = alive[t].get(cls, 0.0)
            if now < before:
                return t, f"ALIVE actors of {cls} {before:g} -> {now:g}"
        for cls, now in sorted(restarting[t].items()):
            if now > restarting_before.get(cls, 0.0):
                return t, f"{now:g} actor(s) of {cls} RESTARTING"
    return None


def _serve_replicas(timeline: Timeline, since: float) -> Noticed:
    """A replica RUNNING at the end of the baseline listed in another state, or no longer listed."""
    reads = _ticks(timeline, "ray.serve_replicas")  # every successful Serve read has these rows
    replicas: dict[float, dict[tuple[str, str], str]] = {t: {} for t in reads}
    for row in _readings(timeline, "ray.serve_replica"):
        key = (row.labels.get("deployment", "?"), row.labels.get("replica", "?"))
        replicas.setdefault(row.t, {})[key] = row.labels.get("state", "?")
    baseline = [t for t in reads if t < since]
    if not baseline:
        return None
    running = sorted(key for key, state in replicas[baseline[-1]].items() if state == "RUNNING")
    for t in reads:
        if t < since:
            continue
        for key in running:
            state = replicas[t].get(key)
            if state != "RUNNING":
                deployment, replica = key
                seen = "no longer listed (replaced)" if state is None else state
                return t, f"Serve replica {replica} of {deployment} {seen}"
    return None


K8S_READINESS_PROBES: tuple[str, ...] = (
    "k8s.deployment_ready_replicas",
    "k8s.raycluster_ready_workers",
    "k8s.raycluster_head_ready",
    "k8s.nodes_ready",
)


def _k8s_readiness(timeline: Timeline, since: float) -> Noticed:
    return _first(
        n for probe in K8S_READINESS_PROBES if (n := _level_drop(timeline, probe, since)) is not None
    )


@dataclass(frozen=True)
class _Signal:
    layer: str
    name: str
    # Probe and Probe-object name prefixes whose rows (readings or failed reads) show that
    # the environment has this signal at all.
    sources: tuple[str, ...]
    noticed: Callable[[Timeline, float], Noticed]


PLATFORM_SIGNALS: tuple[_Signal, ...] = (
    _Signal("canary", "canary.first_failed_request", ("canary",), _canary),
    _Signal("vllm", "vllm.health", ("vllm.healthy",), _vllm_health),
    _Signal("vllm", "vllm.unanswered", ("vllm.healthy", "vllm@"), _vllm_unanswered),
    _Signal("ray", "ray.nodes", ("ray.nodes_",), _ray_nodes),
    _Signal("ray", "ray.actors", ("ray.actors",), _ray_actors),
    _Signal("ray", "ray.serve_replicas", ("ray.serve_", "ray@serve"), _serve_replicas),
    _Signal("k8s", "k8s.readiness", ("k8s",), _k8s_readiness),
)


def _present(timeline: Timeline, prefixes: tuple[str, ...]) -> bool:
    return any(row.probe.startswith(prefixes) for row in timeline.rows)


def _inferchaos(breach: Detection | None, findings: Sequence[Finding], since: float) -> Noticed:
    candidates = [(f.at, f"detector {f.kind}: {f.message}") for f in findings if f.at >= since]
    if breach is not None and breach.at >= since:
        silent = " (no data)" if breach.observed is None else ""
        candidates.append((breach.at, f"slo {breach.slo}{silent}"))
    return _first(candidates)


def detect_signals(
    timeline: Timeline,
    *,
    injected_at: float | None = None,
    since: float | None = None,
    breach: Detection | None = None,
    detector_config: DetectorConfig | None = None,
    fault: str | None = None,
    fault_alerts: Sequence[FaultAlert] = (),
) -> list[SignalDetection]:
    """Every signal's first notice of the fault, measured from ``injected_at``.

    ``since`` (default: the timeline's ``injected`` mark, else ``injected_at``) is where the
    baseline ends and noticing may begin; ``injected_at`` (default ``since``) is what
    ``noticed_after_s`` counts from. ``breach`` is evaluation's first during-phase breach
    (:func:`~inferchaos.steady_state.evaluation.detect`); the slow-failure detectors run here.
    ``fault`` (``<layer>.<verb>``) and ``fault_alerts``, the alerts that stand for it, tell why
    the platform's alerting stayed silent, where it did.
    An empty list when nothing was injected.
    """
    since = timeline.marks.get(Mark.INJECTED, injected_at) if since is None else since
    if since is None:
        return []
    origin = since if injected_at is None else injected_at

    def entry(layer: str, signal: str, noticed: Noticed) -> SignalDetection:
        if noticed is None:
            return SignalDetection(layer, signal, None)
        at, detail = noticed
        return SignalDetection(layer, signal, round(at - origin, 3), at, detail)

    findings = run_detectors(timeline, detector_config)
    detections = [entry("inferchaos", "inferchaos.slo_or_detector", _inferchaos(breach, findings, since))]
    for signal in PLATFORM_SIGNALS:
        if _present(timeline, signal.sources):
            detections.append(entry(signal.layer, signal.name, signal.noticed(timeline, since)))
    return detections + alert_detections(timeline, since, origin, fault, fault_alerts)


NO_ALERT = "no alert fired"


def alert_detections(
    timeline: Timeline,
    since: float,
    origin: float,
    fault: str | None = None,
    fault_alerts: Sequence[FaultAlert] = (),
) -> list[SignalDetection]:
    """One row per alert the platform's Prometheus fired in the run (``alert.<name>``, its own
    ``layer`` label), measured from ``origin``: one that already fired before ``since`` (a
    false alarm at baseline, or one left over) has a negative time. Its ``lead_s`` is how long
    before the first failed user request it fired. Where the alerts were read but none fired
    after ``since``, one row ``alerts`` that never noticed, its detail :data:`NO_ALERT` and why
    (:func:`why_no_alert`); where others fired but none in the layer of ``fault_alerts``, one
    such row saying that no alert of that layer fired, and why. None where the run read no
    alerts."""
    if not any(row.probe == "alerts.firing_count" and row.ok for row in timeline.rows):
        return []
    failed = _canary(timeline, since)
    first: dict[str, Row] = {}
    for row in _readings(timeline, "alerts.firing"):
        first.setdefault(row.labels.get("alertname", "?"), row)
    rows = []
    for name, row in first.items():
        subject = ", ".join(f"{k}={v}" for k, v in sorted(row.labels.items()) if k not in _ALERT_OWN)
        lead = None if failed is None else round(failed[0] - row.t, 3)
        rows.append(
            SignalDetection(
                row.labels.get("layer", "alerts"),
                f"alert.{name}",
                round(row.t - origin, 3),
                row.t,
                subject,
                lead,
            )
        )
    fired = [d for d in rows if d.at is not None and d.at >= since]
    own_layers = frozenset(a.layer for a in fault_alerts)
    if not fired:
        silent = NO_ALERT
        why = why_no_alert(timeline, since, fault, fault_alerts)
    elif own_layers and not any(d.layer in own_layers for d in fired):
        silent = f"no {' or '.join(sorted(own_layers))} alert fired"
        why = why_no_alert(timeline, since, fault, fault_alerts, own_layers)
    else:
        return rows
    rows.append(SignalDetection("alerts", "alerts", None, None, f"{silent}: {why}" if why else silent))
    return rows


def why_no_alert(
    timeline: Timeline,
    since: float,
    fault: str | None,
    own: Sequence[FaultAlert] = (),
    layers: frozenset[str] | None = None,
) -> str:
    """Why no alert (of ``layers``, where given) fired after ``since``, as far as the alerts
    probe saw: alerts whose condition held but not for their ``for:`` (``alerts.pending``), the
    metrics that ``own`` (the alerts standing for ``fault``) read and that Prometheus held no
    series of on any read, or that those alerts never held their condition. Empty where it
    cannot say."""
    reasons = []
    pending: dict[str, list[float]] = {}
    for row in _readings(timeline, "alerts.pending"):
        if row.t >= since and (layers is None or row.labels.get("layer") in layers):
            pending.setdefault(row.labels.get("alertname", "?"), []).append(row.t)
    for name, times in pending.items():
        reasons.append(f"{name} held its condition for {times[-1] - times[0] + 1:.0f} s, less than its for:")
    reads = [row.t for row in _readings(timeline, "alerts.firing_count") if row.t >= since]
    absent: dict[str, int] = {}
    for row in _readings(timeline, "alerts.unscraped"):
        if row.t >= since:
            absent[row.labels.get("metric", "")] = absent.get(row.labels.get("metric", ""), 0) + 1
    never = {metric for metric, n in absent.items() if reads and n >= len(reads)}
    for alert in own:
        if missing := [m for m in alert.reads if m in never]:
            reasons.append(
                f"{alert.name} reads {', '.join(missing)}, which this Prometheus holds no series of"
            )
    if fault and not own:
        reasons.append(f"no alert of inferchaos' rules stands for {fault}")
    elif not reasons and own:
        reasons.append(
            f"{' and '.join(a.name for a in own)} never held {'its' if len(own) == 1 else 'their'} condition"
        )
    return "; ".join(reasons)


# An alert's labels that are not its subject.
_ALERT_OWN = frozenset({"alertname", "layer", "severity"})


def noticed_text(detection: SignalDetection) -> str:
    """``serve 6.1 s`` or ``vllm /health never``; inferchaos' own row says by what, an
    alert's its lead over the first failed request."""
    title = signal_title(detection.signal)
    if detection.noticed_after_s is None:
        # The alerting's own row says what stayed silent; the rest of its detail, why.
        return detection.detail.split(":", 1)[0] if detection.signal == "alerts" else f"{title} never"
    text = f"{title} {detection.noticed_after_s:.1f} s"
    if detection.signal == "inferchaos.slo_or_detector" and detection.detail:
        text += f" ({detection.detail.split(':', 1)[0]})"
    if detection.lead_s is not None:
        text += (
            f" ({abs(detection.lead_s):.1f} s {'before' if detection.lead_s >= 0 else 'after'} users failed)"
        )
    return text


def noticed_line(detections: Sequence[SignalDetection]) -> str:
    """One line: ``noticed: inferchaos 1.2 s (slo availability) · serve 6.1 s · vllm /health never``."""
    if not detections:
        return ""
    return "noticed: " + " · ".join(noticed_text(d) for d in detections)


@dataclass(frozen=True)
class AlertCoverage:
    """Whether the platform's alerting caught a run's fault: its first alert after the
    injection (``alert`` None: none fired), the alert's layer, when, and its lead over the
    first failed user request (negative: users failed first)."""

    alert: str | None
    layer: str | None = None
    noticed_after_s: float | None = None
    lead_s: float | None = None
    # What stayed silent and why, as far as the run could tell (:func:`why_no_alert`): no alert
    # at all, or none in the fault's own layer.
    silent: str = ""

    def text(self) -> str:
        """``InferchaosEngineStalled (vllm) 4.0 s, 3.1 s before users failed``, or "no alert
        fired" and why; a first alert of another layer than the fault's is followed by why none
        of the fault's fired."""
        if self.alert is None:
            return self.silent or NO_ALERT
        when = "" if self.noticed_after_s is None else f" {self.noticed_after_s:.1f} s"
        lead = ""
        if self.lead_s is not None:
            lead = f", {abs(self.lead_s):.1f} s {'before' if self.lead_s >= 0 else 'after'} users failed"
        silent = f"; {self.silent}" if self.silent else ""
        return f"{self.alert} ({self.layer}){when}{lead}{silent}"


def alert_coverage(detections: Sequence[SignalDetection]) -> AlertCoverage | None:
    """The run's :class:`AlertCoverage`; None where it read no alerts (no ``--prometheus``)."""
    rows = [d for d in detections if d.signal.startswith("alert.") or d.signal == "alerts"]
    if not rows:
        return None
    fired = sorted(
        (
            d
            for d in rows
            if d.signal.startswith("alert.") and d.noticed_after_s is not None and d.noticed_after_s >= 0
        ),
        key=lambda d: d.noticed_after_s or 0.0,
    )
    silent = next((d.detail for d in rows if d.signal == "alerts"), "")
    if not fired:
        return AlertCoverage(None, silent=silent or NO_ALERT)
    first = fired[0]
    return AlertCoverage(
        first.signal.removeprefix("alert."), first.layer, first.noticed_after_s, first.lead_s, silent
    )
