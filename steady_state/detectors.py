"""Detectors of failures that no single reading shows: leaks and scheduling stalls in Ray, and
requests that wait for a first token that never comes.

Each looks at the timeline over time and returns :class:`Finding` records that carry the
numbers behind them, so a report can show why it fired.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from inferchaos.steady_state.aggregates import Point, p95
from inferchaos.steady_state.censoring import is_censored
from inferchaos.steady_state.timeline import Mark, Timeline, parse_labels

logger = logging.getLogger(__name__)

# How old a gpus_available reading may be and still describe "now" for another probe's row.
MAX_JOIN_AGE_S = 5.0


@dataclass(frozen=True)
class Finding:
    """One slow failure found in the timeline."""

    kind: str
    layer: str
    subject: str
    at: float
    message: str
    evidence: dict[str, float | str] = field(default_factory=dict)


def _gpus_available(timeline: Timeline) -> list[Point]:
    return sorted(p for points in timeline.series("ray.gpus_available").values() for p in points)


def _as_of(points: Sequence[Point], t: float) -> float | None:
    """Value of the latest of sorted ``points`` at or before ``t``, if recent enough to describe ``t``."""
    index = bisect.bisect_right(points, (t, float("inf"))) - 1
    if index < 0 or t - points[index][0] > MAX_JOIN_AGE_S:
        return None
    return points[index][1]


def least_squares_slope(points: Sequence[Point]) -> float | None:
    """Slope (value per second) of the least-squares line through ``points``; None if undefined."""
    if len(points) < 2:
        return None
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    spread = sum((t - mean_t) ** 2 for t, _ in points)
    if spread == 0:
        return None
    return sum((t - mean_t) * (v - mean_v) for t, v in points) / spread


def detect_actor_growth(
    timeline: Timeline,
    window_s: float = 30.0,
    threshold_per_s: float = 0.05,
    min_points: int = 5,
) -> list[Finding]:
    """Actor classes whose ``ray.actors_alive`` keeps rising: the slope over a trailing
    ``window_s`` window exceeds ``threshold_per_s`` (0.05/s is three new actors a minute).
    A class is judged once its history covers a whole window.

    One finding per class, at the first window that crossed the threshold, with the
    steepest slope seen.
    """
    findings: list[Finding] = []
    for label_text, points in sorted(timeline.series("ray.actors_alive").items()):
        points = sorted(points)
        first_at: float | None = None
        first_window: list[Point] = []
        steepest = 0.0
        for index, (t, _) in enumerate(points):
            if t - points[0][0] < window_s:
                continue  # a short history makes a steep line out of noise
            window = [p for p in points[: index + 1] if p[0] > t - window_s]
            slope = least_squares_slope(window) if len(window) >= min_points else None
            if slope is None or slope <= threshold_per_s:
                continue
            steepest = max(steepest, slope)
            if first_at is None:
                first_at, first_window = t, window
        if first_at is None:
            continue
        actor_class = parse_labels(label_text).get("class", label_text or "?")
        findings.append(
            Finding(
                kind="actor_growth",
                layer="ray",
                subject=actor_class,
                at=first_at,
                message=(
                    f"alive actors of {actor_class} grew from {first_window[0][1]:g} to {first_window[-1][1]:g} "
                    f"in {first_window[-1][0] - first_window[0][0]:g} s (up to {steepest:.3g}/s)"
                ),
                evidence={
                    "class": actor_class,
                    "slope_per_s": steepest,
                    "threshold_per_s": threshold_per_s,
                    "alive_at_start": first_window[0][1],
                    "alive_at_detection": first_window[-1][1],
                    "alive_last": points[-1][1],
                },
            )
        )
    return findings


def detect_stalled_placement_groups(timeline: Timeline, min_pending_s: float = 10.0) -> list[Finding]:
    """Placement groups PENDING for ``min_pending_s`` or more while GPUs are free.

    With no free GPU a pending group is a shortage and waiting is right; with free GPUs it
    is a stall (STRICT_SPREAD over too few nodes, STRICT_PACK wider than a node), which Ray
    does not warn about.
    """
    findings: list[Finding] = []
    free_gpus = _gpus_available(timeline)
    for label_text, points in sorted(timeline.series("ray.pg_pending_age_s").items()):
        labels = parse_labels(label_text)
        for t, age in sorted(points):
            if age < min_pending_s:
                continue
            gpus = _as_of(free_gpus, t)
            if gpus is None or gpus <= 0:
                continue
            pg = labels.get("pg", label_text)
            strategy = labels.get("strategy", "?")
            findings.append(
                Finding(
                    kind="placement_group_stall",
                    layer="ray",
                    subject=pg,
                    at=t,
                    message=f"placement group {pg} ({strategy}) PENDING {age:g} s while {gpus:g} GPU(s) are free",
                    evidence={"pg": pg, "strategy": strategy, "pending_s": age, "gpus_available": gpus},
                )
            )
            break
    return findings


def detect_tasks_pending_with_free_gpus(timeline: Timeline, min_duration_s: float = 5.0) -> list[Finding]:
    """Tasks waiting for node assignment while logical GPUs are free, for ``min_duration_s`` on end.

    Ray assigns a feasible task within moments; pending work next to free GPUs for longer
    means the free GPUs are not usable by it (held by leaked actors, fragmented, or on the
    wrong node). Returns at most one finding: the first such episode.
    """
    free_gpus = _gpus_available(timeline)
    pending_points = sorted(
        p for ps in timeline.series("ray.tasks_pending_node_assignment").values() for p in ps
    )
    episode_start: float | None = None
    peak_pending = 0.0
    for t, pending in pending_points:
        gpus = _as_of(free_gpus, t)
        if pending > 0 and gpus is not None and gpus > 0:
            if episode_start is None:
                episode_start, peak_pending = t, pending
            peak_pending = max(peak_pending, pending)
            if t - episode_start >= min_duration_s:
                return [
                    Finding(
                        kind="tasks_pending_with_free_gpus",
                        layer="ray",
                        subject="tasks",
                        at=episode_start,
                        message=(
                            f"{peak_pending:g} task(s) pending node assignment for {t - episode_start:g} s "
                            f"while {gpus:g} GPU(s) were free"
                        ),
                        evidence={
                            "pending_tasks": peak_pending,
                            "gpus_available": gpus,
                            "duration_s": t - episode_start,
                        },
                    )
                ]
        else:
            episode_start = None
    return []


def _baseline_ttft(timeline: Timeline) -> tuple[list[Point], int]:
    """The TTFT readings measured before the ``injected`` mark (none without it), and how many
    failed requests' censored samples (steady_state/censoring.py) were left out of them."""
    injected = timeline.marks.get(Mark.INJECTED)
    measured: list[Point] = []
    censored = 0
    if injected is None:
        return measured, censored
    for row in timeline.select("canary.ttft_s", end=injected):
        # The stall threshold scales with how long healthy requests waited. A failure sits at
        # the timeout, a wait nobody measured, and five times it would put the threshold past
        # the moment any request can still be waiting: a few baseline timeouts would blind
        # the detector for the whole run.
        if is_censored(row.labels):
            censored += 1
        else:
            measured.append((row.t, row.value))
    return measured, censored


def _baseline_ttft_p95(timeline: Timeline) -> float | None:
    measured, _ = _baseline_ttft(timeline)
    return p95(measured) if measured else None


def stall_threshold_s(timeline: Timeline, config: DetectorConfig | None = None) -> float:
    """How long a request may wait for its first token before :func:`detect_stalled_requests`
    calls it stalled in ``timeline``: its baseline's TTFT p95 times a factor, at least a floor."""
    config = config or DetectorConfig()
    base_p95 = _baseline_ttft_p95(timeline)
    if base_p95 is None:
        return config.stall_min_wait_s
    return max(config.stall_min_wait_s, config.stall_times_baseline * base_p95)


def detect_stalled_requests(
    timeline: Timeline, min_wait_s: float = 1.0, times_baseline: float = 5.0
) -> list[Finding]:
    """A canary request waiting for its first token far longer than any healthy one did.

    ``canary.oldest_wait_s`` (read each tick) is how long the oldest request in flight has
    waited; it crosses the threshold, ``times_baseline`` x the baseline's TTFT p95 and never
    below ``min_wait_s``, seconds before that request can time out. A hung engine behind a
    live API server is seen here first: its ``/health`` stays 200, its replica's metrics
    freeze, and the request itself only fails at its timeout. The baseline is the TTFT read
    before the ``injected`` mark (none: the threshold is ``min_wait_s``), failed requests left
    out (their censored samples sit at the timeout, not at a wait anyone measured); the
    finding says how many it left out. One finding per episode above the threshold.
    """
    baseline, censored = _baseline_ttft(timeline)
    base_p95 = p95(baseline) if baseline else None
    threshold = max(min_wait_s, times_baseline * base_p95) if base_p95 is not None else min_wait_s
    waits = sorted(p for ps in timeline.series("canary.oldest_wait_s").values() for p in ps)
    findings: list[Finding] = []
    above = False
    for t, wait in waits:
        if wait < threshold:
            above = False
            continue
        if above:
            continue
        above = True
        healthy = (
            f"{times_baseline:g} x the baseline's TTFT p95 {base_p95:.2f} s, at least {min_wait_s:g} s"
            if base_p95 is not None
            else f"{min_wait_s:g} s, no baseline"
        )
        if censored:
            healthy += f"; {censored} failed baseline request(s) left out of that p95"
        findings.append(
            Finding(
                kind="stalled_request",
                layer="canary",
                subject="canary",
                at=t,
                message=f"a request waited {wait:.1f} s for its first token (threshold {threshold:.2f} s: {healthy})",
                evidence={
                    "wait_s": wait,
                    "threshold_s": threshold,
                    "baseline_ttft_p95_s": base_p95 or 0.0,
                    "baseline_censored_left_out": float(censored),
                },
            )
        )
    return findings


@dataclass(frozen=True)
class DetectorConfig:
    """Thresholds of the slow-failure detectors."""

    actor_window_s: float = 30.0
    actor_threshold_per_s: float = 0.05
    actor_min_points: int = 5
    pg_min_pending_s: float = 10.0
    tasks_min_duration_s: float = 5.0
    stall_min_wait_s: float = 1.0
    stall_times_baseline: float = 5.0


def run_detectors(timeline: Timeline, config: DetectorConfig | None = None) -> list[Finding]:
    """Every slow-failure detector over ``timeline``, findings ordered by time."""
    config = config or DetectorConfig()
    findings = [
        *detect_actor_growth(
            timeline, config.actor_window_s, config.actor_threshold_per_s, config.actor_min_points
        ),
        *detect_stalled_placement_groups(timeline, config.pg_min_pending_s),
        *detect_tasks_pending_with_free_gpus(timeline, config.tasks_min_duration_s),
        *detect_stalled_requests(timeline, config.stall_min_wait_s, config.stall_times_baseline),
    ]
    return sorted(findings, key=lambda f: f.at)
