"""SLO verdicts, time to detect and time to recover, computed from a timeline alone.

Phases are cut at the marks: baseline ``[baseline_start, injected)``, during
``[injected, reverted)``, recovery ``[reverted, end]``. A run killed before a mark still
evaluates: a missing ``end`` is the last row's time, a missing ``baseline_start`` the first's.

An SLO with ``window_s`` is judged on every window ``(t - window_s, t]`` ending at one of its
samples, clipped to the phase, and must hold in all of them; without ``window_s`` the
whole phase is one window. Detection and recovery look at SLOs as they evolve: per sample
(every reading at one sample time) or per window when ``window_s`` is set.

"No data" fails closed, per source. A failed read is one error row named after its Probe
object (``vllm@replica-0``) with that object's labels. It concerns an SLO when it is of the
SLO's layer and its labels do not contradict the SLO's (no key with two different values);
its *source* is its probe name with its labels. In an evaluation window (the whole phase,
one ``window_s`` window, or one sample time) a source with failed reads and no usable
reading of the SLO's probe carrying the source's labels (and the SLO's) is *silent*, and
the SLO does not hold there, whatever the other sources read: a frozen replica must not
pass a queue SLO on its healthy neighbour's numbers. A source that failed a read but was
also heard from in the window is not silent: transient read errors are normal. A
``window_s`` window looks back before its phase for this (not for its value), so an error
on a phase's first tick is not silence either. This holds for phase verdicts (a windowed
recovery SLO: the window ending at the phase's last reading of any probe, so a series that
went quiet fails it; other windowed SLOs: every window), for detection and
recovery (a silent window is a not-ok evaluation at its time, so recovery is not confirmed
while a source is silent) and for a baseline that scales a threshold (a silent baseline is
no baseline).

For a probe of :data:`FAILED_READ_IS_ZERO` (``vllm.healthy``) each failed read that concerns
the SLO is also a reading of 0: a replica whose server answers one read in two is not up.

A ``canary.success`` failure that lacks a label an SLO selects on (no ``replica``: the
request failed before the front door named the replica) counts against that SLO; see
:func:`counts_toward`.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from inferchaos.steady_state.aggregates import Aggregate, Point, get_aggregate
from inferchaos.steady_state.catalog import COLD_START, probe_layer
from inferchaos.steady_state.slo import Op, Phase, RecoverySpec, Slo, SloSpec
from inferchaos.steady_state.timeline import Mark, Row, Timeline

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


def judged_window(slo: Slo, window: PhaseWindow) -> PhaseWindow:
    """The part of ``window`` that ``slo`` judges: all of it, or what follows its ``after_s``."""
    if slo.after_s is None:
        return window
    return replace(window, start=min(window.end, window.start + slo.after_s))


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
    """The first breach of a during-phase SLO after the injection (``observed`` None: a source
    of the SLO went silent where it has no value)."""

    slo: str
    at: float
    time_to_detect_s: float
    observed: float | None


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
    # The window recovery was judged in (RecoverySpec.window_s: this run's cold start considered).
    within_s: float | None = None
    # Steady SLOs whose own deadline (RecoverySpec.first_within_s) passed before they held.
    missed: tuple[str, ...] = ()
    # Where recovery was not confirmed: the steady SLOs that failed at some moment of the
    # window it was judged in, or at the end (those that kept the hold from completing, even
    # where all held again too late).
    blocked_by: tuple[str, ...] = ()

    # No later sample can confirm a recovery: the window has closed, and every hold that began
    # in it already broke (or could not begin: a steady SLO had no sample in it).
    hopeless: bool = False

    @property
    def settled(self) -> bool:
        """No later sample can change this result: recovered, a deadline already missed, or
        every hold that could still have confirmed it already broken."""
        return self.recovered or bool(self.missed) or self.hopeless


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

# A canary request that failed before the front door said which replica served it (refused,
# or timed out before the response headers: a frozen replica answers nothing at all) could
# have been any replica's. Its failure counts against every SLO scoped to a replica, or such
# an SLO would never see the failures of the very replica that froze. A success without the
# label is attributed to no one: it says nothing about any particular replica.
UNATTRIBUTED_FAILURES: frozenset[str] = frozenset({"canary.success"})


# Availability read from a replica's own server: a read of that server that failed (its
# /metrics did not answer) is a reading of 0, not a gap. Transient errors are normal for a
# gauge such as a queue length, whose value a failed read says nothing about; for "is it up"
# an unanswered read is the answer, and a replica failing half its reads is not available.
FAILED_READ_IS_ZERO: frozenset[str] = frozenset({"vllm.healthy"})


def _compatible(labels: Mapping[str, str], other: Mapping[str, str]) -> bool:
    """No key of both has two different values."""
    return all(other[key] == value for key, value in labels.items() if key in other)


def counts_toward(row: Row, slo: Slo) -> bool:
    """Whether ``row`` (usable or not) belongs to ``slo``'s series.

    It does when it reads the SLO's probe with labels that include the SLO's, or when it is an
    unattributed failure (:data:`UNATTRIBUTED_FAILURES`: value 0, lacking a label the SLO
    selects on, contradicting none).
    """
    if row.probe != slo.probe:
        return False
    if row.matches(slo.labels):
        return True
    if slo.attributed_only:
        return False
    return row.probe in UNATTRIBUTED_FAILURES and row.value == 0 and _compatible(row.labels, slo.labels)


def _aggregate(agg: Aggregate, series: Series) -> float | None:
    if agg.per_series:
        values = [v for v in (agg(points) for points in series.values()) if v is not None]
        return sum(values) if values else None
    pooled = [p for points in series.values() for p in points]
    return agg(pooled) if pooled and len(pooled) >= agg.min_points else None


def _slo_series(timeline: Timeline, slo: Slo, window: PhaseWindow) -> dict[str, list[Point]]:
    series: dict[str, list[Point]] = {}
    failed_is_zero = slo.probe in FAILED_READ_IS_ZERO
    for row in timeline.rows:
        if not window.contains(row.t):
            continue
        if row.probe == slo.probe and row.ok and counts_toward(row, slo):
            series.setdefault(row.label_text(), []).append((row.t, row.value))
        elif failed_is_zero and _concerns(row, slo):
            series.setdefault(row.label_text(), []).append((row.t, 0.0))
    return {key: sorted(points) for key, points in series.items()}


def _concerns(row: Row, slo: Slo) -> bool:
    """Whether ``row`` is a failed read of a Probe object that may speak for ``slo``: of its
    layer, with labels that contradict none of the SLO's."""
    return bool(row.error) and probe_layer(row.probe) == slo.layer and _compatible(row.labels, slo.labels)


@dataclass(frozen=True)
class Source:
    """A Probe object's failed reads that concern one SLO, and when it was heard from.

    ``errors`` are its error rows within the phase, in time order (``failed_at`` their
    times); ``heard`` the times of every usable reading of the SLO's probe with the source's
    labels (and the SLO's), before the phase too.
    """

    name: str
    errors: tuple[Row, ...]
    failed_at: tuple[float, ...]
    heard: tuple[float, ...]


@dataclass(frozen=True)
class Silence:
    """The sources silent in one evaluation window: failed reads there and not one reading."""

    sources: tuple[str, ...]
    failed: int
    error: str

    def reason(self, where: str) -> str:
        """``no data from vllm@replica-0 (replica=replica-0) in <where>: 5 failed reads (<error>)``."""
        reads = "read" if self.failed == 1 else "reads"
        return (
            f"no data from {', '.join(self.sources)} in {where}: {self.failed} failed {reads} ({self.error})"
        )


def _sources(timeline: Timeline, slo: Slo, window: PhaseWindow) -> list[Source]:
    """The sources of failed reads in ``window`` that concern ``slo`` (module docstring)."""
    failed: dict[tuple[str, str], list[Row]] = {}
    for row in timeline.rows:
        if window.contains(row.t) and _concerns(row, slo):
            failed.setdefault((row.probe, row.label_text()), []).append(row)
    if not failed:
        return []
    readings = [row for row in timeline.rows if row.probe == slo.probe and row.ok]
    sources = []
    for (probe, _), rows in failed.items():
        labels = {**slo.labels, **rows[0].labels}
        own = ", ".join(f"{k}={v}" for k, v in sorted(rows[0].labels.items()))
        name = f"{probe} ({own})" if own else probe
        heard = sorted(row.t for row in readings if row.matches(labels))
        errors = tuple(sorted(rows, key=lambda r: r.t))
        sources.append(Source(name, errors, tuple(r.t for r in errors), tuple(heard)))
    return sources


def _silence(sources: Sequence[Source], start: float, end: float) -> Silence | None:
    """The sources with failed reads in ``(start, end]`` and no reading in it; None if none."""
    silent: list[Source] = []
    errors: list[Row] = []
    for source in sources:
        times = source.failed_at
        failed = source.errors[bisect.bisect_right(times, start) : bisect.bisect_right(times, end)]
        heard = bisect.bisect_right(source.heard, start)
        if failed and not (heard < len(source.heard) and source.heard[heard] <= end):
            silent.append(source)
            errors.extend(failed)
    if not silent:
        return None
    latest = max(errors, key=lambda row: row.t).error
    # One line, however the probe worded its error: reasons end up in one-line summaries.
    error = " ".join(latest.split())
    return Silence(tuple(s.name for s in silent), len(errors), error[:200])


def _phase_silence(sources: Sequence[Source], window: PhaseWindow) -> Silence | None:
    # Every error of a source lies in the phase; its readings must too, to speak for it.
    end = window.end if window.closed else math.nextafter(window.end, -math.inf)
    return _silence(sources, math.nextafter(window.start, -math.inf), end)


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


@dataclass(frozen=True)
class Judgement:
    """The SLO at one evaluation time: its aggregate there (None: undefined), whether it held,
    and the sources silent there (a silent window never holds)."""

    t: float
    value: float | None
    ok: bool
    silence: Silence | None = None


def slo_evolution(slo: Slo, series: Series, sources: Sequence[Source] = ()) -> list[Judgement]:
    """The SLO judged at each sample time of ``series`` and each failed read of ``sources``.

    The value at ``t`` covers the readings at ``t`` (per sample), or the window
    ``(t - window_s, t]`` when the SLO has ``window_s``. Times where the aggregate is
    undefined (a rate with one point) are left out unless a source is silent there; a
    failed read's time is only judged when its source is silent there, so a run whose
    sources all answer is judged at its sample times alone.
    """
    sampled = {t for points in series.values() for t, _ in points}
    failed = {t for source in sources for t in source.failed_at}
    evolution: list[Judgement] = []
    for t in sorted(sampled | failed):
        judged = judge_at(slo, series, sources, t)
        if t not in sampled and judged.silence is None:
            continue
        if judged.value is not None or judged.silence is not None:
            evolution.append(judged)
    return evolution


def judge_at(slo: Slo, series: Series, sources: Sequence[Source], t: float) -> Judgement:
    """The SLO at time ``t``: the readings at ``t``, or its window ``(t - window_s, t]``.

    ``value`` is None where the window holds no reading (or too few for the aggregate);
    such a judgement does not hold.
    """
    agg = get_aggregate(slo.agg)
    start = math.nextafter(t, -math.inf) if slo.window_s is None else t - slo.window_s
    silence = _silence(sources, start, t)
    in_window = {
        key: window
        for key, points in series.items()
        if (window := _window_points(points, t, slo.window_s, agg.min_points))
    }
    value = _aggregate(agg, in_window)
    return Judgement(t, value, silence is None and value is not None and slo.holds(value), silence)


def last_observed(timeline: Timeline, window: PhaseWindow) -> float:
    """The time of the last reading of any probe in ``window`` (its end when it has none).

    A run that never recovered has its windowed recovery SLOs judged in the state they were
    in here: the latest moment anything saw the system.
    """
    return max((row.t for row in timeline.rows if window.contains(row.t)), default=window.end)


def state_at(evolution: Sequence[Judgement], t: float, window_s: float) -> Judgement | None:
    """A windowed SLO's state at ``t``: its latest judgement at or before ``t``, as recovery reads it.

    None when there is none, or when the series was quiet for a whole window before ``t``
    (its window is empty there: a replica taken out of rotation gets no canary request, and
    its last old window must not stand for it).
    """
    times = [j.t for j in evolution]
    at = bisect.bisect_right(times, t) - 1
    if at < 0 or t - times[at] >= window_s:
        return None
    return evolution[at]


def _where(slo: Slo, window: PhaseWindow, t: float | None = None) -> str:
    """Where an SLO was judged, for reasons: ``the recovery phase (5 s window ending at +12.0 s)``."""
    phase = f"the {slo.phase.value} phase" + (f" from +{slo.after_s:g} s" if slo.after_s else "")
    if t is None:
        return phase
    # Offsets count from the phase's start, also where the SLO judges only its later part.
    offset = t - window.start + (slo.after_s or 0.0)
    if slo.window_s is None:
        return f"{phase} (the readings at +{offset:.1f} s)"
    return f"{phase} ({slo.window_s:g} s window ending at +{offset:.1f} s)"


def _worst(slo: Slo, values: Sequence[float]) -> float:
    if slo.op in (Op.LT, Op.LE):
        return max(values)
    if slo.op in (Op.GT, Op.GE):
        return min(values)
    return next((v for v in values if not slo.holds(v)), values[-1])


def evaluate_slo(
    timeline: Timeline,
    slo: Slo,
    windows: Mapping[Phase, PhaseWindow] | None = None,
    recovery: RecoveryResult | None = None,
    held: bool = False,
) -> SloResult:
    """Judge one SLO over its phase of ``timeline``; a silent source fails it (module docstring).

    A windowed recovery SLO judges one moment's state: where ``recovery`` was confirmed, the
    end of its hold; otherwise the last moment anything was seen (:func:`last_observed`).
    ``held``: the SLO is one of recovery's steady SLOs. Judged per sample (no window), it is
    then judged over the hold that confirmed recovery, where there was one: the samples
    before it are how long recovery took, as for a windowed one.
    """
    windows = phase_windows(timeline) if windows is None else windows
    baseline, baseline_silence = _baseline(timeline, slo, windows) if slo.scale else (None, None)
    slo = slo.scaled_by(baseline)
    scale = slo.scale.describe() if slo.scale else ""

    def result(ok: bool, observed: float | None, samples: int = 0, reason: str = "") -> SloResult:
        return SloResult(
            slo.name,
            slo.layer,
            slo.phase.value,
            ok,
            observed,
            slo.op.value,
            slo.threshold,
            samples,
            reason,
            baseline,
            scale,
        )

    window = windows.get(slo.phase)
    if window is None:
        return result(False, None, reason=f"the {slo.phase.value} phase never happened in this run")
    window = judged_window(slo, window)
    if (
        held
        and slo.phase is Phase.RECOVERY
        and slo.window_s is None
        and recovery is not None
        and recovery.recovered
        and recovery.steady_at is not None
        and recovery.confirmed_at is not None
    ):
        window = replace(window, start=recovery.steady_at, end=recovery.confirmed_at, closed=True)
    series = _slo_series(timeline, slo, window)
    sources = _sources(timeline, slo, window)
    samples = sum(len(points) for points in series.values())
    selector = _selector(slo)
    if slo.window_s is None:
        observed = _aggregate(get_aggregate(slo.agg), series)
        silence, where = _phase_silence(sources, window), _where(slo, window)
    else:
        if slo.phase is Phase.RECOVERY:
            # How fast the system got back is time_to_recover's job; a windowed recovery SLO
            # judges the state it got back to, read the way the recovery hold reads it, so
            # that the two never disagree about the same seconds. Samples after a confirmed
            # hold are left to no one: the runner stops within a tick of confirming it.
            confirmed = recovery.confirmed_at if recovery is not None and recovery.recovered else None
            end = last_observed(timeline, window) if confirmed is None else confirmed
            final = state_at(slo_evolution(slo, series, sources), end, slo.window_s)
            if final is None or (final.value is None and final.silence is None):
                if not samples:
                    return result(False, None, reason=f"no samples of {selector} in the recovery phase")
                last = max(t for points in series.values() for t, _ in points)
                return result(
                    False,
                    None,
                    samples,
                    f"no samples of {selector} in the last {slo.window_s:g} s of the recovery phase "
                    f"(the last at +{last - window.start:.1f} s of +{end - window.start:.1f} s)",
                )
            judged = [final]
        else:
            judged = full_windows(slo, slo_evolution(slo, series, sources), series, sources, window)
        values = [j.value for j in judged if j.value is not None]
        if not values:
            observed = None
        else:
            observed = values[-1] if slo.phase is Phase.RECOVERY else _worst(slo, values)
        silent = next((j for j in judged if j.silence is not None), None)
        silence = None if silent is None else silent.silence
        where = _where(slo, window, None if silent is None else silent.t)
    if silence is not None:
        return result(False, observed, samples, silence.reason(where))
    if not samples:
        return result(False, None, reason=f"no samples of {selector} in the {slo.phase.value} phase")
    if slo.scale and baseline is None:
        why = f": {baseline_silence.reason('the baseline phase')}" if baseline_silence else ""
        return result(
            False, None, samples, f"no baseline of {slo.agg}({selector}) to scale its threshold from{why}"
        )
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


def _baseline(
    timeline: Timeline, slo: Slo, windows: Mapping[Phase, PhaseWindow]
) -> tuple[float | None, Silence | None]:
    """:func:`baseline_value`, and the silence that left it out, if that was the cause."""
    window = windows.get(Phase.BASELINE)
    if window is None:
        return None, None
    silence = _phase_silence(_sources(timeline, slo, window), window)
    if silence is not None:
        return None, silence
    return _aggregate(get_aggregate(slo.agg), _slo_series(timeline, slo, window)), None


def baseline_value(
    timeline: Timeline, slo: Slo, windows: Mapping[Phase, PhaseWindow] | None = None
) -> float | None:
    """The SLO's aggregate of its probe over the whole baseline phase: what a relative threshold scales.

    None when the baseline phase or its samples are missing, or when a source of the probe
    was silent through the whole baseline: the SLO then fails closed.
    """
    return _baseline(timeline, slo, phase_windows(timeline) if windows is None else windows)[0]


def missing_baselines(timeline: Timeline, slos: Iterable[Slo]) -> list[Slo]:
    """The baseline-relative SLOs of ``slos`` that ``timeline``'s baseline gives no value yet.

    A sampler's baseline goes on while this is not empty (for a bounded time): the front door
    may send a whole baseline to one replica, and an SLO on the other would then fail closed
    on a healthy platform.
    """
    windows = phase_windows(timeline)
    return [slo for slo in slos if slo.scale and baseline_value(timeline, slo, windows) is None]


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
    """The first breach of any during-phase SLO after the injection, or None.

    A source of the SLO silent at an evaluation time is a breach at that time.
    """
    windows = phase_windows(timeline) if windows is None else windows
    during = windows.get(Phase.DURING)
    if during is None:
        return None
    first: Detection | None = None
    for slo in spec.slos:
        if slo.phase is not Phase.DURING:
            continue
        scaled = _scaled(timeline, slo, windows)
        # With no baseline to scale from, the SLO fails the verdict closed, but its first sample
        # after the injection would read as a breach: a time to detect of a millisecond, and a
        # triage of the seconds before the fault could show. It names no moment the platform
        # broke; the first real breach does.
        if math.isnan(scaled.threshold):
            continue
        for judged in _held(timeline, scaled, judged_window(slo, during)):
            if not judged.ok:  # a breach, or a source gone silent
                if first is None or judged.t < first.at:
                    first = Detection(slo.name, judged.t, judged.t - during.start, judged.value)
                break
    return first


def recover(
    timeline: Timeline,
    spec: SloSpec,
    windows: Mapping[Phase, PhaseWindow] | None = None,
    extra: Mapping[str, Sequence[Judgement]] | None = None,
    judged_again: Collection[str] = (),
) -> RecoveryResult | None:
    """When every ``recovery.steady`` SLO held again for ``hold_s`` after the revert; None if undeclared.

        Each SLO's state at a moment is its latest evaluation (per sample or per window, clipped
        to the recovery phase); one where a source of it is silent is not ok. Steady from ``s``
        means every SLO is ok at ``s`` and stays ok through ``s + hold_s``, with samples reaching
        that far; for a windowed SLO, no stretch longer than its window without an evaluation (its
    window would be empty there). Recovered when such an ``s`` exists at most ``within_s`` after
    the revert, and for each SLO of ``first_within_s`` one of its own exists within its deadline.

    ``extra`` are further steady entries judged per sample, ``ok`` where they hold (no
    slow-failure detector firing, say). The steady entries named in ``judged_again`` are judged
    again at the last sample: one that broke again after the hold confirmed it undoes the
    recovery (a replica that froze once the platform looked steady).
    """
    if spec.recovery is None:
        return None
    rec = spec.recovery
    windows = phase_windows(timeline) if windows is None else windows
    within = recovery_window_s(timeline, rec, windows)
    recovery = windows.get(Phase.RECOVERY)
    if recovery is None:
        return RecoveryResult(False, None, None, None, "the fault was never reverted", within_s=within)
    slos = {name: _scaled(timeline, spec.by_name(name), windows) for name in rec.steady}
    evolutions: dict[str, Sequence[Judgement]] = {
        name: _held(timeline, slo, recovery) for name, slo in slos.items()
    }
    windowed: dict[str, float | None] = {name: slo.window_s for name, slo in slos.items()}
    for name, evolution in (extra or {}).items():
        evolutions[name] = [j for j in evolution if recovery.contains(j.t)]
        windowed[name] = None
    failing_at_end = tuple(name for name, ev in evolutions.items() if not ev or not ev[-1].ok)
    # Judged before the rest: a step with no samples at all past its deadline has missed it too.
    reach = max((ev[-1].t for ev in evolutions.values() if ev), default=None)
    missed = tuple(
        name
        for name, first_within in rec.first_within_s.items()
        if _missed(evolutions[name], reach, recovery.start, first_within, rec.hold_s, windowed[name])
    )
    if missed:
        return RecoveryResult(
            False,
            None,
            None,
            None,
            "; ".join(
                f"{name} did not hold for {rec.hold_s:g} s from within {rec.first_within_s[name]:g} s of the revert "
                "(its own deadline)"
                for name in missed
            ),
            failing_at_end,
            within,
            missed,
            blocked_by=missed,
        )
    unsampled = [name for name, ev in evolutions.items() if not ev]
    if unsampled:
        return RecoveryResult(
            False,
            None,
            None,
            None,
            f"no samples after the revert for {', '.join(unsampled)}",
            failing_at_end,
            within,
            blocked_by=tuple(unsampled),
            # Rows come in time order: once the others reach past the window, a first sample of
            # these can only come later still, too late for any hold to start within it.
            hopeless=reach is not None and reach - recovery.start >= within,
        )
    last_seen = max(ev[-1].t for ev in evolutions.values())
    candidates = sorted({j.t for ev in evolutions.values() for j in ev if j.t - recovery.start <= within})
    for s in candidates:
        if s + rec.hold_s > last_seen:
            break
        if all(_steady(ev, s, s + rec.hold_s, windowed[name]) for name, ev in evolutions.items()):
            broke = tuple(
                name
                for name, ev in evolutions.items()
                if name in judged_again and ev[-1].t > s + rec.hold_s and not ev[-1].ok
            )
            if broke:
                # Held, then broke again before the run's last sample: not a recovery.
                return RecoveryResult(
                    False,
                    None,
                    None,
                    None,
                    f"{', '.join(broke)} held from +{s - recovery.start:.1f} s for {rec.hold_s:g} s, "
                    f"then failed again by +{last_seen - recovery.start:.1f} s",
                    broke,
                    within,
                    blocked_by=broke,
                )
            return RecoveryResult(True, s - recovery.start, s, s + rec.hold_s, within_s=within)
    # A steady SLO still silent at the end says which source kept recovery from being confirmed.
    silent_at_end = "".join(
        f"; {name}: {last.silence.reason(_where(slos[name], recovery, last.t))}"
        for name, ev in evolutions.items()
        if (last := ev[-1]).silence is not None and name in slos
    )
    # The SLOs that kept it: failing at the end, or steady again only later than the window
    # (each on its own; the rest were back in time).
    blocked = tuple(
        name
        for name, ev in evolutions.items()
        if name in failing_at_end or _ok_since(ev) - recovery.start > within
    )
    late = (
        f"; all held again by +{last_seen - recovery.start:.1f} s, too late"
        if not failing_at_end and blocked
        else ""
    )
    # Samples come in time order: once they reach past the window, no new moment in it can
    # start a hold, and a hold that already broke stays broken.
    hopeless = last_seen - recovery.start >= within and not any(
        all(_steady(ev, s, min(s + rec.hold_s, last_seen), windowed[name]) for name, ev in evolutions.items())
        for s in candidates
    )
    return RecoveryResult(
        False,
        None,
        None,
        None,
        f"{', '.join(blocked or rec.steady)} did not hold for {rec.hold_s:g} s from within {within:g} s of the revert"
        + _window_basis(rec, within)
        + late
        + silent_at_end,
        failing_at_end,
        within,
        blocked_by=blocked,
        hopeless=hopeless,
    )


def baseline_cold_start_s(timeline: Timeline, windows: Mapping[Phase, PhaseWindow]) -> float | None:
    """The slowest replica's last cold start as the baseline read it (``vllm.cold_start_s``); None
    where the environment published none, or before the baseline was sampled."""
    baseline = windows.get(Phase.BASELINE)
    if baseline is None:
        return None
    rows = timeline.select(COLD_START, start=baseline.start, end=baseline.end, include_end=baseline.closed)
    return max((r.value for r in rows), default=None)


def recovery_window_s(timeline: Timeline, rec: RecoverySpec, windows: Mapping[Phase, PhaseWindow]) -> float:
    """The window recovery is judged in: ``within_s``, or ``within_cold_starts`` of this run's
    baseline cold start where that is longer."""
    return rec.window_s(baseline_cold_start_s(timeline, windows))


def _window_basis(rec: RecoverySpec, within: float) -> str:
    if rec.within_cold_starts is None:
        return ""
    if within > rec.within_s:
        return f" ({rec.within_cold_starts:g} x this platform's replica cold start)"
    return f" (at least {rec.within_s:g} s; {rec.within_cold_starts:g} replica cold starts were shorter or not read)"


def _ok_since(evolution: Sequence[Judgement]) -> float:
    """When ``evolution`` was last ok from on without a break (its first judgement where it
    never failed; infinity where its last judgement failed)."""
    since = evolution[0].t if evolution else math.inf
    for j in evolution:
        if not j.ok:
            since = math.inf
        elif since == math.inf:
            since = j.t
    return since


def _held(timeline: Timeline, slo: Slo, window: PhaseWindow) -> list[Judgement]:
    """``slo`` judged at each of its evaluation times within ``window``, silences included."""
    series, sources = _slo_series(timeline, slo, window), _sources(timeline, slo, window)
    return full_windows(slo, slo_evolution(slo, series, sources), series, sources, window)


def full_windows(
    slo: Slo, evolution: list[Judgement], series: Series, sources: Sequence[Source], window: PhaseWindow
) -> list[Judgement]:
    """A windowed during-phase SLO judged on full windows only: the window that ends a moment
    after the injection holds a reading or two, and one read missed then would read as a
    replica that answered none. A phase shorter than one window is judged once, over all of
    it. (A recovery SLO's window is read as a state, where recovery was confirmed.)"""
    if slo.window_s is None or slo.phase is not Phase.DURING or not evolution:
        return evolution
    full = [j for j in evolution if j.t - window.start >= slo.window_s]
    if full:
        return full
    last = evolution[-1].t
    whole = replace(slo, window_s=math.nextafter(last - window.start, math.inf))
    return [judge_at(whole, series, sources, last)]


def _missed(
    evolution: Sequence[Judgement],
    reach: float | None,
    revert: float,
    first_within: float,
    hold_s: float,
    window_s: float | None,
) -> bool:
    """Whether this one can no longer hold for ``hold_s`` from a moment within ``first_within``
    of the revert (settled: no later sample can change it).

    Once the samples (of every steady SLO) ``reach`` past the deadline, no new moment within it
    can come (rows come in time order): missed when every hold begun within it has already
    broken, or never began (not ok at any moment there). A hold still intact at ``reach`` keeps
    it open until the samples reach its end.
    """
    if reach is None or reach < revert + first_within:
        return False
    return not any(
        _steady(evolution, j.t, min(j.t + hold_s, reach), window_s)
        for j in evolution
        if j.t - revert <= first_within
    )


def _steady(evolution: Sequence[Judgement], start: float, end: float, window_s: float | None) -> bool:
    times = [j.t for j in evolution]
    at_start = bisect.bisect_right(times, start) - 1
    if at_start < 0:
        return False  # no evaluation yet at ``start``: its state is unknown, not ok
    through = bisect.bisect_right(times, end)
    held = evolution[at_start:through]
    if not all(j.ok for j in held):
        return False
    if window_s is None:
        return True
    # A windowed SLO's state at a moment is its window ending then: once its series has been
    # quiet for longer than the window, that window is empty and the state unknown, not ok.
    seen = [j.t for j in held] + [end]
    return all(later - earlier < window_s for earlier, later in itertools.pairwise(seen))


def evaluate(
    timeline: Timeline,
    spec: SloSpec,
    extra: Mapping[str, Sequence[Judgement]] | None = None,
    judged_again: Collection[str] = (),
) -> Evaluation:
    """Every SLO, the per-layer verdicts, time to detect and time to recover for one run
    (``extra`` and ``judged_again``: see :func:`recover`)."""
    windows = phase_windows(timeline)
    recovery = recover(timeline, spec, windows, extra, judged_again)
    steady = set(spec.recovery.steady) if spec.recovery else set()
    results = tuple(evaluate_slo(timeline, slo, windows, recovery, slo.name in steady) for slo in spec.slos)
    return Evaluation(results, layer_verdicts(results), detect(timeline, spec, windows), recovery)
