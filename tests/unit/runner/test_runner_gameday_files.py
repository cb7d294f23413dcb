"""The game day's loop writes the day's summary.json, junit.xml and openmetrics.txt into its
folder, over every run it attempted, whatever each run's outcome; the day's exit code stays the
worst run's. Each run is a recorded run folder, copied where the loop asks for it."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from inferchaos.cli import gameday as cli_gameday
from inferchaos.errors import EnvironmentError_
from inferchaos.faults.base import FaultPlan
from inferchaos.layers import Layer
from inferchaos.run.spec import ExperimentSpec, load_and_validate
from tests.fakes.report_runs import FIXTURE_RUNS
from tests.fakes.scripted_world import FakeEnv

REPO = Path(__file__).resolve().parents[3]
RECORDED = {"kv_flood": "failed_kv_flood", "strict_pg_stall": "aborted_pg_stall"}


def _planned(name: str) -> Any:
    spec = load_and_validate(REPO / "experiments" / f"{name}.yaml")
    return cli_gameday._PlannedRun(spec, FaultPlan(spec.fault.fault, Layer.VLLM, "recorded", []))


def test_the_day_folder_gets_its_files_over_every_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[Path] = []

    def recorded_run(
        spec: ExperimentSpec, *args: object, run_dir: Path, **kwargs: object
    ) -> tuple[int, None]:
        asked.append(run_dir)
        if spec.name == "node_loss":
            raise EnvironmentError_("the local environment is not up; start it with `inferchaos env up`")
        shutil.copytree(FIXTURE_RUNS / RECORDED[spec.name], run_dir)
        return (1, None)

    monkeypatch.setattr(cli_gameday, "run_one", recorded_run)
    out = tmp_path / "runs"
    planned = [_planned("kv_flood"), _planned("node_loss"), _planned("strict_pg_stall")]
    worst = cli_gameday._run_suite(planned, FakeEnv(), out, 1.0, None, None)  # type: ignore[arg-type]
    assert worst == 2
    (day,) = out.glob("gameday-*")
    assert [p.parent for p in asked] == [day] * 3
    summary = json.loads((day / "summary.json").read_text())
    assert (summary["exit_code"], summary["outcome"]) == (2, "error")
    assert [(r["experiment"], r["status"], r["exit_code"]) for r in summary["runs"]] == [
        ("kv_flood", "failed", 1),
        ("node_loss", None, 2),
        ("strict_pg_stall", "aborted", 1),
    ]
    assert summary["runs"][0]["run_dir"] == asked[0].name
    assert summary["runs"][1]["reason"].startswith("the local environment is not up")
    suites = ET.fromstring((day / "junit.xml").read_text().encode()).findall("testsuite")
    assert [s.get("name") for s in suites] == ["kv_flood", "node_loss", "strict_pg_stall"]
    assert (day / "openmetrics.txt").read_text().endswith("# EOF\n")
    assert (out / "index.html").is_file()
