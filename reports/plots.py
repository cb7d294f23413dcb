"""The plots of a run over time, drawn by matplotlib into inline SVG.

Why matplotlib to SVG: the report must display with no network at view time, and a static
SVG needs no JavaScript, no external CSS or fonts (text is drawn as paths), renders the same
offline in any browser and in CI artifact viewers, and is small (tens of kB per plot).
A JS charting library would have to be inlined whole into every report. matplotlib is used
through its object-oriented ``Figure`` API with the SVG canvas: no pyplot, no GUI backend,
nothing process-wide is changed for a caller that uses matplotlib itself.

Every plot shades the fault window (injected..reverted) and marks the injection, the revert
and the recovery (reverted + time_to_recover_s) with vertical lines.
"""

from __future__ import annotations

import bisect
import io
import logging
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import matplotlib
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from inferchaos.reports.load import RunRecord
from inferchaos.steady_state.censoring import is_censored
from inferchaos.steady_state.timeline import Timeline

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

logger = logging.getLogger(__name__)

Points = list[tuple[float, float]]

AVAILABILITY_WINDOW_S = 10.0
GIB = float(1 << 30)

# svg.fonttype "path": text becomes outlines, so no font is needed where the report is viewed.
# svg.hashsalt: matplotlib derives clip-path ids from it; fixed, the same run renders the
# same bytes, which keeps reports diffable.
_RC: dict[RcKeyType, Any] = {
    "svg.fonttype": "path",
    "svg.hashsalt": "inferchaos",
    "font.size": 9,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
}

FAULT_COLOUR = "#dc2626"
REVERT_COLOUR = "#2563eb"
RECOVERED_COLOUR = "#16a34a"


@dataclass(frozen=True)
class Line:
    """One series of a plot; lines sharing a ``group`` share a colour (one replica, say)."""

    label: str
    points: Points
    group: str = ""
    dashed: bool = False
    # Marks at each point, unjoined: events (a failed request), not a quantity over time.
    dots: bool = False


@dataclass(frozen=True)
class Row:
    """A row of the report's plots, as the dashboard has them (deploy/grafana): its plots show
    the alerts whose ``layer`` label is one of ``alert_layers`` (empty: every alert)."""

    id: str
    title: str
    alert_layers: frozenset[str] = frozenset()

    def shows(self, layer: str) -> bool:
        """Whether an alert of ``layer`` is marked on this row's plots."""
        return not self.alert_layers or layer in self.alert_layers


USERS = Row("users", "Users: the canary requests")
VLLM = Row("vllm", "vLLM", frozenset({"vllm"}))
RAY = Row("ray", "Ray", frozenset({"ray"}))
NODES = Row("k8s", "Kubernetes, nodes and device", frozenset({"k8s", "network", "device"}))
ROWS: tuple[Row, ...] = (USERS, VLLM, RAY, NODES)


@dataclass(frozen=True)
class PlotSpec:
    """What one plot shows: its stable element id, its probes and how to draw their lines."""

    id: str
    title: str
    ylabel: str
    probes: tuple[str, ...]
    lines: Callable[[Timeline], list[Line]]
    ylim: tuple[float, float] | None = None
    row: Row = USERS


@dataclass(frozen=True)
class Plot:
    """A rendered plot: ``svg`` is None when none of its probes had data."""

    id: str
    title: str
    probes: tuple[str, ...]
    svg: str | None = None
    lines: tuple[str, ...] = field(default_factory=tuple)
    row: Row = USERS
    # The alerts marked on it.
    alerts: tuple[str, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class AlertSpan:
    """One stretch of readings in which the platform's Prometheus had ``name`` firing."""

    name: str
    layer: str
    start: float
    end: float


def alert_spans(timeline: Timeline) -> list[AlertSpan]:
    """The firing stretches of each alert (``alerts.firing``), by alert name, in time order: a
    stretch ends at the last read that still had it firing."""
    reads = sorted({row.t for row in timeline.select("alerts.firing_count")})
    firing: dict[tuple[str, str], set[float]] = {}
    for row in timeline.select("alerts.firing"):
        firing.setdefault((row.labels.get("alertname", "?"), row.labels.get("layer", "")), set()).add(row.t)
    spans = []
    for (name, layer), times in firing.items():
        start: float | None = None
        last = 0.0
        for t in reads or sorted(times):
            if t in times:
                start = t if start is None else start
                last = t
            elif start is not None:
                spans.append(AlertSpan(name, layer, start, last))
                start = None
        if start is not None:
            spans.append(AlertSpan(name, layer, start, last))
    return sorted(spans, key=lambda span: (span.start, span.name))


def pooled(timeline: Timeline, probe: str) -> Points:
    """Every usable reading of ``probe`` in time order, whatever its labels (the canary's view
    of the whole stack does not care which replica answered)."""
    return sorted((row.t, row.value) for row in timeline.select(probe))


def pooled_latency(timeline: Timeline, probe: str, *, censored: bool) -> Points:
    """:func:`pooled` readings of a canary latency ``probe``: only the measured ones, or only the
    failed requests censored at their timeout (steady_state/censoring.py)."""
    return sorted((row.t, row.value) for row in timeline.select(probe) if is_censored(row.labels) is censored)


def per_label(timeline: Timeline, probe: str, key: str) -> dict[str, Points]:
    """Readings of ``probe`` split by the value of label ``key`` (``replica``, ``class``, ...)."""
    grouped: dict[str, Points] = {}
    for row in timeline.select(probe):
        grouped.setdefault(row.labels.get(key, ""), []).append((row.t, row.value))
    return {name: sorted(points) for name, points in sorted(grouped.items())}


def rolling_mean(points: Points, window_s: float) -> Points:
    """At each reading, the mean of the readings in ``(t - window_s, t]``."""
    times = [t for t, _ in points]
    sums = [0.0]
    for _, value in points:
        sums.append(sums[-1] + value)
    result: Points = []
    for index, t in enumerate(times):
        first = bisect.bisect_right(times, t - window_s)
        result.append((t, (sums[index + 1] - sums[first]) / (index + 1 - first)))
    return result


def _single(probe: str, label: str) -> Callable[[Timeline], list[Line]]:
    def lines(timeline: Timeline) -> list[Line]:
        return [Line(label, pooled(timeline, probe))]

    return lines


def _by_label(probe: str, key: str, scale: float = 1.0) -> Callable[[Timeline], list[Line]]:
    def lines(timeline: Timeline) -> list[Line]:
        return [
            Line(name or probe, [(t, v / scale) for t, v in points], group=name)
            for name, points in per_label(timeline, probe, key).items()
        ]

    return lines


def _canary_latency(timeline: Timeline) -> list[Line]:
    return [
        Line("TTFT", pooled_latency(timeline, "canary.ttft_s", censored=False), group="ttft"),
        Line("end to end", pooled_latency(timeline, "canary.e2e_s", censored=False), group="e2e"),
        # The percentiles count a failed request at its timeout; joined into the TTFT line it
        # would read as an answer that took that long. Every failure has a censored e2e.
        Line(
            "failed, counted at the timeout",
            pooled_latency(timeline, "canary.e2e_s", censored=True),
            group="failed",
            dots=True,
        ),
        # A hung engine finishes no request until the timeout: this line climbs while it hangs.
        Line(
            "oldest waiting for a first token",
            pooled(timeline, "canary.oldest_wait_s"),
            group="wait",
            dashed=True,
        ),
    ]


def _availability(timeline: Timeline) -> list[Line]:
    points = pooled(timeline, "canary.success")
    return [
        Line(
            f"success, {AVAILABILITY_WINDOW_S:g} s rolling mean", rolling_mean(points, AVAILABILITY_WINDOW_S)
        )
    ]


def _requests(timeline: Timeline) -> list[Line]:
    lines: list[Line] = []
    running = per_label(timeline, "vllm.num_requests_running", "replica")
    for replica, points in per_label(timeline, "vllm.num_requests_waiting", "replica").items():
        lines.append(Line(f"{replica} waiting", points, group=replica))
    for replica, points in running.items():
        lines.append(Line(f"{replica} running", points, group=replica, dashed=True))
    return lines


PLOTS: tuple[PlotSpec, ...] = (
    PlotSpec(
        "plot-canary-latency",
        "Canary latency: TTFT, end to end, and the oldest request still waiting",
        "seconds",
        ("canary.ttft_s", "canary.e2e_s", "canary.oldest_wait_s"),
        _canary_latency,
    ),
    PlotSpec(
        "plot-availability",
        "Availability (canary success)",
        "success ratio",
        ("canary.success",),
        _availability,
        ylim=(-0.03, 1.05),
    ),
    PlotSpec(
        "plot-requests",
        "vLLM requests waiting (solid) and running (dashed), per replica",
        "requests",
        ("vllm.num_requests_waiting", "vllm.num_requests_running"),
        _requests,
        row=VLLM,
    ),
    PlotSpec(
        "plot-kv-cache",
        "vLLM KV-cache usage, per replica",
        "fraction used",
        ("vllm.kv_cache_usage",),
        _by_label("vllm.kv_cache_usage", "replica"),
        ylim=(-0.03, 1.05),
        row=VLLM,
    ),
    PlotSpec(
        "plot-preemption-rate",
        "vLLM preemption rate, per replica",
        "preemptions / s",
        ("vllm.preemption_rate",),
        _by_label("vllm.preemption_rate", "replica"),
        row=VLLM,
    ),
    PlotSpec(
        "plot-actors-alive",
        "Ray actors ALIVE, per class",
        "actors",
        ("ray.actors_alive",),
        _by_label("ray.actors_alive", "class"),
        row=RAY,
    ),
    PlotSpec(
        "plot-pending-pgs",
        "Ray placement groups pending",
        "placement groups",
        ("ray.pending_pgs",),
        _single("ray.pending_pgs", "pending"),
        row=RAY,
    ),
    PlotSpec(
        "plot-nodes-alive",
        "Ray nodes alive",
        "nodes",
        ("ray.nodes_alive",),
        _single("ray.nodes_alive", "alive"),
        row=RAY,
    ),
    PlotSpec(
        "plot-k8s-pods",
        "Kubernetes Pods Pending, per namespace",
        "Pods",
        ("k8s.pods_pending",),
        _by_label("k8s.pods_pending", "namespace"),
        row=NODES,
    ),
    PlotSpec(
        "plot-node-links",
        "TCP handshake with each worker node",
        "seconds",
        ("network.handshake_rtt_s",),
        _by_label("network.handshake_rtt_s", "node"),
        row=NODES,
    ),
    PlotSpec(
        "plot-device-free",
        "Free device memory, per device",
        "GiB free",
        ("device.free_bytes",),
        _by_label("device.free_bytes", "device", scale=GIB),
        row=NODES,
    ),
)


@dataclass(frozen=True)
class Markers:
    """Where the fault sits on the time axis, in seconds from the run's origin."""

    origin: float
    injected: float | None
    reverted: float | None
    recovered: float | None
    end: float | None


def markers(run: RunRecord) -> Markers:
    """The fault window and the injection, revert and recovery times of ``run``."""
    phases = run.phases
    origin = phases.baseline_start if phases.baseline_start is not None else run.verdict.started_at
    ttr = run.verdict.timing.time_to_recover_s
    recovered = phases.reverted + ttr if phases.reverted is not None and ttr is not None else None

    def rel(t: float | None) -> float | None:
        return None if t is None else t - origin

    return Markers(origin, rel(phases.injected), rel(phases.reverted), rel(recovered), rel(phases.end))


def with_gaps(points: Points, factor: float = 2.5) -> Points:
    """``points`` with a NaN wherever readings stop for over ``factor`` times the usual
    interval, so a replica that could not be read shows as a gap, not a straight line."""
    if len(points) < 3:
        return list(points)
    steps = sorted(b[0] - a[0] for a, b in zip(points, points[1:], strict=False))
    usual = steps[len(steps) // 2]
    result: Points = [points[0]]
    for previous, point in zip(points, points[1:], strict=False):
        if usual > 0 and point[0] - previous[0] > factor * usual:
            result.append(((previous[0] + point[0]) / 2, math.nan))
        result.append(point)
    return result


def _legend_label(text: str, limit: int = 30) -> str:
    """Long labels (Ray actor classes) shortened in the middle to fit beside the plot."""
    if len(text) <= limit:
        return text
    keep = (limit - 1) // 2
    return f"{text[:keep]}\u2026{text[-keep:]}"


def _scoped_ids(svg: str, prefix: str) -> str:
    """Prefix every id in ``svg`` and every reference to one, so that several inline SVGs
    in one page never share an id (matplotlib numbers them the same way in every figure)."""
    svg = re.sub(r'\bid="([^"]+)"', rf'id="{prefix}-\1"', svg)
    svg = re.sub(r"url\(#([^)]+)\)", rf"url(#{prefix}-\1)", svg)
    return re.sub(r'href="#([^"]+)"', rf'href="#{prefix}-\1"', svg)


def _mark_fault(axes: Axes, marks: Markers) -> None:
    """Shade the fault window and draw the injection, revert and recovery lines. Each gets a
    gid, so the SVG names them (``<plot id>-injected``) for readers and tests alike."""
    if marks.injected is not None:
        window_end = marks.reverted if marks.reverted is not None else marks.end
        if window_end is not None and window_end > marks.injected:
            axes.axvspan(
                marks.injected,
                window_end,
                color=FAULT_COLOUR,
                alpha=0.08,
                label="fault window",
                gid="fault-window",
            )
        axes.axvline(
            marks.injected,
            color=FAULT_COLOUR,
            label="injected",
            gid="injected",
            linewidth=1.2,
            linestyle="--",
        )
    if marks.reverted is not None:
        axes.axvline(
            marks.reverted,
            color=REVERT_COLOUR,
            label="reverted",
            gid="reverted",
            linewidth=1.2,
            linestyle="--",
        )
    if marks.recovered is not None:
        axes.axvline(
            marks.recovered,
            color=RECOVERED_COLOUR,
            linestyle=":",
            linewidth=1.6,
            label="recovered",
            gid="recovered",
        )


ALERT_COLOUR = "#7c3aed"


def _mark_alerts(axes: Axes, spans: Sequence[AlertSpan], origin: float) -> None:
    """Shade each stretch an alert fired and draw a line where it first fired, named (gid
    ``alert-<name>``) so the SVG says which alert it is."""
    named: set[str] = set()
    for span in spans:
        start, end = span.start - origin, span.end - origin
        axes.axvspan(start, max(end, start + 0.5), color=ALERT_COLOUR, alpha=0.07)
        if span.name not in named:
            named.add(span.name)
            axes.axvline(
                start,
                color=ALERT_COLOUR,
                linestyle="-.",
                linewidth=1.0,
                label=_legend_label(f"alert {span.name.removeprefix('Inferchaos')}"),
                gid=f"alert-{span.name}",
            )


def _draw(spec: PlotSpec, lines: Sequence[Line], marks: Markers, spans: Sequence[AlertSpan] = ()) -> str:
    with matplotlib.rc_context(_RC):
        figure = Figure(figsize=(10, 2.8))
        axes = figure.add_subplot()
        colours = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
        groups: dict[str, str] = {}
        for line in lines:
            colour = groups.setdefault(line.group or line.label, colours[len(groups) % len(colours)])
            points = line.points if line.dots else with_gaps(line.points)
            if line.dots:
                linestyle, marker = "none", "x"
            else:
                linestyle, marker = "--" if line.dashed else "-", "." if len(points) < 3 else ""
            axes.plot(
                [t - marks.origin for t, _ in points],
                [v for _, v in points],
                label=_legend_label(line.label),
                color=colour,
                linewidth=1.4,
                linestyle=linestyle,
                marker=marker,
            )
        _mark_fault(axes, marks)
        _mark_alerts(axes, spans, marks.origin)
        if spec.ylim is not None:
            axes.set_ylim(*spec.ylim)
        if marks.end is not None and marks.end > 0:
            axes.set_xlim(0, marks.end)  # every plot spans the whole run, so their times line up
        axes.set_xlabel("seconds since the baseline started")
        axes.set_ylabel(spec.ylabel)
        axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
        # Fixed margins rather than tight_layout: legends of different widths would otherwise
        # give every plot its own x scale and the fault windows would not line up down the page.
        figure.subplots_adjust(left=0.07, right=0.78, bottom=0.17, top=0.96)
        buffer = io.StringIO()
        # metadata Date None: no timestamp in the file, so re-rendering a run changes nothing.
        figure.savefig(buffer, format="svg", metadata={"Date": None})
    svg = buffer.getvalue()
    # Inline SVG in HTML takes no XML declaration or DOCTYPE: keep the <svg> element only.
    return _scoped_ids(svg[svg.index("<svg") :], spec.id)


def render_plot(spec: PlotSpec, run: RunRecord) -> Plot:
    """Draw ``spec`` for ``run``, with the alerts of its row marked; a Plot without SVG when
    none of its probes has data."""
    lines = [line for line in spec.lines(run.timeline) if line.points]
    if not lines:
        logger.info("%s: no data for %s", run.run_dir, ", ".join(spec.probes))
        return Plot(spec.id, spec.title, spec.probes, row=spec.row)
    spans = [span for span in alert_spans(run.timeline) if spec.row.shows(span.layer)]
    return Plot(
        spec.id,
        spec.title,
        spec.probes,
        _draw(spec, lines, markers(run), spans),
        tuple(ln.label for ln in lines),
        spec.row,
        tuple(dict.fromkeys(span.name for span in spans)),
    )


def render_plots(run: RunRecord, specs: Sequence[PlotSpec] = PLOTS) -> list[Plot]:
    """Every plot of the report, in the order the report shows them."""
    return [render_plot(spec, run) for spec in specs]
