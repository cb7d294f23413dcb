"""A scenario this host cannot hold is skipped, not failed (docs/experiments.md "Game days and experiments").

Through the real CLI: a host without cgroups (INFERCHAOS_CGROUP_ROOT at an empty folder) has no
replica memory budgets, so the real gpu_memory_squat experiment's fault refuses in its plan
with errors.Unsupported. A game day runs everything else, shows the squat as skipped with the
reason, and exits with what the runs that ran say; --strict makes the skip exit 2. The local
environment, the probes and the other scenario's fault are the runner's fakes.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest

from inferchaos.cli import gameday as cli_gameday
from inferchaos.cli import main as cli
from inferchaos.cli import run_command as cli_run
from inferchaos.primitives.memory_budget import CGROUP_ROOT_ENV
from inferchaos.reports.verdict_schema import Status, Verdict
from inferchaos.run.controls import load_control
from inferchaos.run.spec import ExperimentSpec, load_and_validate
from tests.fakes.scripted_world import FakeLocalEnvironment, FakeProbeFactory, World, make_spec

REPO = Path(__file__).resolve().parents[3]
SQUAT = REPO / "experiments" / "gpu_memory_squat.yaml"
OTHER = "fake_scenario"


@pytest.fixture
def no_cgroups(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This host, seen as one without any cgroup filesystem."""
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv(CGROUP_ROOT_ENV, str(empty))
    return empty


@pytest.fixture
def fake_local(monkeypatch: pytest.MonkeyPatch, private_home: Path) -> None:
    """The CLI's local environment is up and fake; its probes read a healthy fake world."""
    monkeypatch.setattr(cli_run, "LocalEnvironment", FakeLocalEnvironment)
    monkeypatch.setattr(cli_gameday, "LocalEnvironment", FakeLocalEnvironment)
    monkeypatch.setattr(cli_run, "build_probes", FakeProbeFactory(World()))


@pytest.fixture
def suite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The game day's suite: a scenario any host can run (the fake fault), then the real squat."""
    real_load: Callable[[Path], ExperimentSpec] = load_and_validate
    other = tmp_path / f"{OTHER}.yaml"

    def load(path: Path) -> ExperimentSpec:
        return make_spec(path) if path == other else real_load(path)

    monkeypatch.setattr(cli_gameday, "suite_paths", lambda name: [other, SQUAT])
    monkeypatch.setattr(cli_gameday, "load_and_validate", load)
    return [OTHER, "gpu_memory_squat"]


def _cli(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr("sys.argv", ["inferchaos", *argv])
    with pytest.raises(SystemExit) as done:
        cli.main()
    return int(done.value.code or 0)


def _words(text: str) -> str:
    """Console text with rich's line wrapping undone."""
    return " ".join(text.split())


def _verdicts(out: Path) -> dict[str, dict[str, object]]:
    return {
        json.loads(p.read_text())["experiment"]: json.loads(p.read_text())
        for p in out.glob("**/verdict.json")
    }


def _reason(empty: Path) -> str:
    return (
        "device.squat_device_memory: host:1 is a local replica's memory budget, and budgets cannot be used "
        f"here: no cgroup memory controller under {empty}"
    )


@pytest.mark.usefixtures("fake_local")
def test_gameday_without_budgets_runs_the_rest_and_shows_the_squat_skipped(
    no_cgroups: Path,
    suite: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = tmp_path / "runs"
    assert _cli(["gameday", "--out", str(out), "--interval", "0.25"], monkeypatch) == 0
    captured = capsys.readouterr()
    printed = _words(captured.out)
    # Once where the run is, once in the day's closing lines; never again as progress on stderr.
    assert _words(captured.out + captured.err).count(_reason(no_cgroups)) == 2, captured
    assert f"skipped: {_reason(no_cgroups)}" in printed
    verdicts = _verdicts(out)
    assert {name: v["status"] for name, v in verdicts.items()} == {
        OTHER: "passed",
        "gpu_memory_squat": "skipped",
    }
    assert str(verdicts["gpu_memory_squat"]["reason"]).startswith(_reason(no_cgroups))

    (day,) = out.glob("gameday-*")
    summary = json.loads((day / "summary.json").read_text())
    assert (summary["exit_code"], summary["outcome"]) == (0, "passed")
    assert [(r["experiment"], r["status"], r["exit_code"]) for r in summary["runs"]] == [
        (OTHER, "passed", 0),
        ("gpu_memory_squat", "skipped", 0),
    ]
    suites = {s.get("name"): s for s in ET.fromstring((day / "junit.xml").read_bytes()).iter("testsuite")}
    (skipped,) = suites["gpu_memory_squat"].iter("skipped")
    assert skipped.get("message", "").startswith(_reason(no_cgroups))
    assert (
        suites["gpu_memory_squat"].get("failures") == "0" and suites["gpu_memory_squat"].get("errors") == "0"
    )
    assert not list(suites[OTHER].iter("skipped")), "the scenario that ran is judged, not skipped"
    assert "skipped" in (out / "index.html").read_text()
    (run_dir,) = day.glob("*-gpu_memory_squat")
    assert "**SKIPPED**" in (run_dir / "summary.md").read_text()


@pytest.mark.usefixtures("fake_local")
def test_gameday_strict_turns_the_skip_into_exit_2_after_running_the_rest(
    no_cgroups: Path, suite: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "runs"
    assert _cli(["gameday", "--out", str(out), "--interval", "0.25", "--strict"], monkeypatch) == 2
    assert {name: v["status"] for name, v in _verdicts(out).items()} == {
        OTHER: "passed",
        "gpu_memory_squat": "skipped",
    }
    (day,) = out.glob("gameday-*")
    summary = json.loads((day / "summary.json").read_text())
    assert [r["exit_code"] for r in summary["runs"]] == [0, 2]


@pytest.mark.usefixtures("fake_local")
@pytest.mark.parametrize(("strict", "code"), [(False, 0), (True, 2)], ids=["plain", "strict"])
def test_gameday_dry_run_lists_the_skip_and_touches_nothing(
    no_cgroups: Path,
    suite: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    strict: bool,
    code: int,
) -> None:
    out = tmp_path / "runs"
    argv = ["gameday", "--out", str(out), "--dry-run", *(["--strict"] if strict else [])]
    assert _cli(argv, monkeypatch) == code
    printed = _words(capsys.readouterr().out)
    assert f"skipped: {_reason(no_cgroups)}" in printed
    assert "dry run: 1 experiment(s) planned, 1 skipped, nothing touched" in printed
    assert not out.exists()


@pytest.mark.usefixtures("fake_local")
@pytest.mark.parametrize(("strict", "code"), [(False, 0), (True, 2)], ids=["plain", "strict"])
def test_run_of_the_squat_without_budgets_records_a_skipped_verdict(
    no_cgroups: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    strict: bool,
    code: int,
) -> None:
    out = tmp_path / "runs"
    assert (
        _cli(["run", str(SQUAT), "--out", str(out), *(["--strict"] if strict else [])], monkeypatch) == code
    )
    captured = capsys.readouterr()
    assert f"skipped: {_reason(no_cgroups)}" in _words(captured.out)
    assert _words(captured.out + captured.err).count(_reason(no_cgroups)) == 1, captured
    (path,) = out.glob("*/verdict.json")
    verdict = json.loads(path.read_text())
    assert (verdict["status"], verdict["fault"], verdict["slos"]) == ("skipped", None, [])
    junit = ET.fromstring((path.parent / "junit.xml").read_bytes())
    assert junit.get("skipped") == "1" and junit.get("failures") == "0" and junit.get("errors") == "0"
    journal = json.loads((path.parent / "journal.json").read_text())
    assert journal["extensions"][0]["status"] == "skipped" and journal["run"] == []
    assert journal["status"] == "aborted" and journal["steady_states"]["after"] is None


@pytest.mark.usefixtures("fake_local")
def test_run_dry_run_of_the_squat_prints_the_skip_and_writes_nothing(
    no_cgroups: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "runs"
    assert _cli(["run", str(SQUAT), "--out", str(out), "--dry-run"], monkeypatch) == 0
    assert f"skipped: {_reason(no_cgroups)}" in _words(capsys.readouterr().out)
    assert _cli(["run", str(SQUAT), "--out", str(out), "--dry-run", "--strict"], monkeypatch) == 2
    assert not out.exists()


def test_a_skip_exits_0_and_is_no_failure_of_the_day() -> None:
    verdict = Verdict(
        experiment="gpu_memory_squat",
        title="t",
        env="local",
        status=Status.SKIPPED,
        reason="no budgets",
        started_at=0.0,
        ended_at=0.0,
    )
    assert verdict.exit_code == 0


@pytest.mark.usefixtures("private_home")
def test_a_negative_control_of_a_skipped_scenario_is_skipped_too_not_unproven(
    no_cgroups: Path, tmp_path: Path
) -> None:
    control = load_control(REPO / "experiments" / "controls" / "gpu_memory_squat.yaml")
    environment = FakeLocalEnvironment()
    planned = cli_gameday._plan_suite([], environment, None, [control])  # type: ignore[arg-type]
    assert [(p.plan, p.skipped.startswith(_reason(no_cgroups))) for p in planned] == [(None, True)]
    out = tmp_path / "runs"
    assert cli_gameday._run_suite(planned, environment, out, 0.25, None, None) == 0  # type: ignore[arg-type]
    (verdict,) = _verdicts(out).values()
    assert (verdict["status"], verdict["control"]) == ("skipped", None)
    strict_out = tmp_path / "strict"
    assert cli_gameday._run_suite(planned, environment, strict_out, 0.25, None, None, strict=True) == 2  # type: ignore[arg-type]
