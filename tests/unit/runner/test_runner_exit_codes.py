"""Exit codes (docs/experiments.md "Game days and experiments"): 0 passed (or skipped); 1 failed or aborted; 2 invalid input or environment error; 130 interrupted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import inferchaos.cli.run_command as cli_run
from inferchaos.reports.verdict_schema import EXIT_INTERRUPTED, Status, Verdict
from inferchaos.run.spec import load_and_validate
from tests.fakes.scripted_world import FakeEnv, RunResult

pytestmark = pytest.mark.long_running

REPO = Path(__file__).resolve().parents[3]
KV_FLOOD = REPO / "experiments" / "kv_flood.yaml"


@pytest.mark.parametrize(
    ("scenario", "status", "code"),
    [
        ("passed_run", Status.PASSED, 0),
        ("slo_failed_run", Status.FAILED, 1),
        ("no_bite_run", Status.FAILED, 1),
        ("baseline_failed_run", Status.FAILED, 1),
        ("stopped_run", Status.ABORTED, 1),
        ("inject_error_run", Status.ERROR, 2),
    ],
)
def test_verdict_exit_code_of_each_outcome(
    request: pytest.FixtureRequest, scenario: str, status: Status, code: int
) -> None:
    result: RunResult = request.getfixturevalue(scenario)
    assert result.verdict.status is status, result.verdict.reason
    assert result.verdict.exit_code == code


def _verdict(status: Status, reason: str) -> Verdict:
    return Verdict(
        experiment="kv_flood",
        title="t",
        env="local",
        status=status,
        reason=reason,
        started_at=0.0,
        ended_at=1.0,
    )


@pytest.mark.parametrize(
    ("status", "code"),
    [(Status.PASSED, 0), (Status.FAILED, 1), (Status.ABORTED, 1), (Status.ERROR, 2), (Status.SKIPPED, 0)],
)
def test_exit_code_table(status: Status, code: int) -> None:
    assert _verdict(status, "").exit_code == code


def test_cli_maps_an_interrupted_run_to_130(
    interrupted_run: RunResult, tmp_path: Path, private_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CLI's run path turns the verdict of a real interrupted run into exit 130."""
    monkeypatch.setattr(
        cli_run,
        "run_experiment",
        lambda spec, env, options, progress=None, probe_factory=None: interrupted_run.verdict,
    )
    assert EXIT_INTERRUPTED == 130
    code, _ = cli_run.run_one(load_and_validate(KV_FLOOD), FakeEnv(), tmp_path / "runs", 1.0, False)  # type: ignore[arg-type]
    assert code == 130


@pytest.mark.parametrize(
    ("scenario", "code"),
    [("passed_run", 0), ("baseline_failed_run", 1), ("stopped_run", 1), ("inject_error_run", 2)],
)
def test_cli_maps_verdicts_to_their_exit_code(
    request: pytest.FixtureRequest,
    scenario: str,
    code: int,
    tmp_path: Path,
    private_home: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    result: RunResult = request.getfixturevalue(scenario)
    monkeypatch.setattr(
        cli_run,
        "run_experiment",
        lambda spec, env, options, progress=None, probe_factory=None: result.verdict,
    )
    assert cli_run.run_one(load_and_validate(KV_FLOOD), FakeEnv(), tmp_path / "runs", 1.0, False)[0] == code  # type: ignore[arg-type]


def _inferchaos(*args: str, home: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "INFERCHAOS_HOME": str(home), "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "inferchaos.cli.main", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_exits_2_on_an_invalid_experiment(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("title: [unclosed\n")
    done = _inferchaos("run", str(bad), "--out", str(tmp_path / "runs"), home=tmp_path / "home", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("inferchaos: invalid input: "), done.stderr
    assert str(bad) in done.stderr


def test_cli_exits_2_when_no_environment_is_up(tmp_path: Path) -> None:
    """A valid experiment against no environment: exit 2, one line, nothing injected."""
    home = tmp_path / "home"
    done = _inferchaos("run", str(KV_FLOOD), "--out", str(tmp_path / "runs"), home=home, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "inferchaos env up" in lines[0], done.stderr
    assert "Traceback" not in done.stderr
    assert not (home / "ledger").exists()
    assert not (tmp_path / "runs").exists()
