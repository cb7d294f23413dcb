"""Triage: name the layer at fault around a breach, with the readings that say so.

The rules are the one table :data:`RULES`, checked layer by layer in
:data:`~inferchaos.layers.TRIAGE_ORDER` (vLLM, device, Ray, Kubernetes: micro before meso
before macro). Rules marked ``symptom`` describe what a lower layer's failure also looks
like from above (a replica whose node died stops answering too), so every layer's causes
are checked before any symptom is taken as the answer.

A level rule (``>``, ``>=``, ``<``, ``==``, unreachable) only counts when its condition is
new: if it already held at ``since`` (the injection, say), it is a standing condition, not
the cause of this breach.
"""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from inferchaos.layers import TRIAGE_ORDER, Layer
from inferchaos.steady_state.detectors import least_squares_slope
from inferchaos.steady_state.network_probe import CONNECT_TIMEOUT_S
from inferchaos.steady_state.timeline import Row, Timeline, format_labels, parse_labels

logger = logging.getLogger(__name__)


class Condition(StrEnum):
    """How a rule reads its probe within the triage window."""

    AT_LEAST = ">="  # some reading >= threshold
    ABOVE = ">"  # some reading > threshold
    BELOW = "<"  # some reading < threshold
    EQUALS = "=="  # some reading == threshold
    RISING = "rising"  # a counter increased by more than threshold
    FALLING = "falling"  # a reading dropped by more than threshold below an earlier one
    PLUNGING = "plunging"  # a reading dropped by more than threshold within PLUNGE_SPAN_S
    GROWING = "growing"  # least-squares slope above threshold per second
    OUTLIER = "outlier"  # median since the fault above threshold x every series' before and x its peers
    SUSTAINED = "sustained"  # median since the fault >= threshold: slow throughout, not in one reading
    UNREACHABLE = "unreachable"  # more than threshold failed reads by this layer's probes


@dataclass(frozen=True)
class Rule:
    """``probe`` meeting ``condition`` against ``threshold`` points at ``layer``.

    ``threshold`` None means the caller supplies it (``triage(thresholds={probe: ...})``);
    without it the rule is skipped. ``reason`` is formatted with ``value``, ``threshold``,
    ``labels`` and ``error``.
    """

    layer: Layer
    probe: str
    condition: Condition
    threshold: float | None
    reason: str
    symptom: bool = False
    # Only readings carrying this label count (a request's replica is known only once one answered).
    needs_label: str = ""
    # Only readings with these label values count (``(("state", "RESTARTING"),)``).
    only: tuple[tuple[str, str], ...] = ()
    # UNREACHABLE: only the probe object named exactly ``probe`` (``ray``, Ray's state API),
    # not every probe of its layer (``ray@serve``).
    exact: bool = False

    def reads(self, labels: Mapping[str, str]) -> bool:
        """Whether a series with ``labels`` is one this rule reads."""
        if self.needs_label and self.needs_label not in labels:
            return False
        return all(labels.get(key) == value for key, value in self.only)


C = Condition
RULES: tuple[Rule, ...] = (
    # Network: the head's own reads of each worker's link (steady_state/network_probe.py). A dead
    # node's namespace still answers, so these name only links that carry nothing or crawl.
    # The probe waits CONNECT_TIMEOUT_S for a handshake, so a link slowed past that reads as
    # unreachable too: the reason says both (slow_link's control adds 500 ms and lands here).
    Rule(
        Layer.NETWORK,
        "network.node_reachable",
        C.EQUALS,
        0,
        "the head cannot reach worker node {labels} over the network (no TCP handshake answered "
        f"within {CONNECT_TIMEOUT_S:g} s: the link is cut or slower than that)",
    ),
    # A handshake across the bridge takes well under 1 ms here; 100 ms throughout is a link
    # slowed on purpose or by a failing NIC. Throughout: the head times each handshake from a
    # thread of the sampler, and on a CPU-starved machine one reading in a kv_flood control
    # took 0.11 s while the link was idle (its median stayed in milliseconds).
    Rule(
        Layer.NETWORK,
        "network.handshake_rtt_s",
        C.SUSTAINED,
        0.1,
        "TCP handshakes with worker node {labels} took {value:.3g} s (median since the fault)",
    ),
    # vLLM (micro): the scheduler's own queue and KV cache.
    Rule(Layer.VLLM, "vllm.kv_cache_usage", C.AT_LEAST, 0.9, "vLLM KV cache {value:.0%} full ({labels})"),
    Rule(
        Layer.VLLM, "vllm.num_requests_waiting", C.ABOVE, 0, "{value:g} request(s) queued in vLLM ({labels})"
    ),
    Rule(
        Layer.VLLM,
        "vllm.num_preemptions_total",
        C.RISING,
        0,
        "vLLM preempted {value:g} sequence(s) ({labels})",
    ),
    Rule(Layer.VLLM, "vllm.healthy", C.EQUALS, 0, "vLLM /health failing ({labels})", symptom=True),
    # More than two failed reads: a busy replica misses one or two of its 0.8 s reads (more under
    # kv_flood, where the KV rules name vLLM first), and a single miss must not outrank a
    # crash-looping Serve controller's symptoms.
    # Data (2026-12-01, 62 runs): busy up to 6 misses in 40 s under kv_flood; dead or hung 9-14.
    Rule(
        Layer.VLLM, "vllm", C.UNREACHABLE, 2, "vLLM replica not answering ({labels}): {error}", symptom=True
    ),
    # A hung engine freezes its own numbers and still answers /health 200: what shows it is
    # users' requests that a replica accepted and never finished.
    Rule(
        Layer.VLLM,
        "canary.success",
        C.EQUALS,
        0,
        "a user request accepted by a vLLM replica failed ({labels}): timed out or broke off",
        symptom=True,
        needs_label="replica",
    ),
    # A fail-slow replica answers every request, slowly: the median time between its tokens
    # since the fault, against every replica's before and against the other replicas' since.
    # Between tokens, not end to end: a request's route through the front door and Serve costs
    # as much as its tokens on this tiny model and does not slow, so end-to-end times put a
    # tenfold-slowed replica at 3.6-4.2 x its peer, against 2.1 x for a healthy one beside a
    # restarting controller. Both comparisons, because a busy machine slows every replica.
    # Data (2026-12-07, 1 healthy + 4 control runs): healthy 0.96 x, 2.35 x its peer; control 14.5-17.8 x.
    Rule(
        Layer.VLLM,
        "canary.itl_s",
        C.OUTLIER,
        4,
        "requests answered by a vLLM replica ({labels}) took {value:.3g} x as long between tokens as "
        "before the fault and as on the other replicas",
        symptom=True,
        needs_label="replica",
    ),
    # Device: memory on the card that the replica needs.
    Rule(Layer.DEVICE, "device.available", C.EQUALS, 0, "device unavailable ({labels})"),
    Rule(
        Layer.DEVICE,
        "device.free_bytes",
        C.BELOW,
        None,
        "device {labels} has {value:.4g} bytes free, below the {threshold:.4g} a replica needs",
    ),
    # A replica's device is rarely "free enough" while the replica itself holds it, so the
    # level rule alone stays silent at a squat; a sudden drop of free memory is the sign. Sudden,
    # because a replica (re)starting takes its own memory gradually: measured on 2 cores, at
    # most 163 MB per 1 s reading over 6 restarts, against 586-1160 MB within 3 s over 6 squats.
    Rule(
        Layer.DEVICE,
        "device.free_bytes",
        C.PLUNGING,
        384 * 2**20,
        "device {labels} lost {value:.4g} bytes of free memory within 3 s, faster than a replica "
        "loads: something outside the replica took them",
    ),
    # Ray (meso): nodes, pending work and placement groups, leaked actors.
    # DEAD nodes stay listed for the cluster's life: a new death is a rise, not a level.
    Rule(Layer.RAY, "ray.nodes_dead", C.RISING, 0, "{value:g} more Ray node(s) dead"),
    # Ray's state API answers through the GCS: failed reads while every node still serves are
    # the sign of a lost control plane (ray.kill_gcs). A symptom, so a cause in any layer outranks it.
    Rule(
        Layer.RAY,
        "ray",
        C.UNREACHABLE,
        0,
        "Ray not answering its probes ({labels}: the GCS or Serve's controller down?): {error}",
        symptom=True,
    ),
    # Sustained, it is the cause: more than 8 failed reads of the state API in the window. A GCS
    # down answers none (16-19 in 40 s, 5 runs); a busy one misses a few (at most 5 in any 40 s
    # of 90 other runs, under kv_flood). A replica that stops answering meanwhile is its symptom
    # (measured: replica-0's /metrics timed out while the GCS stayed down).
    Rule(
        Layer.RAY,
        "ray",
        C.UNREACHABLE,
        8,
        "Ray's state API silent for {value:g} reads (the GCS down?): {error}",
        exact=True,
    ),
    Rule(Layer.RAY, "ray.nodes_alive", C.FALLING, 0, "ALIVE Ray nodes dropped by {value:g}"),
    Rule(Layer.RAY, "ray.pending_pgs", C.ABOVE, 0, "{value:g} Ray placement group(s) PENDING"),
    Rule(
        Layer.RAY,
        "ray.tasks_pending_node_assignment",
        C.ABOVE,
        0,
        "{value:g} Ray task(s) pending node assignment",
    ),
    Rule(
        Layer.RAY, "ray.actors_alive", C.GROWING, 0.05, "alive Ray actors ({labels}) growing at {value:.3g}/s"
    ),
    # An actor Ray keeps restarting (a crash-looping Serve controller) is down while it restarts.
    Rule(
        Layer.RAY,
        "ray.actors",
        C.ABOVE,
        0,
        "Ray actor(s) restarting ({labels})",
        symptom=True,
        only=(("state", "RESTARTING"),),
    ),
    # Kubernetes (macro): Pods that cannot be placed, nodes leaving.
    # The scheduler's own reason comes first: it names the obstacle (GPUs, taint, anti-affinity).
    Rule(
        Layer.K8S, "k8s.pods_unschedulable", C.ABOVE, 0, "{value:g} Pod(s) Pending, unschedulable ({labels})"
    ),
    Rule(Layer.K8S, "k8s.nodes_ready", C.FALLING, 0, "Ready Kubernetes nodes dropped by {value:g}"),
    Rule(
        Layer.K8S, "k8s.nodes_schedulable", C.FALLING, 0, "schedulable Kubernetes nodes dropped by {value:g}"
    ),
    Rule(Layer.K8S, "k8s.pods_pending", C.ABOVE, 0, "{value:g} Pod(s) Pending ({labels})"),
)

LEVEL_CONDITIONS = frozenset({C.AT_LEAST, C.ABOVE, C.BELOW, C.EQUALS})
# The span of a plunge: a drop this fast is not a replica loading itself.
PLUNGE_SPAN_S = 3.0


@dataclass(frozen=True)
class Match:
    """A rule that fired, with the reading that made it fire."""

    rule: Rule
    value: float
    t: float
    labels: Mapping[str, str]
    threshold: float
    error: str = ""

    @property
    def reason(self) -> str:
        """The rule's reason with this match's numbers."""
        return self.rule.reason.format(
            value=self.value,
            threshold=self.threshold,
            labels=format_labels(self.labels) or "all",
            error=self.error,
        )


@dataclass(frozen=True)
class TriageResult:
    """The layer at fault (or ``unknown``), why, and the evidence."""

    layer: str
    reason: str
    evidence: dict[str, object] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        """The verdict.json ``triage`` object."""
        return {"layer": self.layer, "reason": self.reason, "evidence": self.evidence}


def _level_holds(condition: Condition, value: float, threshold: float) -> bool:
    if condition is C.AT_LEAST:
        return value >= threshold
    if condition is C.ABOVE:
        return value > threshold
    if condition is C.BELOW:
        return value < threshold
    return value == threshold


def _match_level(
    rule: Rule, threshold: float, timeline: Timeline, start: float, end: float, since: float
) -> Match | None:
    """The most telling reading in ``[max(start, since), end]`` meeting a level condition that
    did not already hold, continuously, from before ``since``."""
    found: list[tuple[float, float, str]] = []
    for label_text, points in timeline.series(rule.probe, end=end, include_end=True).items():
        if not rule.reads(parse_labels(label_text)):
            continue
        points = sorted(points)
        before = [v for t, v in points if t < since]
        standing = bool(before) and _level_holds(rule.condition, before[-1], threshold)
        for t, v in points:
            if t < since:
                continue
            if not _level_holds(rule.condition, v, threshold):
                standing = False
            elif not standing and t >= start:
                found.append((t, v, label_text))
    if not found:
        return None
    if rule.condition in (C.AT_LEAST, C.ABOVE):
        t, value, label_text = max(found, key=lambda f: (f[1], -f[0]))
    elif rule.condition is C.BELOW:
        t, value, label_text = min(found, key=lambda f: (f[1], f[0]))
    else:
        t, value, label_text = min(found)
    return Match(rule, value, t, parse_labels(label_text), threshold)


def _match_change(rule: Rule, threshold: float, timeline: Timeline, start: float, end: float) -> Match | None:
    best: Match | None = None
    for label_text, points in timeline.series(rule.probe, start=start, end=end, include_end=True).items():
        points = sorted(points)
        labels = parse_labels(label_text)
        if rule.condition is C.RISING:
            value = sum(b - a if b >= a else b for (_, a), (_, b) in zip(points, points[1:], strict=False))
        elif rule.condition is C.FALLING:
            peak, value = -math.inf, 0.0
            for _, v in points:
                peak = max(peak, v)
                value = max(value, peak - v)
        elif rule.condition is C.PLUNGING:
            value = max(
                (
                    max(v for t, v in points[: i + 1] if t >= at - PLUNGE_SPAN_S) - now
                    for i, (at, now) in enumerate(points)
                ),
                default=0.0,
            )
        else:
            value = least_squares_slope(points) or 0.0
        if value > threshold and (best is None or value > best.value):
            best = Match(rule, value, points[-1][0], labels, threshold)
    return best


# Readings a median needs before SLOWER/OUTLIER compares it with another.
OUTLIER_MIN_READINGS = 3


def _match_outlier(
    rule: Rule, threshold: float, timeline: Timeline, start: float, end: float, since: float
) -> Match | None:
    """The series whose median reading in ``[max(start, since), end]`` is more than
    ``threshold`` times both the median of every series' readings before ``since`` and the
    median of every other series' readings in that window (its peers); the value is the
    smaller of the two ratios.

    Before the fault the replicas' readings are pooled: a router spreads a few canary requests
    a second unevenly, and one replica's own few were too noisy a reference. Beside a CPU hog,
    replica-0 got 4 requests in its 12 s baseline, median 0.228 s against the other's 0.091 s
    over 10, and slowed tenfold it read 3.7 x its own median but 9.1 x its peer's."""
    before: dict[str, list[float]] = {}
    after: dict[str, list[float]] = {}
    first: dict[str, float] = {}
    for label_text, points in timeline.series(rule.probe, end=end, include_end=True).items():
        if not rule.reads(parse_labels(label_text)):
            continue
        before[label_text] = [v for t, v in points if t < since]
        window = sorted((t, v) for t, v in points if t >= max(start, since))
        after[label_text] = [v for _, v in window]
        if window:
            first[label_text] = window[0][0]
    pooled = [v for vs in before.values() for v in vs]
    if len(pooled) < OUTLIER_MIN_READINGS:
        return None
    reference = statistics.median(pooled)
    best: Match | None = None
    for label_text, values in after.items():
        peers = [v for other, vs in after.items() if other != label_text for v in vs]
        if min(len(values), len(peers)) < OUTLIER_MIN_READINGS:
            continue
        peer = statistics.median(peers)
        if reference <= 0 or peer <= 0:
            continue
        median = statistics.median(values)
        ratio = min(median / reference, median / peer)
        if ratio > threshold and (best is None or ratio > best.value):
            best = Match(rule, ratio, first[label_text], parse_labels(label_text), threshold)
    return best


def _match_sustained(
    rule: Rule, threshold: float, timeline: Timeline, start: float, end: float, since: float
) -> Match | None:
    """The series whose median reading in ``[max(start, since), end]`` is at least ``threshold``
    (over OUTLIER_MIN_READINGS readings at least), unless its median before ``since`` already was."""
    best: Match | None = None
    for label_text, points in timeline.series(rule.probe, end=end, include_end=True).items():
        if not rule.reads(parse_labels(label_text)):
            continue
        before = [v for t, v in points if t < since]
        window = sorted((t, v) for t, v in points if t >= max(start, since))
        if len(window) < OUTLIER_MIN_READINGS:
            continue
        if before and statistics.median(before) >= threshold:
            continue
        median = statistics.median(v for _, v in window)
        if median >= threshold and (best is None or median > best.value):
            best = Match(rule, median, window[0][0], parse_labels(label_text), threshold)
    return best


def _match_unreachable(
    rule: Rule, threshold: float, timeline: Timeline, start: float, end: float, since: float
) -> Match | None:
    """Failed reads by this layer's probes in the window, leaving out a probe that was failing
    on every tick from before ``since`` on (its failure is standing, not new)."""
    # A successful read leaves rows under the readings' names, not the probe's, so a probe
    # read fine on a tick exactly when that tick has rows and none is this probe's error.
    ticks = sorted({row.t for row in timeline.rows if row.t <= end})
    errors: dict[str, dict[float, Row]] = {}
    for row in timeline.errors(end=end):
        if (row.probe == rule.probe) if rule.exact else (row.layer == rule.probe):
            errors.setdefault(row.probe, {})[row.t] = row
    before = [t for t in ticks if t < since]
    failed: list[Row] = []
    for by_time in errors.values():
        standing = bool(before) and before[-1] in by_time
        for t in ticks:
            if t < since:
                continue
            if t not in by_time:
                standing = False
            elif not standing and t >= start:
                failed.append(by_time[t])
    if len(failed) <= threshold:
        return None
    first = min(failed, key=lambda r: r.t)
    instance = first.probe.partition("@")[2]
    labels = {"instance": instance} if instance else {"probe": first.probe}
    return Match(rule, float(len(failed)), first.t, labels, threshold, first.error)


def match_rule(
    rule: Rule,
    timeline: Timeline,
    start: float,
    end: float,
    since: float,
    thresholds: Mapping[str, float] | None = None,
) -> Match | None:
    """Whether ``rule`` fires in ``[start, end]`` of ``timeline``, and on which reading."""
    threshold = rule.threshold if rule.threshold is not None else (thresholds or {}).get(rule.probe)
    if threshold is None:
        logger.debug("triage: skipping %s %s: no threshold supplied", rule.probe, rule.condition.value)
        return None
    if rule.condition in LEVEL_CONDITIONS:
        return _match_level(rule, threshold, timeline, start, end, since)
    if rule.condition is C.UNREACHABLE:
        return _match_unreachable(rule, threshold, timeline, start, end, since)
    if rule.condition is C.OUTLIER:
        return _match_outlier(rule, threshold, timeline, start, end, since)
    if rule.condition is C.SUSTAINED:
        return _match_sustained(rule, threshold, timeline, start, end, since)
    return _match_change(rule, threshold, timeline, start, end)


def triage(
    timeline: Timeline,
    breach_at: float,
    *,
    since: float | None = None,
    lookback_s: float = 30.0,
    lookahead_s: float = 10.0,
    thresholds: Mapping[str, float] | None = None,
    rules: Sequence[Rule] = RULES,
    breached_layers: frozenset[str] = frozenset(),
) -> TriageResult:
    """Name the layer behind the breach at ``breach_at``.

    Readings in ``[breach_at - lookback_s, breach_at + lookahead_s]`` are examined: the
    lookahead is there because the cause can surface after the symptom (Ray marks a killed
    node dead seconds after its replica stopped answering). ``since`` (default: the window
    start; pass the injection time) separates new conditions from standing ones.
    ``thresholds`` supplies rule thresholds left open in the table, by probe name
    (``{"device.free_bytes": bytes_a_replica_needs}``). ``breached_layers`` are the layers
    whose probes the failed SLOs read: among symptoms alone, one of those layers' explains
    the breach more directly than another layer's (Serve's controller restarting, not a
    replica missing three reads meanwhile, when Serve's own replica count failed).
    """
    start, end = breach_at - lookback_s, breach_at + lookahead_s
    since = start if since is None else since
    matches = [m for rule in rules if (m := match_rule(rule, timeline, start, end, since, thresholds))]
    order = {layer: index for index, layer in enumerate(TRIAGE_ORDER)}
    ranked = sorted(
        matches,
        key=lambda m: (
            m.rule.symptom,
            m.rule.symptom and m.rule.layer.value not in breached_layers,
            order.get(m.rule.layer, len(order)),
        ),
    )
    if not ranked:
        return TriageResult(
            "unknown",
            f"no triage rule matched between {start:.3f} and {end:.3f}",
            {"window": [start, end], "rules_checked": len(rules)},
        )
    top = ranked[0]
    evidence: dict[str, object] = {
        "probe": top.rule.probe,
        "condition": top.rule.condition.value,
        "threshold": top.threshold,
        "value": top.value,
        "t": top.t,
        "labels": dict(top.labels),
        "window": [start, end],
        "also": [f"{m.rule.layer.value}: {m.reason}" for m in ranked[1:]],
    }
    if top.error:
        evidence["error"] = top.error
    return TriageResult(top.rule.layer.value, top.reason, evidence)
