"""The "who noticed, and when" section of report.html: one timeline row per layer.

Each row marks the moment each of its signals noticed the fault, counted from the injection;
a signal that never noticed within the run is written on its row as "never". The drawing is
a small hand-built SVG rather than a matplotlib figure: its words ("never", the signal names)
stay text that a reader can search and copy, and it needs no font at view time either way.
"""

from __future__ import annotations

from collections.abc import Sequence

from inferchaos.reports import formatting as fmt
from inferchaos.reports.htmlkit import Raw, join, table, tag
from inferchaos.reports.load import RunRecord
from inferchaos.steady_state.detection import SignalDetection, signal_title
from inferchaos.steady_state.slo import Phase

WIDTH = 900
LABEL_W = 120
NEVER_W = 230
ROW_H = 30
TOP = 22
NOTICED_COLOUR = "#dc2626"
AXIS_COLOUR = "#9ca3af"
REVERT_COLOUR = "#2563eb"


def _layers(detections: Sequence[SignalDetection]) -> dict[str, list[SignalDetection]]:
    rows: dict[str, list[SignalDetection]] = {}
    for d in detections:
        rows.setdefault(d.layer, []).append(d)
    return rows


def _origin(run: RunRecord, detections: Sequence[SignalDetection]) -> float | None:
    """The instant ``noticed_after_s`` counts from, as the stored entries say (else the fault's)."""
    for d in detections:
        if d.at is not None and d.noticed_after_s is not None:
            return d.at - d.noticed_after_s
    fault = run.verdict.fault
    return fault.injected_at if fault and fault.injected_at is not None else run.phases.injected


def _span(run: RunRecord, detections: Sequence[SignalDetection], origin: float | None) -> float:
    """Seconds the axis covers: to the run's end, and at least to the last notice."""
    ends = [d.noticed_after_s for d in detections if d.noticed_after_s is not None]
    if origin is not None and run.phases.end is not None:
        ends.append(run.phases.end - origin)
    return max([1.0, *ends])


def _text(x: float, y: float, content: str, **attrs: object) -> Raw:
    return tag("text", content, x=f"{x:.1f}", y=f"{y:.1f}", **attrs)


def timeline_svg(run: RunRecord, detections: Sequence[SignalDetection]) -> Raw:
    """One row per layer; a dot and a label where a signal noticed, "never" at the row's end otherwise."""
    layers = _layers(detections)
    origin = _origin(run, detections)
    span = _span(run, detections, origin)
    plot_w = WIDTH - LABEL_W - NEVER_W

    def x_of(seconds: float) -> float:
        return LABEL_W + plot_w * max(0.0, seconds) / span

    height = TOP + ROW_H * len(layers) + 24
    parts: list[object] = []
    reverted = run.phases.reverted
    if origin is not None and reverted is not None:
        x = x_of(reverted - origin)
        parts.append(
            tag(
                "line",
                "",
                x1=f"{x:.1f}",
                x2=f"{x:.1f}",
                y1=TOP - 8,
                y2=height - 22,
                stroke=REVERT_COLOUR,
                stroke_dasharray="4 3",
            )
        )
        parts.append(_text(x + 3, TOP - 10, "reverted", fill=REVERT_COLOUR))
    parts.append(
        tag(
            "line",
            "",
            x1=LABEL_W,
            x2=LABEL_W,
            y1=TOP - 8,
            y2=height - 22,
            stroke=NOTICED_COLOUR,
            stroke_dasharray="4 3",
        )
    )
    parts.append(_text(LABEL_W + 3, TOP - 10, "injected", fill=NOTICED_COLOUR))
    for index, (layer, signals) in enumerate(layers.items()):
        y = TOP + ROW_H * index + ROW_H / 2
        row: list[object] = [
            _text(4, y + 4, layer, font_weight="600"),
            tag(
                "line", "", x1=LABEL_W, x2=LABEL_W + plot_w, y1=f"{y:.1f}", y2=f"{y:.1f}", stroke=AXIS_COLOUR
            ),
        ]
        never = [d for d in signals if d.noticed_after_s is None]
        for d in signals:
            if d.noticed_after_s is None:
                continue
            x = x_of(d.noticed_after_s)
            title = f"{signal_title(d.signal)} noticed after {d.noticed_after_s:.2f} s: {d.detail}"
            row.append(
                tag("circle", tag("title", title), cx=f"{x:.1f}", cy=f"{y:.1f}", r=5, fill=NOTICED_COLOUR)
            )
            row.append(_text(x + 7, y - 5, f"{signal_title(d.signal)} {d.noticed_after_s:.1f} s"))
        if never:
            words = (
                "never" if len(signals) == 1 else "; ".join(f"{signal_title(d.signal)} never" for d in never)
            )
            row.append(_text(LABEL_W + plot_w + 8, y + 4, words, cls="never", fill="#6b7280"))
        parts.append(tag("g", join(row), cls="detection-row", data_layer=layer))
    axis_y = height - 8
    parts.append(_text(LABEL_W, axis_y, "0 s", fill="#6b7280"))
    parts.append(_text(LABEL_W + plot_w - 40, axis_y, f"{span:.0f} s", fill="#6b7280"))
    return tag(
        "svg",
        join(parts),
        xmlns="http://www.w3.org/2000/svg",
        width=WIDTH,
        height=height,
        viewBox=f"0 0 {WIDTH} {height}",
        font_size="12",
        font_family="system-ui, sans-serif",
        id="detection-timeline",
        role="img",
    )


def _when(d: SignalDetection) -> str:
    return "never" if d.noticed_after_s is None else f"{d.noticed_after_s:.2f} s"


def _saw(d: SignalDetection) -> str:
    """What a signal saw; an alert's lead over the first failed user request too."""
    saw = d.detail or "-"
    if d.lead_s is None:
        return saw
    return (
        f"{saw}; {abs(d.lead_s):.1f} s {'before' if d.lead_s >= 0 else 'after'} the first failed user request"
    )


def detection_section(run: RunRecord) -> Raw:
    """The report's ``detection`` section; a line saying why it is empty for older or un-injected runs."""
    detections = run.verdict.detection
    if not detections:
        why = (
            "This run's verdict records no detection (written before inferchaos recorded it)."
            if run.phases.ran(Phase.DURING)
            else "Nothing was injected, so nothing could notice."
        )
        body: object = tag("p", why, cls="muted")
    else:
        rows = [(d.layer, signal_title(d.signal), _when(d), fmt.epoch(d.at), _saw(d)) for d in detections]
        body = join(
            [
                tag(
                    "p",
                    "Counted from the injection. Red dots: when each signal first noticed; "
                    "a signal that never noticed within the run says so on its row.",
                    cls="muted",
                ),
                tag("figure", timeline_svg(run, detections), cls="plot"),
                table(
                    ["layer", "signal", "noticed after", "at", "what it saw"],
                    rows,
                    numeric=(2,),
                    times=(3,),
                    id="detection-table",
                ),
            ]
        )
    return tag("section", join([tag("h2", "Who noticed, and when"), body]), id="detection")
