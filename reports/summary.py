"""summary.md: a short Markdown verdict for CI logs and PR comments.

Plain text markers (``**FAILED**``), no emoji and no links: it must read the same in a raw log
as rendered in a PR comment, and a link to a CI artifact would be dead anywhere else.
"""

from __future__ import annotations

from collections.abc import Sequence

from inferchaos.reports import formatting as fmt
from inferchaos.reports.load import RunRecord
from inferchaos.reports.verdict_schema import Status
from inferchaos.steady_state.detection import alert_coverage


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell: no pipe or line break can end the cell."""
    return " ".join(text.replace("\\", "\\\\").replace("|", "\\|").split())


def _line(text: str) -> str:
    return " ".join(text.split())


def _slo_table(run: RunRecord) -> list[str]:
    if run.verdict.status is Status.SKIPPED:
        return ["Skipped: this host cannot hold the scenario, so nothing was injected or judged."]
    if not run.verdict.slos:
        return ["No SLO declared."]
    lines = ["| SLO | layer | phase | observed | threshold | result |", "|---|---|---|---:|---|---|"]
    for slo in run.verdict.slos:
        state = fmt.slo_state(run, slo)
        result = (
            f"**{state.value.upper()}**"
            if state in (fmt.SloState.BREACHED, fmt.SloState.NO_DATA)
            else state.value
        )
        cells = [slo.name, slo.layer, slo.phase.value, fmt.observed_in(run, slo), fmt.threshold(slo)]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + f" | {result} |")
    return lines


def _censored(run: RunRecord) -> list[str]:
    """The line on failed requests counted in TTFT at the timeout, if the run had a canary."""
    text = fmt.censored_summary(run)
    return [] if text is None else [f"- Censored TTFT: {_line(text)}"]


def _alerts(run: RunRecord) -> list[str]:
    """The line on the platform's own alerting, where the run read its alerts."""
    coverage = alert_coverage(run.verdict.detection)
    return [] if coverage is None else [f"- First alert: {_line(coverage.text())}"]


def _triage(run: RunRecord) -> str:
    triage = run.verdict.triage
    if triage.layer is None:
        return "Triage: nothing breached to triage."
    return f"Triage: **{_line(triage.layer)}**: {_line(triage.reason)}"


def render_summary(run: RunRecord, files: Sequence[str]) -> str:
    """The summary.md text of ``run``; ``files`` names the files of its run folder."""
    v = run.verdict
    lines = [
        f"### inferchaos: {_line(v.title)} (`{v.experiment}` on `{v.env}`)",
        "",
        f"**{v.status.value.upper()}**: {_line(v.reason)}",
        "",
        *(
            [f"**{fmt.control_line(v.control)}** (broken on purpose: {_line(v.control.breaks)})", ""]
            if v.control
            else []
        ),
        *_slo_table(run),
        "",
        *_censored(run),
        f"- Time to detect: {fmt.detection_summary(run)}",
        *_alerts(run),
        f"- Time to recover: {fmt.recovery_summary(run)}",
        f"- {_triage(run)}",
        f"- Duration: {v.duration_s:.1f} s, started {fmt.epoch(v.started_at)}",
        "",
        "Files: " + ", ".join(f"`{name}`" for name in files),
        "",
    ]
    return "\n".join(lines)
