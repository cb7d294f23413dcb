"""summary.md: a status marker, the reason, the SLO table, TTD/TTR and triage, no links."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from inferchaos.reports.load import load_run
from inferchaos.reports.summary import render_summary
from tests.fakes.report_runs import RUN_NAMES, edit_json, read_json


def summary(rendered: Path, name: str) -> str:
    return (rendered / name / "summary.md").read_text()


@pytest.mark.parametrize("name", RUN_NAMES)
def test_status_marker_and_reason_lead_the_summary(rendered: Path, name: str) -> None:
    verdict = read_json(rendered / name / "verdict.json")
    status_lines = [line for line in summary(rendered, name).splitlines() if line.startswith("**")]
    assert status_lines[0] == f"**{verdict['status'].upper()}**: {verdict['reason']}"


def test_failed_summary_tables_every_slo_and_flags_the_breached(rendered: Path) -> None:
    text = summary(rendered, "failed_kv_flood")
    verdict = read_json(rendered / "failed_kv_flood" / "verdict.json")
    rows = {
        line.split("|")[1].strip(): line
        for line in text.splitlines()
        if line.startswith("| ") and "---" not in line
    }
    for slo in verdict["slos"]:
        assert ("**BREACHED**" in rows[slo["name"]]) is (not slo["ok"])


def test_timing_and_triage_are_one_line_each(rendered: Path) -> None:
    text = summary(rendered, "failed_kv_flood")
    verdict = read_json(rendered / "failed_kv_flood" / "verdict.json")
    assert f"- Time to detect: {verdict['timing']['time_to_detect_s']:.1f} s" in text
    assert f"- Time to recover: {verdict['timing']['time_to_recover_s']:.1f} s" in text
    (triage,) = [line for line in text.splitlines() if line.startswith("- Triage:")]
    assert triage == f"- Triage: **vllm**: {verdict['triage']['reason']}"


def test_aborted_summary_says_what_was_not_reached(rendered: Path) -> None:
    text = summary(rendered, "aborted_pg_stall")
    assert "**ABORTED**" in text
    assert "Time to detect: not reached" in text
    assert "| not run |" in text


@pytest.mark.parametrize("name", RUN_NAMES)
def test_summary_has_no_links_and_lists_the_files(rendered: Path, name: str) -> None:
    text = summary(rendered, name)
    assert not re.search(r"\]\(|https?://|<a ", text)
    files = next(line for line in text.splitlines() if line.startswith("Files: "))
    for file in ("journal.json", "timeline.csv", "verdict.json", "report.html", "junit.xml", "summary.md"):
        assert f"`{file}`" in files


def test_a_pipe_in_a_name_cannot_break_the_table(run_copy: Callable[[str], Path]) -> None:
    run_dir = run_copy("passed_kv_flood")

    def pipe(verdict: dict[str, Any]) -> None:
        verdict["slos"][0]["name"] = "kv|p95\nsecond line"

    edit_json(run_dir / "verdict.json", pipe)
    layer = read_json(run_dir / "verdict.json")["slos"][0]["layer"]
    text = render_summary(load_run(run_dir), ["verdict.json"])
    (row,) = [line for line in text.splitlines() if line.startswith("| kv")]
    assert row.startswith(f"| kv\\|p95 second line | {layer} |")
    assert row.count(" | ") == 5
