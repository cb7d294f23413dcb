"""`locust -f inferchaos/load/locustfile.py --chaos ...`: a chaos run started and interrupted by Locust.

The chaos command is pointed (``--chaos-command``) at a fake child that records when it
started, its arguments, and when it got SIGINT.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.locust_runs import CHAOS_AT_S, CHAOS_RUN_TIME_S, LOCUSTFILE, REPO, Runs


@pytest.fixture(scope="module")
def record(runs: Runs) -> dict[str, Any]:
    assert runs.chaos.proc.returncode == 0, runs.chaos.output
    assert runs.chaos_record.exists(), f"the chaos child never started\n{runs.chaos.output}"
    return json.loads(runs.chaos_record.read_text())


def test_chaos_run_starts_at_the_requested_second(runs: Runs, record: dict[str, Any]) -> None:
    test_started = runs.chaos.log_time(r"chaos: fake starts in")
    # Log stamps have millisecond resolution; the child needs a moment to start Python.
    assert CHAOS_AT_S - 0.01 <= record["started_at"] - test_started < CHAOS_AT_S + 2.0


def test_chaos_run_is_the_runner_command_on_the_experiment(runs: Runs, record: dict[str, Any]) -> None:
    assert record["argv"] == [
        "run",
        str(runs.chaos_experiment.resolve()),
        "--out",
        str(runs.chaos_out.resolve()),
    ]


def test_chaos_run_gets_sigint_when_the_test_stops(runs: Runs, record: dict[str, Any]) -> None:
    assert record["sigint_at"] is not None, runs.chaos.output
    test_started = runs.chaos.log_time(r"chaos: fake starts in")
    assert record["sigint_at"] >= test_started + CHAOS_RUN_TIME_S - 0.5
    assert record["sigint_at"] <= runs.chaos.log_time(r"Shutting down")


def test_chaos_run_has_its_own_process_group(record: dict[str, Any], runs: Runs) -> None:
    # A Ctrl-C in the terminal then reaches Locust alone, which hands the run one SIGINT.
    assert record["pgid"] != runs.chaos.proc.pid


def test_chaos_run_works_in_locusts_directory_not_the_packages(runs: Runs, record: dict[str, Any]) -> None:
    # Its state (.inferchaos/) is that of the directory Locust was started in; the package's
    # folder (site-packages once installed) holds no environment.
    assert record["cwd"] == str(runs.chaos.csv_prefix.parent)
    assert record["cwd"] != str(REPO)


def test_where_the_verdict_is_is_printed(runs: Runs) -> None:
    verdicts = list(runs.chaos_out.glob("*/verdict.json"))
    assert len(verdicts) == 1
    assert f"chaos: fake ABORTED (exit 130); verdict: {verdicts[0]}" in runs.chaos.output


def test_unknown_scenario_is_refused_before_any_load(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "locust",
            "-f",
            str(LOCUSTFILE),
            "--headless",
            "--host",
            "http://127.0.0.1:9",
            "-t",
            "5s",
            "--chaos",
            "no_such_scenario",
            "--chaos-out",
            str(tmp_path),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ},
    )
    assert result.returncode == 2
    assert "no_such_scenario" in result.stderr and "kv_flood" in result.stderr
    assert "Shape test starting" not in result.stderr
    assert not list(tmp_path.iterdir())
