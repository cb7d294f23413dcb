"""A game day's own files, written into its folder beside the run folders: summary.json,
junit.xml (one ``<testsuite>`` per run) and openmetrics.txt (every run's series).

The CLI runs the day and alone knows what each run counted toward the day's exit code (a
negative control counts 0 when it failed as expected, a run refused when its turn came counts
its error's code), so it hands each run over as a :class:`DayRun`. Everything else is read back
from each run folder's stored files, as every report is.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from inferchaos.reports.junit import Case, Outcome, run_suite, testsuites, unjudged_suite, xml_text
from inferchaos.reports.load import RunRecord, load_run
from inferchaos.reports.openmetrics import openmetrics_text
from inferchaos.reports.report_errors import ReportError
from inferchaos.steady_state.detection import AlertCoverage, alert_coverage

logger = logging.getLogger(__name__)

# summary.json's own version, for a reader to check before it trusts the keys.
SUMMARY_SCHEMA = 1
# The words of a day's exit code (docs/experiments.md "Game days and experiments").
DAY_OUTCOMES: dict[int, str] = {0: "passed", 1: "failed", 2: "error", 130: "interrupted"}
NOT_RUN = "not run: the game day was interrupted before it"


@dataclass(frozen=True)
class DayRun:
    """One experiment of a game day, as the CLI ran it."""

    experiment: str
    # Its run folder; None when it never started (the day was interrupted first).
    run_dir: Path | None
    # What it counted toward the day's exit code; None when it never started.
    exit_code: int | None
    # Why it left no verdict: the one line the CLI printed when it was refused.
    error: str = ""


@dataclass(frozen=True)
class DayEntry:
    """A :class:`DayRun` with its run folder read back, or why there is nothing to read."""

    run: DayRun
    record: RunRecord | None
    problem: str = ""


@dataclass(frozen=True)
class ControlSummary:
    """summary.json ``runs[].control``: a negative control's outcome."""

    of: str
    result: str
    proven: bool
    message: str


@dataclass(frozen=True)
class RunSummary:
    """One entry of summary.json ``runs``; ``status`` None when the run left no verdict."""

    experiment: str
    env: str | None
    status: str | None
    reason: str
    exit_code: int | None
    control: ControlSummary | None
    time_to_detect_s: float | None
    time_to_recover_s: float | None
    triage_layer: str | None
    # Relative to the day's folder.
    run_dir: str | None
    # The platform's alerting: its first alert after the injection (``alert`` None: none
    # fired); None where the run read no alerts (no --prometheus).
    first_alert: AlertCoverage | None = None


@dataclass(frozen=True)
class DaySummary:
    """summary.json: the day's outcome and every run of it, in the order they ran."""

    schema: int
    day: str
    exit_code: int
    outcome: str
    runs: list[RunSummary]


def read_day(runs: Sequence[DayRun]) -> list[DayEntry]:
    """Each run of the day with its run folder read; an unreadable one is kept with the reason,
    so one damaged run folder cannot hide the rest of the day."""
    entries = []
    for run in runs:
        if run.exit_code is None or run.run_dir is None:
            entries.append(DayEntry(run, None, NOT_RUN))
            continue
        if run.error and not run.run_dir.is_dir():
            # Refused before its run folder existed: the CLI's line is the whole story.
            entries.append(DayEntry(run, None, run.error))
            continue
        try:
            entries.append(DayEntry(run, load_run(run.run_dir)))
        except ReportError as e:
            problem = run.error or f"no verdict to read: {e}"
            logger.warning("game day: %s left no readable run folder: %s", run.experiment, e)
            entries.append(DayEntry(run, None, problem))
    return entries


def _folder(day_dir: Path, run_dir: Path | None) -> str | None:
    """Where a run's folder is, relative to the day's folder; None when it has none."""
    if run_dir is None or not run_dir.is_dir():
        return None
    return run_dir.relative_to(day_dir).as_posix() if run_dir.is_relative_to(day_dir) else str(run_dir)


def _run_summary(day_dir: Path, entry: DayEntry) -> RunSummary:
    run = entry.run
    if entry.record is None:
        return RunSummary(
            run.experiment,
            None,
            None,
            entry.problem,
            run.exit_code,
            None,
            None,
            None,
            None,
            _folder(day_dir, run.run_dir),
        )
    v = entry.record.verdict
    control = (
        ControlSummary(v.control.of, v.control.result, v.control.proven, v.control.message)
        if v.control
        else None
    )
    return RunSummary(
        experiment=v.experiment,
        env=v.env,
        status=v.status.value,
        reason=v.reason,
        exit_code=run.exit_code,
        control=control,
        time_to_detect_s=v.timing.time_to_detect_s,
        time_to_recover_s=v.timing.time_to_recover_s,
        triage_layer=v.triage.layer,
        run_dir=_folder(day_dir, run.run_dir),
        first_alert=alert_coverage(v.detection),
    )


def summary_json(day_dir: Path, entries: Sequence[DayEntry], exit_code: int) -> str:
    """summary.json of the day in ``day_dir`` that exited with ``exit_code``."""
    summary = DaySummary(
        schema=SUMMARY_SCHEMA,
        day=day_dir.name,
        exit_code=exit_code,
        outcome=DAY_OUTCOMES.get(exit_code, "error"),
        runs=[_run_summary(day_dir, entry) for entry in entries],
    )
    return json.dumps(asdict(summary), indent=2) + "\n"


def day_junit(day_dir: Path, entries: Sequence[DayEntry]) -> str:
    """junit.xml of the day: each run's own ``<testsuite>`` (as in its run folder), in order."""
    suites = []
    for entry in entries:
        if entry.record is not None:
            suites.append(run_suite(entry.record))
            continue
        outcome, kind = (Outcome.SKIPPED, "") if entry.run.exit_code is None else (Outcome.ERROR, "RunError")
        # A run that left no verdict is an error of the day, never a silent gap in CI.
        suites.append(
            unjudged_suite(entry.run.experiment, Case("inferchaos.run", "run", outcome, entry.problem, kind))
        )
    return xml_text(testsuites(f"inferchaos {day_dir.name}", suites))


def day_openmetrics(entries: Sequence[DayEntry]) -> str:
    """openmetrics.txt of the day: every run's series in one exposition."""
    return openmetrics_text([entry.record for entry in entries if entry.record is not None])
