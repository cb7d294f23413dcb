"""Reading a run folder: strict about the stored format, and every error names the file."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from inferchaos.errors import InferchaosError
from inferchaos.reports.load import load_run
from inferchaos.reports.render import ReportError, render_run
from inferchaos.reports.verdict_schema import Status
from inferchaos.steady_state.slo import Phase
from tests.fakes.report_runs import RUN_NAMES, edit_json


@pytest.mark.parametrize("name", RUN_NAMES)
def test_every_recorded_run_folder_loads(name: str, run_copy: Callable[[str], Path]) -> None:
    run = load_run(run_copy(name))
    assert run.verdict.experiment
    assert run.timeline.rows
    assert run.phases.ran(Phase.BASELINE)


def test_report_error_is_an_invalid_input_error() -> None:
    assert issubclass(ReportError, InferchaosError)
    assert ReportError.exit_code == 2


@pytest.mark.parametrize("missing", ["journal.json", "timeline.csv", "verdict.json"])
def test_a_missing_file_is_named_and_nothing_is_written(
    missing: str, run_copy: Callable[[str], Path]
) -> None:
    run_dir = run_copy("passed_kv_flood")
    (run_dir / missing).unlink()
    with pytest.raises(ReportError, match=missing):
        render_run(run_dir)
    assert not (run_dir / "report.html").exists()
    assert not (run_dir / "junit.xml").exists()


def test_a_folder_that_does_not_exist_is_a_report_error(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="no such directory"):
        render_run(tmp_path / "nope")


def test_invalid_json_names_the_file(run_copy: Callable[[str], Path]) -> None:
    run_dir = run_copy("passed_kv_flood")
    (run_dir / "journal.json").write_text('{"chaoslib-version": ')
    with pytest.raises(ReportError, match=r"journal\.json: not valid JSON") as caught:
        load_run(run_dir)
    assert caught.value.__cause__ is not None


def _drop(key: str) -> Callable[[dict[str, Any]], None]:
    return lambda data: data.pop(key)


@pytest.mark.parametrize(
    ("file", "change", "where"),
    [
        ("verdict.json", _drop("status"), "status: missing"),
        ("verdict.json", lambda v: v.update(status="green"), "status: unknown value 'green'"),
        (
            "verdict.json",
            lambda v: v["slos"][0].update(observed="2.3"),
            r"slos\[0\]\.observed: expected a number",
        ),
        ("verdict.json", lambda v: v["slos"][1].update(op="=>"), r"slos\[1\]\.op: unknown value"),
        ("verdict.json", lambda v: v["slos"][0].update(ok=1), r"slos\[0\]\.ok: expected true or false"),
        ("verdict.json", lambda v: v["timing"].update(time_to_detect_s=True), "timing.time_to_detect_s"),
        ("verdict.json", lambda v: v["fault"].pop("injected_at"), "fault.injected_at: missing"),
        ("verdict.json", lambda v: v.update(schema=99), "schema: version 99"),
        ("verdict.json", lambda v: v.update(slos={}), "slos: expected a list"),
        ("journal.json", _drop("rollbacks"), "rollbacks: missing"),
        ("journal.json", lambda j: j["run"][0].pop("duration"), r"run\[0\]\.duration: missing"),
        ("journal.json", lambda j: j["steady_states"].pop("during"), "steady_states.during: missing"),
        (
            "journal.json",
            lambda j: j["rollbacks"][0].update(start=None),
            r"rollbacks\[0\]\.start: expected a string",
        ),
        ("journal.json", lambda j: j.update(deviated="no"), "deviated: expected true or false"),
    ],
)
def test_a_malformed_json_file_names_the_file_and_the_key(
    file: str, change: Callable[[dict[str, Any]], None], where: str, run_copy: Callable[[str], Path]
) -> None:
    run_dir = run_copy("failed_kv_flood")
    edit_json(run_dir / file, change)
    with pytest.raises(ReportError, match=rf"{file}: {where}"):
        load_run(run_dir)


def test_a_timeline_with_the_wrong_header_names_the_file(run_copy: Callable[[str], Path]) -> None:
    run_dir = run_copy("passed_kv_flood")
    path = run_dir / "timeline.csv"
    path.write_text(
        path.read_text().replace("t,probe,labels,value,error", "time,probe,labels,value,error", 1)
    )
    with pytest.raises(ReportError, match=r"timeline\.csv: not a timeline"):
        load_run(run_dir)


def test_a_malformed_timeline_row_names_the_file_and_line(run_copy: Callable[[str], Path]) -> None:
    run_dir = run_copy("passed_kv_flood")
    path = run_dir / "timeline.csv"
    lines = path.read_text().splitlines()
    lines[5] = "not-a-time,canary.ttft_s,,0.05,"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ReportError, match=r"timeline\.csv:6: malformed timeline row"):
        load_run(run_dir)


def test_optional_verdict_keys_beyond_the_design_minimum_may_be_absent(
    run_copy: Callable[[str], Path],
) -> None:
    run_dir = run_copy("failed_kv_flood")

    def minimal(verdict: dict[str, Any]) -> None:
        for slo in verdict["slos"]:
            slo.pop("samples")
            slo.pop("reason")
        for key in ("recovered", "recovery_within_s", "detected_by"):
            verdict["timing"].pop(key)

    edit_json(run_dir / "verdict.json", minimal)
    run = load_run(run_dir)
    assert run.verdict.status is Status.FAILED
    assert all(s.samples is None and s.reason == "" for s in run.verdict.slos)
    assert run.verdict.timing.recovery_within_s is None


def test_phase_marks_come_from_the_timeline(run_copy: Callable[[str], Path]) -> None:
    run = load_run(run_copy("aborted_pg_stall"))
    assert run.phases.ran(Phase.BASELINE)
    assert not run.phases.ran(Phase.DURING)
    assert not run.phases.ran(Phase.RECOVERY)
    run = load_run(run_copy("probe_error_node_loss"))
    assert run.phases.injected == run.timeline.marks["injected"]
    assert run.phases.reverted == run.timeline.marks["reverted"]
