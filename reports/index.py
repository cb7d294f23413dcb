"""index.html: the game-day view over every run folder under a reports folder.

It shows the latest verdict per scenario (experiment), the pass/fail history of each scenario
with its time-to-recover trend as an inline SVG sparkline, and every run, newest first. A run
folder whose verdict.json cannot be read is listed as unreadable rather than hiding the rest
of the game day.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from inferchaos.reports import formatting as fmt
from inferchaos.reports.htmlkit import STATUS_COLOURS, Raw, esc, join, page, state, table, tag
from inferchaos.reports.load import VERDICT, load_verdict
from inferchaos.reports.report_errors import ReportError
from inferchaos.reports.verdict_schema import Status, Verdict
from inferchaos.steady_state.detection import alert_coverage

logger = logging.getLogger(__name__)

REPORT_HTML = "report.html"


@dataclass(frozen=True)
class IndexedRun:
    """One readable run folder; ``folder`` is its path relative to the reports folder."""

    folder: str
    verdict: Verdict
    has_report: bool


@dataclass(frozen=True)
class UnreadableRun:
    """A run folder whose verdict.json is missing parts or malformed."""

    folder: str
    error: str


def find_runs(reports_dir: Path) -> tuple[list[IndexedRun], list[UnreadableRun]]:
    """Every folder under ``reports_dir`` (recursively) holding a verdict.json; readable runs
    newest first."""
    runs: list[IndexedRun] = []
    unreadable: list[UnreadableRun] = []
    for path in sorted(reports_dir.rglob(VERDICT)):
        folder = path.parent.relative_to(reports_dir).as_posix()
        try:
            verdict = load_verdict(path)
        except ReportError as e:
            logger.warning("index: skipping unreadable run %s: %s", folder, e)
            unreadable.append(UnreadableRun(folder, str(e)))
            continue
        runs.append(IndexedRun(folder, verdict, (path.parent / REPORT_HTML).is_file()))
    runs.sort(key=lambda r: (r.verdict.started_at, r.folder), reverse=True)
    return runs, unreadable


def latest_per_scenario(runs: Sequence[IndexedRun]) -> dict[str, IndexedRun]:
    """The newest run of each experiment, by experiment name (``runs`` newest first)."""
    latest: dict[str, IndexedRun] = {}
    for run in runs:
        latest.setdefault(run.verdict.experiment, run)
    return dict(sorted(latest.items()))


def sparkline(values: Sequence[float | None], width: int = 140, height: int = 28) -> Raw:
    """An inline SVG line of ``values`` (oldest first); None (no recovery measured) leaves a gap
    in the line, marked by a red tick at the bottom."""
    pad = 4.0
    present = [v for v in values if v is not None]
    if not present:
        return tag("span", "no time to recover measured yet", cls="muted")
    low, high = min(present), max(present)
    span = high - low
    step = (width - 2 * pad) / max(len(values) - 1, 1)

    def x(i: int) -> float:
        return pad + i * step if len(values) > 1 else width / 2

    def y(v: float) -> float:
        if not span:
            return height / 2  # every value the same: a flat line through the middle
        return height - pad - (v - low) / span * (height - 2 * pad)

    shapes: list[str] = []
    segment: list[str] = []
    segments: list[list[str]] = []
    for i, value in enumerate(values):
        if value is None:
            shapes.append(
                f'<line x1="{x(i):.1f}" y1="{height - 1}" x2="{x(i):.1f}" y2="{height - 5}" '
                'stroke="#b91c1c" stroke-width="2"/>'
            )
            segments.append(segment)
            segment = []
            continue
        segment.append(f"{x(i):.1f},{y(value):.1f}")
        shapes.append(f'<circle cx="{x(i):.1f}" cy="{y(value):.1f}" r="2" fill="#1d4ed8"/>')
    segments.append(segment)
    lines = [
        f'<polyline points="{" ".join(s)}" fill="none" stroke="#1d4ed8" stroke-width="1.5"/>'
        for s in segments
        if len(s) > 1
    ]
    words = ", ".join("-" if v is None else f"{v:.1f}" for v in values)
    title = f"time to recover, oldest to newest (s): {words}"
    return Raw(
        f'<svg class="spark" role="img" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'xmlns="http://www.w3.org/2000/svg"><title>{esc(title)}</title>{"".join(lines)}{"".join(shapes)}</svg>'
        f' <span class="muted">{esc(f"{present[-1]:.1f} s latest, {low:.1f}-{high:.1f} s")}</span>'
    )


def _link(run: IndexedRun) -> Raw:
    if run.has_report:
        return tag("a", run.folder, href=f"{run.folder}/{REPORT_HTML}")
    return tag("code", run.folder)


def _first_alert(run: IndexedRun) -> str:
    coverage = alert_coverage(run.verdict.detection)
    return "alerts not read" if coverage is None else coverage.text()


def _latest(latest: dict[str, IndexedRun]) -> Raw:
    rows = [
        (
            name,
            state(run.verdict.status.value),
            run.verdict.title,
            run.verdict.env,
            fmt.epoch(run.verdict.started_at, ms=False),
            fmt.seconds(run.verdict.timing.time_to_recover_s),
            _first_alert(run),
            fmt.control_line(run.verdict.control) if run.verdict.control else run.verdict.reason,
            _link(run),
        )
        for name, run in latest.items()
    ]
    return table(
        ["scenario", "status", "title", "env", "started", "TTR", "first alert", "reason", "run"],
        rows,
        numeric=(5,),
        times=(4,),
        id="latest-table",
    )


def _cells(runs: Sequence[IndexedRun]) -> Raw:
    cells = [
        tag(
            "span",
            r.verdict.status.value[0].upper(),
            style=f"background: {STATUS_COLOURS[r.verdict.status]}",
            title=f"{r.verdict.status.value} {fmt.epoch(r.verdict.started_at)} {r.folder}",
        )
        for r in runs
    ]
    return tag("div", join(cells), cls="cells")


def _history(runs: Sequence[IndexedRun], scenarios: Sequence[str]) -> Raw:
    rows = []
    for name in scenarios:
        mine = [r for r in runs if r.verdict.experiment == name]
        passed = sum(r.verdict.status is Status.PASSED for r in mine)
        # A skip is no run of the scenario: counted apart, never as a run that did not pass.
        skipped = sum(r.verdict.status is Status.SKIPPED for r in mine)
        ttrs = [r.verdict.timing.time_to_recover_s for r in reversed(mine)]
        counted = f"{passed} of {len(mine) - skipped}" + (f" ({skipped} skipped)" if skipped else "")
        rows.append((name, _cells(mine), counted, sparkline(ttrs)))
    return table(
        ["scenario", "runs, newest first", "passed", "time to recover trend (oldest to newest)"],
        rows,
        id="history-table",
    )


def _all_runs(runs: Sequence[IndexedRun]) -> Raw:
    rows = [
        (
            fmt.day(r.verdict.started_at),
            fmt.epoch(r.verdict.started_at, ms=False),
            r.verdict.experiment,
            r.verdict.env,
            state(r.verdict.status.value),
            fmt.seconds(r.verdict.timing.time_to_detect_s),
            fmt.seconds(r.verdict.timing.time_to_recover_s),
            r.verdict.triage.layer or "-",
            r.verdict.reason,
            _link(r),
        )
        for r in runs
    ]
    return table(
        ["game day", "started", "scenario", "env", "status", "TTD", "TTR", "triage", "reason", "run"],
        rows,
        numeric=(5, 6),
        times=(0, 1),
        id="runs-table",
    )


def render_index_html(
    reports_dir: Path, runs: Sequence[IndexedRun], unreadable: Sequence[UnreadableRun]
) -> str:
    """index.html over ``runs`` (newest first) and the ``unreadable`` run folders."""
    latest = latest_per_scenario(runs)
    parts: list[object] = [tag("h1", f"inferchaos game days: {reports_dir.name or reports_dir}")]
    if not runs:
        parts.append(tag("p", "No run folder (a folder holding verdict.json) was found here.", cls="muted"))
    else:
        parts += [
            tag(
                "p",
                f"{len(runs)} run(s) of {len(latest)} scenario(s), from {fmt.epoch(runs[-1].verdict.started_at)} "
                f"to {fmt.epoch(runs[0].verdict.started_at)}.",
                cls="muted",
            ),
            tag("section", join([tag("h2", "Latest verdict per scenario"), _latest(latest)]), id="latest"),
            tag(
                "section",
                join([tag("h2", "History per scenario"), _history(runs, list(latest))]),
                id="history",
            ),
            tag("section", join([tag("h2", "Every run, newest first"), _all_runs(runs)]), id="runs"),
        ]
    if unreadable:
        rows = [(u.folder, u.error) for u in unreadable]
        body = join([tag("h2", "Unreadable run folders"), table(["run", "problem"], rows)])
        parts.append(tag("section", body, id="unreadable"))
    return page("inferchaos game days", join(parts))
