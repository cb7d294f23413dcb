"""Rendering entry points: one run folder into its reports, a game day's folder into its own
files, a reports folder into its index.

Everything is rendered from the files a run stored (journal.json, timeline.csv, verdict.json),
never from live state, so an old run can be rendered again after an upgrade.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

from inferchaos.reports.gameday_files import DayRun, day_junit, day_openmetrics, read_day, summary_json
from inferchaos.reports.html import render_report
from inferchaos.reports.index import find_runs, render_index_html
from inferchaos.reports.junit import junit_xml
from inferchaos.reports.load import RUN_FILES, load_run
from inferchaos.reports.openmetrics import openmetrics_text
from inferchaos.reports.plots import render_plots
from inferchaos.reports.report_errors import ReportError
from inferchaos.reports.summary import render_summary

__all__ = ["DAY_FILES", "REPORT_FILES", "DayRun", "ReportError", "render_day", "render_index", "render_run"]

logger = logging.getLogger(__name__)

REPORT_HTML = "report.html"
JUNIT_XML = "junit.xml"
SUMMARY_MD = "summary.md"
OPENMETRICS_TXT = "openmetrics.txt"
REPORT_FILES: tuple[str, ...] = (REPORT_HTML, JUNIT_XML, SUMMARY_MD, OPENMETRICS_TXT)
INDEX_HTML = "index.html"
SUMMARY_JSON = "summary.json"
# A game day's own files, in its folder beside its run folders.
DAY_FILES: tuple[str, ...] = (SUMMARY_JSON, JUNIT_XML, OPENMETRICS_TXT)


def _write(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file, so a reader (a CI artifact upload,
    a browser) never sees half a report."""
    temporary = path.with_name(f".{path.name}.tmp")
    try:
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, path)
    except OSError as e:
        raise ReportError(f"{path}: cannot write: {e}") from e
    return path


def _folder_files(run_dir: Path) -> list[str]:
    """The files the run folder will hold once its reports are written."""
    present = {p.name for p in run_dir.iterdir() if p.is_file() and not p.name.startswith(".")}
    return sorted(present | set(RUN_FILES) | set(REPORT_FILES))


def render_run(run_dir: Path) -> list[Path]:
    """Write report.html, junit.xml, summary.md and openmetrics.txt into ``run_dir`` from its stored files.

    Raises ReportError, naming the file, when the folder lacks a file or one is malformed;
    nothing is written then.
    """
    run_dir = Path(run_dir)
    run = load_run(run_dir)
    files = _folder_files(run_dir)
    texts = {
        REPORT_HTML: render_report(run, render_plots(run), files),
        JUNIT_XML: junit_xml(run),
        SUMMARY_MD: render_summary(run, files),
        OPENMETRICS_TXT: openmetrics_text([run]),
    }
    written = [_write(run_dir / name, text) for name, text in texts.items()]
    logger.info("%s: wrote %s", run_dir, ", ".join(texts))
    return written


def render_day(day_dir: Path, runs: Sequence[DayRun], exit_code: int) -> list[Path]:
    """Write summary.json, junit.xml and openmetrics.txt of a game day into ``day_dir``.

    ``runs`` are the day's experiments in the order they ran, ``exit_code`` the day's. A run
    folder that cannot be read is reported in them (an error in junit.xml, no status in
    summary.json), not raised; ReportError only when a file cannot be written.
    """
    day_dir = Path(day_dir)
    try:
        day_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ReportError(f"{day_dir}: cannot create the game day's folder: {e}") from e
    entries = read_day(runs)
    texts = {
        SUMMARY_JSON: summary_json(day_dir, entries, exit_code),
        JUNIT_XML: day_junit(day_dir, entries),
        OPENMETRICS_TXT: day_openmetrics(entries),
    }
    written = [_write(day_dir / name, text) for name, text in texts.items()]
    logger.info("%s: wrote %s over %d run(s)", day_dir, ", ".join(texts), len(entries))
    return written


def render_index(reports_dir: Path) -> Path:
    """Write index.html into ``reports_dir`` over every run folder found beneath it."""
    reports_dir = Path(reports_dir)
    if not reports_dir.is_dir():
        raise ReportError(f"{reports_dir}: not a reports folder (no such directory)")
    runs, unreadable = find_runs(reports_dir)
    path = _write(reports_dir / INDEX_HTML, render_index_html(reports_dir, runs, unreadable))
    logger.info("%s: indexed %d run(s), %d unreadable", path, len(runs), len(unreadable))
    return path
