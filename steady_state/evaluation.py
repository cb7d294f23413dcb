"""SLO verdicts, time to detect and time to recover, computed from a timeline alone.

Phases are cut at the marks: baseline ``[baseline_start, injected)``, during
``[injected, reverted)``, recovery ``[reverted, end]``. A run killed before a mark still
evaluates: a missing ``end`` is the last row's time, a missing ``baseline_start`` the first's.

An SLO with ``window_s`` is judged on every window ``(t - window_s, t]`` ending at one of its
samples, clipped to the phase, and must hold in all of them; without ``window_s`` the
whole phase is one window. Detection and recovery look at SLOs as they evolve: per sample
(every reading at one sample time) or per window when ``window_s`` is set.
"""

from __future__ import annotations

import bisect
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from inferchaos.steady_state.aggregates import Aggregate, Point, get_aggregate
from inferchaos.steady_state.slo import Op, Phase, Slo, SloSpec
from inferchaos.steady_state.timeline import Mark, Timeline

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PhaseWindow:
    """The time span of one phase; ``closed`` when its end time belongs to it (the run's end)."""

    phase: Phase
    start: float
    end: float
    closed: bool

    def contains(self, t: float) -> bool:
        """Whether time ``t`` lies in this phase."""
        return self.start <= t < self.end or (self.closed and t == self.end)


def phase_windows(timeline: Timeline) -> dict[Phase, PhaseWindow]:
    """The phases present in ``timeline``: during needs ``injected``, recovery needs ``reverted``."""
    times = [row.t for row in timeline.rows]
    marks = timeline.marks
    first = marks.get(Mark.BASELINE_START, min(times, default=None))
    last = marks.get(Mark.END, max(times, default=None))
    if first is None or last is None:
        return {}
    injected, reverted = marks.get(Mark.INJECTED), marks.get(Mark.REVERTED)
    windows: dict[Phase, PhaseWindow] = {}
    if injected is None:
        windows[Phase.BASELINE] = PhaseWindow(Phase.BASELINE, first, last, closed=True)
        return windows
    windows[Phase.BASELINE] = PhaseWindow(Phase.BASELINE, first, injected, closed=False)
    if reverted is None:
        windows[Phase.DURING] = PhaseWindow(Phase.DURING, injected, last, closed=True)
        return windows
    windows[Phase.DURING] = PhaseWindow(Phase.DURING, injected, reverted, closed=False)
    windows[Phase.RECOVERY] = PhaseWindow(Phase.RECOVERY, reverted, last, closed=True)
    return windows


@dataclass(frozen=True)
class SloResult:
    """One entry of verdict.json ``slos[]``; ``observed`` None (and ``ok`` False) without data."""

    name: str
    layer: str
    phase: str
    ok: bool
    observed: float | None
    op: str
    threshold: float
    samples: int = 0
    reason: str = ""
    # A threshold read from the baseline: the baseline value and how it was scaled.
    baseline: float | None = None
    scale: str = ""

    def to_dict(self) -> dict[str, object]:
        """The verdict.json form (``baseline`` and ``scale`` only for a baseline-relative threshold)."""
        entry: dict[str, object] = {
            "name": self.name,
            "layer": self.layer,
            "phase": self.phase,
            "ok": self.ok,
            "observed": self.observed,
            "op": self.op,
            "threshold": None if math.isnan(self.threshold) else self.threshold,
            "samples": self.samples,
            "reason": self.reason,
        }
        if self.scale:
            entry["baseline"] = self.baseline
            entry["scale"] = self.scale
        return entry


@dataclass(frozen=True)
class LayerVerdict:
    """A layer holds when every SLO on its probes holds."""

    layer: str
    ok: bool
    slos: tuple[str, ...]


@dataclass(frozen=True)
class Detection:
    """The first breach of a during-phase SLO after the injection."""

    slo: str
    at: float
    time_to_detect_s: float
    observed: float


@dataclass(frozen=True)
class RecoveryResult:
    """Whether, and how fast, the steady SLOs came back after the revert.

    ``time_to_recover_s`` runs from the revert to the moment from which every steady SLO then
    held for ``hold_s`` (``confirmed_at`` is when that hold completed).
    """

    recovered: bool
    time_to_recover_s: float | None
    steady_at: float | None
    confirmed_at: float | None
    reason: str = ""
    failing_at_end: tuple[str, ...] = ()


@dataclass(frozen=True)
class Evaluation:
    """Everything evaluation says about one run."""

    slos: tuple[SloResult, ...]
    layers: tuple[LayerVerdict, ...]
    detection: Detection | None
    recovery: RecoveryResult | None

    @property
    def ok(self) -> bool:
        """Every SLO held and, where recovery was declared, the system recovered in time."""
        return all(r.ok for r in self.slos) and (self.recovery is None or self.recovery.recovered)

    def timing(self) -> dict[str, float | None]:
        """The verdict.json ``timing`` object."""
        return {
            "time_to_detect_s": None if self.detection is None else self.detection.time_to_detect_s,
            "time_to_recover_s": None if self.recovery is None else self.recovery.time_to_recover_s,
        }


Series = Mapping[str, Sequence[Point]]


def _aggregate(agg: Aggregate, series: Series) -> float | None:
    if agg.per_series:
        values = [v for v in (agg(points) for points in series.values()) if v is not None]
        return sum(values) if values else None
    pooled = [p for points in series.values() for p in points]
    return agg(pooled) if pooled and len(pooled) >= agg.min_points else None


def _slo_series(timeline: Timeline, slo: Slo, window: PhaseWindow) -> dict[str, list[Point]]:
    series = timeline.series(slo.probe, slo.labels, window.start, window.end, include_end=window.closed)
    return {key: sorted(points) for key, points in series.items()}


def _window_points(points: Sequence[Point], end: float, width: float | None, min_points: int) -> list[Point]:
    """Points of one sorted series in the window ending at ``end``: ``(end - width, end]``,
    or just the readings taken at ``end`` when ``width`` is None.

    A series with a reading at ``end`` is widened back to ``min_points`` points for
    aggregates such as rate that need them; one without stays as it is, so a series that
    went quiet does not contribute stale values.
    """
    times = [t for t, _ in points]
    upto = bisect.bisect_right(times, end)
    begin = bisect.bisect_left(times, end) if width is None else bisect.bisect_right(times, end - width)
    if upto - begin < min_points and upto > 0 and times[upto - 1] == end:
        begin = max(0, upto - min_points)
    return list(points[begin:upto])


def slo_evolution(slo: Slo, series: Series) -> list[tuple[float, float]]:
    """``(t, value)`` of the SLO's aggregate at each sample time of ``series``.

    The value at ``t`` covers the readings at ``t`` (per sample), or the window
    ``(t - window_s, t]`` when the SLO has ``window_s``. Times where the aggregate is
    undefined (a rate with one point) are left out.
    """
    agg = get_aggregate(slo.agg)
    times = sorted({t for points in series.values() for t, _ in points})
    evolution: list[tuple[float, float]] = []
    for t in times:
        in_window = {
            key: window
            for key, points in series.items()
            if (window := _window_points(points, t, slo.window_s, agg.min_points))
        }
        value = _aggregate(agg, in_window)
        if value is not None:
            evolution.append((t, value))
    return evolution


def _worst(slo: Slo, values: Sequence[float]) -> float:
    if slo.op in (Op.LT, Op.LE):
        return max(values)
    if slo.op in (Op.GT, Op.GE):
        return min(values)
    return next((v for v in values if not slo.holds(v)), values[-1])


def evaluate_slo(
    timeline: Timeline, slo: Slo, windows: Mapping[Phase, PhaseWindow] | None = None
) -> SloResult:
    """Judge one SLO over its phase of ``timeline``."""
    windows = phase_windows(timeline) if windows is None else windows
    baseline = baseline_value(timeline, slo, windows) if slo.scale else None
    slo = slo.scaled_by(baseline)
    scale = slo.scale.describe() if slo.scale else ""

    def result(ok: bool, observed: float | None, samples: int = 0, reason: str = "") -> SloResult:
        return SloResult(slo.name, slo.layer, slo.phase.value, ok, observed, slo.op.value, slo.threshold,
                         samples, reason, baseline, scale)  # fmt: skip

    window = windows.get(slo.phase)
    if window is None:
        return result(False, None, reason=f"the {slo.phase.value} phase never happened in this run")
    series = _slo_series(timeline, slo, window)
    samples = sum(len(points) for points in series.values())
    selector = _selector(slo)
    if not samples:
        return result(False, None, reason=f"no samples of {selector} in the {slo.phase.value} phase")
    if slo.scale and baseline is None:
        return result(
            False, None, samples, f"no baseline of {slo.agg}({selector}) to scale its threshold from"
        )
    if slo.window_s is None:
        observed = _aggregate(get_aggregate(slo.agg), series)
    else:
        values = [v for _, v in slo_evolution(slo, series)]
        if slo.phase is Phase.RECOVERY:
            # How fast the system got back is time_to_recover's job; a windowed recovery SLO
            # judges the state it got back to: its last window.
            observed = values[-1] if values else None
        else:
            observed = _worst(slo, values) if values else None
    if observed is None:
        return result(False, None, samples, f"{slo.agg} of {selector} is undefined over {samples} sample(s)")
    ok = slo.holds(observed)
    # "3 x baseline 0.09, at least 0.3": the baseline value stands next to the word it fills in.
    relative = (
        f" ({scale.replace('baseline', f'baseline {baseline:g}', 1)})"
        if slo.scale and baseline is not None
        else ""
    )
    reason = (
        ""
        if ok
        else f"{slo.agg}({selector}) = {observed:g}, needs {slo.op.value} {slo.threshold:g}{relative}"
    )
    return result(ok, observed, samples, reason)


def baseline_value(
    timeline: Timeline, slo: Slo, windows: Mapping[Phase, PhaseWindow] | None = None
) -> float | None:
    """The SLO's aggregate of its probe over the whole baseline phase: what a relative threshold scales.

    None when the baseline phase or its samples are missing: the SLO then fails closed.
    """
    windows = phase_windows(timeline) if windows is None else windows
    window = windows.get(Phase.BASELINE)
    if window is None:
        return None
    return _aggregate(get_aggregate(slo.agg), _slo_series(timeline, slo, window))


def _scaled(timeline: Timeline, slo: Slo, windows: Mapping[Phase, PhaseWindow]) -> Slo:
    return slo.scaled_by(baseline_value(timeline, slo, windows)) if slo.scale else slo


def _selector(slo: Slo) -> str:
    """``probe{k=v,...}`` as a user would write it, for messages."""
    if not slo.labels:
        return slo.probe
    return f"{slo.probe}{{{','.join(f'{k}={v}' for k, v in sorted(slo.labels.items()))}}}"


def layer_verdicts(results: Sequence[SloResult]) -> tuple[LayerVerdict, ...]:
    """Per layer, in order of first appearance: ok only if every one of its SLOs is ok."""
    names: dict[str, list[SloResult]] = {}
    for r in results:
        names.setdefault(r.layer, []).append(r)
    return tuple(
        LayerVerdict(layer, all(r.ok for r in rs), tuple(r.name for r in rs)) for layer, rs in names.items()
    )


def detect(
    timeline: Timeline, spec: SloSpec, windows: Mapping[Phase, PhaseWindow] | None = None
) -> Detection | None:
    """The first breach of any during-phase SLO after the injection, or None."""
    windows = phase_windows(timeline) if windows is None else windows
    during = windows.get(Phase.DURING)
    if during is None:
        return None
    first: Detection | None = None
    for slo in spec.slos:
        if slo.phase is not Phase.DURING:
            continue
        slo = _scaled(timeline, slo, windows)
        for t, value in slo_evolution(slo, _slo_series(timeline, slo, during)):
            if not slo.holds(value):
                if first is None or t < first.at:
                    first = Detection(slo.name, t, t - during.start, value)
                break
    return first


def recover(
    timeline: Timeline, spec: SloSpec, windows: Mapping[Phase, PhaseWindow] | None = None
) -> RecoveryResult | None:
    """When every ``recovery.steady`` SLO held again for ``hold_s`` after the revert; None if undeclared.

    Each SLO's state at a moment is its latest evaluation (per sample or per window, clipped
    to the recovery phase). Steady from ``s`` means every SLO is ok at ``s`` and stays ok
    through ``s + hold_s``, with samples reaching that far. Recovered when such an ``s``
    exists at most ``within_s`` after the revert.
    """
    if spec.recovery is None:
        return None
    rec = spec.recovery
    windows = phase_windows(timeline) if windows is None else windows
    recovery = windows.get(Phase.RECOVERY)
    if recovery is None:
        return RecoveryResult(False, None, None, None, "the fault was never reverted")
    evolutions = {
        name: _held(timeline, _scaled(timeline, spec.by_name(name), windows), recovery) for name in rec.steady
    }
    failing_at_end = tuple(name for name, ev in evolutions.items() if not ev or not ev[-1][1])
    silent = [name for name, ev in evolutions.items() if not ev]
    if silent:
        return RecoveryResult(False, None, None, None, f"no samples after the revert for {', '.join(silent)}",
                              failing_at_end)  # fmt: skip
    last_seen = max(ev[-1][0] for ev in evolutions.values())
    candidates = sorted(
        {t for ev in evolutions.values() for t, _ in ev if t - recovery.start <= rec.within_s}
    )
    for s in candidates:
        if s + rec.hold_s > last_seen:
            break
        if all(_steady(ev, s, s + rec.hold_s) for ev in evolutions.values()):
            return RecoveryResult(True, s - recovery.start, s, s + rec.hold_s)
    return RecoveryResult(
        False,
        None,
        None,
        None,
        f"{', '.join(rec.steady)} did not hold for {rec.hold_s:g} s from within {rec.within_s:g} s of the revert",
        failing_at_end,
    )


def _held(timeline: Timeline, slo: Slo, window: PhaseWindow) -> list[tuple[float, bool]]:
    """Whether ``slo`` held at each of its evaluation times within ``window``."""
    return [(t, slo.holds(value)) for t, value in slo_evolution(slo, _slo_series(timeline, slo, window))]


def _steady(evolution: Sequence[tuple[float, bool]], start: float, end: float) -> bool:
    times = [t for t, _ in evolution]
    at_start = bisect.bisect_right(times, start) - 1
    if at_start < 0:
        return False  # no evaluation yet at ``start``: its state is unknown, not ok
    through = bisect.bisect_right(times, end)
    return all(ok for _, ok in evolution[at_start:through])


def evaluate(timeline: Timeline, spec: SloSpec) -> Evaluation:
    """Every SLO, the per-layer verdicts, time to detect and time to recover for one run."""
    windows = phase_windows(timeline)
    results = tuple(evaluate_slo(timeline, slo, windows) for slo in spec.slos)
    return Evaluation(
        results, layer_verdicts(results), detect(timeline, spec, windows), recover(timeline, spec, windows)
    )
