"""report.html: one self-contained page that tells a person what one run found.

Sections carry stable element ids (``verdict``, ``layers``, ``slos``, ``timing``, ``detection``,
``triage``, ``fault``, ``plots``, ``plot-*``, ``errors``, ``journal``, ``files``) for tests and for links.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TypeGuard

from inferchaos.reports import formatting as fmt
from inferchaos.reports.detection_section import detection_section
from inferchaos.reports.htmlkit import STATUS_COLOURS, Raw, definitions, join, page, state, table, tag
from inferchaos.reports.load import ActivityRecord, RunRecord, probe_errors
from inferchaos.reports.plots import ROWS, Plot
from inferchaos.steady_state.slo import Phase


def _banner(run: RunRecord) -> Raw:
    v = run.verdict
    return tag(
        "header",
        join(
            [
                tag("p", join([tag("span", v.status.value, cls="status"), f"  {v.experiment} on {v.env}"])),
                tag("h1", v.title),
                tag("p", v.reason, cls="reason"),
                tag(
                    "p",
                    f"{fmt.control_line(v.control)} (broken on purpose: {v.control.breaks})",
                    cls="control",
                )
                if v.control
                else "",
                tag("p", f"duration {v.duration_s:.1f} s, started {fmt.epoch(v.started_at)}"),
            ]
        ),
        id="verdict",
        cls=f"banner status-{v.status.value}",
        style=f"background: {STATUS_COLOURS[v.status]}",
    )


def _layers(run: RunRecord) -> Raw:
    rows = []
    for layer, verdict in fmt.layer_states(run).items():
        names = [s.name for s in run.verdict.slos if s.layer == layer]
        rows.append((layer, state(verdict.value), ", ".join(names) or "-"))
    return _section("layers", "Verdict per layer", table(["layer", "verdict", "SLOs"], rows))


def _slos(run: RunRecord) -> Raw:
    parts: list[object] = []
    for phase in Phase:
        slos = [s for s in run.verdict.slos if s.phase is phase]
        if not slos:
            continue
        rows = [
            (
                s.name,
                s.layer,
                fmt.observed_in(run, s),
                fmt.threshold(s),
                state(fmt.slo_state(run, s).value),
                "-" if s.samples is None else s.samples,
                s.reason,
            )
            for s in slos
        ]
        parts.append(tag("h3", f"{phase.value} phase"))
        parts.append(
            table(
                ["SLO", "layer", "observed", "threshold", "result", "samples", "note"],
                rows,
                numeric=(2, 5),
                id=f"slos-{phase.value}",
            )
        )
    if not parts:
        parts.append(tag("p", "This run declared no SLO.", cls="muted"))
    censored = fmt.censored_summary(run)
    if censored is not None:
        # Beside the tables whose latency percentiles count these requests.
        parts.insert(0, tag("p", join([tag("strong", "Censored TTFT: "), censored]), id="censored"))
    return _section("slos", "SLOs", join(parts))


def _timing(run: RunRecord) -> Raw:
    pairs = [
        ("time to detect", fmt.detection_summary(run)),
        ("time to recover", fmt.recovery_summary(run)),
    ]
    return _section("timing", "Detection and recovery", definitions(pairs))


def _is_number(value: object) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _evidence_rows(evidence: Mapping[str, object]) -> list[tuple[str, object]]:
    return [(str(key), fmt.value_text(value)) for key, value in evidence.items()]


def _triage(run: RunRecord) -> Raw:
    triage = run.verdict.triage
    if triage.layer is None:
        return _section(
            "triage", "Triage", tag("p", "Nothing was breached, so there was nothing to triage.", cls="muted")
        )
    pairs: list[tuple[str, object]] = [("layer", tag("strong", triage.layer)), ("reason", triage.reason)]
    evidence = dict(triage.evidence)
    also = evidence.pop("also", None)
    # steady_state.triage puts the reading's time in "t" and the examined span in "window",
    # both in epoch seconds: shown as times, not as 1.76787e+09.
    t, window = evidence.pop("t", None), evidence.pop("window", None)
    pairs += _evidence_rows(evidence)
    if _is_number(t):
        pairs.append(("reading at", fmt.epoch(t)))
    if isinstance(window, list) and len(window) == 2 and all(_is_number(w) for w in window):
        pairs.append(("window examined", f"{fmt.epoch(window[0])} to {fmt.epoch(window[1])}"))
    if isinstance(also, list) and also:
        pairs.append(("also matched", tag("ul", join(tag("li", item) for item in also))))
    return _section("triage", "Triage", definitions(pairs))


def _timestamps(stamps: Mapping[str, object], injected: float | None) -> Raw:
    rows = []
    for name, t in sorted(stamps.items(), key=lambda item: (0, item[1]) if _is_number(item[1]) else (1, 0)):
        if _is_number(t):
            offset = "-" if injected is None else f"{t - injected:+.2f} s"
            rows.append((name, fmt.epoch(t), offset))
        else:
            rows.append((name, fmt.value_text(t), "-"))
    return table(["event", "time", "from injection"], rows, numeric=(2,), times=(1,), id="fault-timestamps")


def _effect(run: RunRecord) -> Raw:
    fault = run.verdict.fault
    if fault is None or not run.phases.ran(Phase.DURING):
        return state("not run")
    return state("ok") if fault.effect_observed else tag("span", "no effect", cls="state state-breached")


def _fault(run: RunRecord) -> Raw:
    fault = run.verdict.fault
    if fault is None:
        return _section("fault", "Fault", tag("p", "No fault was set up in this run.", cls="muted"))
    evidence = dict(fault.evidence)
    reason = evidence.pop("reason", None)
    symptoms = evidence.pop("symptoms", None)
    stamps = evidence.pop("timestamps", None)
    evidence.pop("bit", None)  # the same fact as effect_observed, shown once
    pairs: list[tuple[str, object]] = [
        ("fault", f"{fault.name} ({fault.layer})"),
        ("parameters", fmt.value_text(dict(fault.params)) if fault.params else "-"),
        ("injected", fmt.epoch(fault.injected_at)),
        ("reverted", fmt.epoch(fault.reverted_at)),
        ("effect observed", _effect(run)),
        ("evidence", reason if reason is not None else "-"),
    ]
    parts: list[object] = [definitions(pairs, id="fault-summary")]
    if isinstance(symptoms, Mapping) and symptoms:
        parts += [tag("h3", "Symptoms"), definitions(_evidence_rows(symptoms), id="fault-symptoms")]
    if isinstance(stamps, Mapping) and stamps:
        parts += [tag("h3", "Ground-truth timestamps"), _timestamps(stamps, fault.injected_at)]
    if evidence:
        parts += [tag("h3", "Other evidence"), definitions(_evidence_rows(evidence))]
    return _section("fault", "Fault and its evidence", join(parts))


def _extras(run: RunRecord) -> Raw:
    parts: list[object] = []
    for key, title, value in (
        ("stop-condition", "Stop condition", run.verdict.stop_condition),
        ("load", "Load", run.verdict.load),
    ):
        if value:
            parts.append(_section(key, title, definitions(_evidence_rows(value))))
    return join(parts)


def _plot(plot: Plot) -> Raw:
    if plot.svg is None:
        body = tag("p", f"no data: no samples of {', '.join(plot.probes)} in this run", cls="nodata")
    else:
        body = Raw(plot.svg)
    return tag(
        "figure",
        join([tag("figcaption", plot.title), body]),
        id=plot.id,
        cls="plot",
        data_probes=" ".join(plot.probes),
        data_has_data="yes" if plot.svg else "no",
    )


def _plots(plots: Sequence[Plot]) -> Raw:
    legend = tag(
        "p",
        "Shaded: the fault window (injected to reverted). Vertical lines: injected (red dashed), "
        "reverted (blue dashed), recovered (green dotted, reverted + time to recover). In purple: "
        "the platform's alerts of each row's layers, from when each first fired (dash-dot), shaded "
        "while it fired.",
        cls="muted",
    )
    rows = []
    for row in ROWS:
        mine = [p for p in plots if p.row == row]
        if mine:
            heading = tag("h3", row.title)
            rows.append(
                tag("div", join([heading, *(_plot(p) for p in mine)]), id=f"row-{row.id}", cls="plot-row")
            )
    return _section("plots", "Over time", join([legend, *rows]))


def _errors(run: RunRecord) -> Raw:
    errors = probe_errors(run.timeline)
    if not errors:
        return _section("errors", "Probe errors", tag("p", "No probe read failed.", cls="muted"))
    rows = [(e.probe, e.count, fmt.epoch(e.first_t), fmt.epoch(e.last_t), e.last_error) for e in errors]
    body = table(
        ["probe", "failed reads", "first", "last", "last error"],
        rows,
        numeric=(1,),
        times=(2, 3),
        id="errors-table",
    )
    return _section("errors", "Probe errors", body)


def _activities(activities: Iterable[ActivityRecord], table_id: str) -> Raw:
    rows = [(a.name, a.kind, a.provider or "-", a.status, a.start, f"{a.duration:.2f} s") for a in activities]
    if not rows:
        return tag("p", "none", cls="muted")
    return table(
        ["activity", "type", "provider", "status", "start", "duration"], rows, numeric=(5,), id=table_id
    )


def _hypothesis(met: bool | None) -> str:
    return "not checked" if met is None else ("met" if met else "NOT met")


def _journal(run: RunRecord) -> Raw:
    j = run.journal
    pairs = [
        ("Chaos Toolkit status", j.status),
        ("deviated", "yes" if j.deviated else "no"),
        ("steady state before", _hypothesis(j.steady_state_before)),
        ("steady state after", _hypothesis(j.steady_state_after)),
        ("chaoslib", j.chaoslib_version),
        ("node", j.node),
        ("platform", j.platform),
        ("start / end", f"{j.start} / {j.end}"),
    ]
    body = join(
        [
            definitions(pairs),
            tag("h3", "Method"),
            _activities(j.activities, "journal-run"),
            tag("h3", "Rollbacks"),
            _activities(j.rollbacks, "journal-rollbacks"),
        ]
    )
    return _section("journal", "Journal", body)


def _files(names: Sequence[str]) -> Raw:
    return _section("files", "Files of this run", tag("ul", join(tag("li", tag("code", n)) for n in names)))


def _section(section_id: str, title: str, body: object) -> Raw:
    return tag("section", join([tag("h2", title), body]), id=section_id)


def render_report(run: RunRecord, plots: Sequence[Plot], files: Sequence[str]) -> str:
    """The complete report.html of ``run`` with its rendered ``plots``; ``files`` lists the run folder."""
    v = run.verdict
    body = join(
        [
            _banner(run),
            _layers(run),
            _slos(run),
            _timing(run),
            detection_section(run),
            _triage(run),
            _fault(run),
            _extras(run),
            _plots(plots),
            _errors(run),
            _journal(run),
            _files(files),
            tag(
                "footer",
                f"inferchaos report of {run.run_dir.name}, verdict.json schema {v.schema}",
                cls="muted",
            ),
        ]
    )
    return page(f"{v.status.value.upper()}: {v.title} ({v.experiment}, {v.env})", body)
