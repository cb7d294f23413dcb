"""A game day's own files: summary.json (every run and the day's outcome), one junit.xml with a
testsuite per run, and one openmetrics.txt with every run's series."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from inferchaos.reports.junit import junit_xml
from inferchaos.reports.load import load_run
from inferchaos.reports.render import DAY_FILES, DayRun, render_day
from tests.fakes.report_runs import copy_run, read_json

REFUSED = "the local environment is not up; start it with `inferchaos env up`"


@pytest.fixture
def day(tmp_path: Path, control_run: Path) -> tuple[Path, list[DayRun]]:
    """A game day that ran two recorded scenarios (one passed, one aborted) and a control, had one
    run refused when its turn came, and was interrupted before its last; its exit code is 2."""
    day_dir = tmp_path / "gameday-20261201-060000"
    day_dir.mkdir()
    passed = copy_run("passed_kv_flood", day_dir)
    aborted = copy_run("aborted_pg_stall", day_dir)
    control = day_dir / "scenario.control"
    shutil.copytree(control_run, control)
    runs = [
        DayRun("kv_flood", passed, 0),
        DayRun("strict_pg_stall", aborted, 1),
        # A control that failed as expected counts 0 toward the day.
        DayRun("scenario.control", control, 0),
        DayRun("node_loss", day_dir / "20261201-060500-node_loss", 2, REFUSED),
        DayRun("engine_hang", None, None),
    ]
    return day_dir, runs


def test_every_day_file_is_written(day: tuple[Path, list[DayRun]]) -> None:
    day_dir, runs = day
    written = render_day(day_dir, runs, 2)
    assert [p.name for p in written] == list(DAY_FILES) == ["summary.json", "junit.xml", "openmetrics.txt"]


def test_summary_json_holds_each_run_and_the_days_outcome(day: tuple[Path, list[DayRun]]) -> None:
    day_dir, runs = day
    render_day(day_dir, runs, 2)
    summary = json.loads((day_dir / "summary.json").read_text())
    assert summary["schema"] == 1
    assert summary["day"] == "gameday-20261201-060000"
    assert (summary["exit_code"], summary["outcome"]) == (2, "error")
    entries: list[dict[str, Any]] = summary["runs"]
    assert [e["experiment"] for e in entries] == [
        "kv_flood",
        "strict_pg_stall",
        "scenario.control",
        "node_loss",
        "engine_hang",
    ]
    passed, aborted, control, refused, not_run = entries
    recorded = read_json(day_dir / "passed_kv_flood" / "verdict.json")
    assert passed == {
        "experiment": "kv_flood",
        "env": "local",
        "status": "passed",
        "reason": recorded["reason"],
        "exit_code": 0,
        "control": None,
        "time_to_detect_s": None,
        "time_to_recover_s": recorded["timing"]["time_to_recover_s"],
        "triage_layer": "vllm",
        "run_dir": "passed_kv_flood",
        "first_alert": None,
    }
    assert (aborted["status"], aborted["exit_code"], aborted["run_dir"]) == ("aborted", 1, "aborted_pg_stall")
    assert aborted["time_to_detect_s"] is None and aborted["time_to_recover_s"] is None
    assert control["status"] == "failed" and control["exit_code"] == 0
    assert control["control"]["of"] == "scenario" and control["control"]["result"] == "failed_as_expected"
    assert control["control"]["proven"] is True and control["control"]["message"].startswith(
        "control: failed"
    )
    assert refused == {
        "experiment": "node_loss",
        "env": None,
        "status": None,
        "reason": REFUSED,
        "exit_code": 2,
        "control": None,
        "time_to_detect_s": None,
        "time_to_recover_s": None,
        "triage_layer": None,
        "run_dir": None,
        "first_alert": None,
    }
    assert not_run["status"] is None and not_run["exit_code"] is None and "not run" in not_run["reason"]


@pytest.mark.parametrize(("code", "outcome"), [(0, "passed"), (1, "failed"), (130, "interrupted")])
def test_the_outcome_names_the_days_exit_code(
    day: tuple[Path, list[DayRun]], code: int, outcome: str
) -> None:
    day_dir, runs = day
    render_day(day_dir, runs, code)
    assert json.loads((day_dir / "summary.json").read_text())["outcome"] == outcome


def test_junit_xml_has_one_testsuite_per_run_as_its_run_folder_has_it(day: tuple[Path, list[DayRun]]) -> None:
    day_dir, runs = day
    render_day(day_dir, runs, 2)
    root = ET.fromstring((day_dir / "junit.xml").read_text().encode())
    assert root.tag == "testsuites" and root.get("name") == "inferchaos gameday-20261201-060000"
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == [r.experiment for r in runs]
    # A run's suite is the very one its own junit.xml holds.
    for suite, run in zip(suites[:3], runs[:3], strict=True):
        assert run.run_dir is not None
        own = ET.fromstring(junit_xml(load_run(run.run_dir)).encode()).find("testsuite")
        assert own is not None and ET.tostring(suite).strip() == ET.tostring(own).strip()
    refused, not_run = suites[3], suites[4]
    error = refused.find("testcase/error")
    assert error is not None and error.get("message") == REFUSED and refused.get("errors") == "1"
    assert not_run.find("testcase/skipped") is not None and not_run.get("skipped") == "1"
    for key in ("tests", "failures", "errors", "skipped"):
        assert root.get(key) == str(sum(int(s.get(key) or 0) for s in suites)), key
    assert int(root.get("failures") or 0) >= 1  # the aborted run's baseline SLO did not hold


def test_openmetrics_txt_holds_every_run_with_a_verdict(day: tuple[Path, list[DayRun]]) -> None:
    day_dir, runs = day
    render_day(day_dir, runs, 2)
    text = (day_dir / "openmetrics.txt").read_text()
    assert text.endswith("# EOF\n")
    families = {f.name: f for f in text_string_to_metric_families(text)}
    status = {
        (s.labels["experiment"], s.labels["status"]): s.value
        for s in families["inferchaos_run_status"].samples
    }
    assert {e for e, _ in status} == {"kv_flood", "strict_pg_stall", "scenario.control"}
    assert [e for (e, st), v in status.items() if v == 1.0 and st != "passed"] == [
        "strict_pg_stall",
        "scenario.control",
    ]
    proven = families["inferchaos_control_proven"].samples
    assert [(s.labels["experiment"], s.labels["of"], s.value) for s in proven] == [
        ("scenario.control", "scenario", 1.0)
    ]


def test_a_run_folder_that_cannot_be_read_is_an_error_of_the_day(day: tuple[Path, list[DayRun]]) -> None:
    day_dir, runs = day
    assert runs[0].run_dir is not None
    (runs[0].run_dir / "verdict.json").write_text("{")
    render_day(day_dir, runs, 2)
    entry = json.loads((day_dir / "summary.json").read_text())["runs"][0]
    assert entry["status"] is None and "not valid JSON" in entry["reason"]
    assert entry["run_dir"] == "passed_kv_flood"
    suite = ET.fromstring((day_dir / "junit.xml").read_text().encode()).findall("testsuite")[0]
    assert suite.get("name") == "kv_flood" and suite.get("errors") == "1"
    assert "kv_flood" not in {
        s.labels["experiment"]
        for f in text_string_to_metric_families((day_dir / "openmetrics.txt").read_text())
        for s in f.samples
    }
