"""`inferchaos run NAME`: a packaged experiment or control by name, from any directory; a path wins."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from inferchaos.errors import ConfigError
from inferchaos.run import packaged
from inferchaos.run.packaged import EXPERIMENTS_DIR, packaged_experiments, resolve_experiment
from inferchaos.run.suites import SUITES

REPO = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class Cli:
    returncode: int
    stdout: str
    stderr: str

    @property
    def lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


def _inferchaos(cwd: Path, *args: str) -> Cli:
    """The real CLI in ``cwd`` (an empty folder: nothing there to find by accident), no environment up."""
    env = {**os.environ, "INFERCHAOS_HOME": str(cwd / "home"), "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "inferchaos.cli.main", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return Cli(done.returncode, done.stdout, done.stderr)


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty current directory, outside the repository."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    monkeypatch.chdir(folder)
    return folder


def test_the_packaged_experiments_are_beside_the_installed_module() -> None:
    # The experiments' own package, beside the code's: inferchaos/experiments in a wheel.
    assert EXPERIMENTS_DIR == (Path(packaged.__file__).resolve().parents[1] / "experiments").resolve()
    assert (EXPERIMENTS_DIR / "kv_flood.yaml").is_file()


def test_a_bare_name_is_the_packaged_experiment(elsewhere: Path) -> None:
    assert resolve_experiment(Path("kv_flood")) == EXPERIMENTS_DIR / "kv_flood.yaml"


def test_controls_slash_name_is_the_packaged_control(elsewhere: Path) -> None:
    assert resolve_experiment(Path("controls/kv_flood")) == EXPERIMENTS_DIR / "controls" / "kv_flood.yaml"


def test_every_suite_scenario_and_its_control_has_a_name() -> None:
    names = packaged_experiments()
    for scenario in {s for suite in SUITES.values() for s in suite}:
        assert names[scenario] == EXPERIMENTS_DIR / f"{scenario}.yaml"
        assert names[f"controls/{scenario}"] == EXPERIMENTS_DIR / "controls" / f"{scenario}.yaml"


@pytest.mark.parametrize("kind", ["file", "folder"])
def test_a_path_wins_over_a_name(elsewhere: Path, kind: str) -> None:
    if kind == "file":
        shutil.copy(EXPERIMENTS_DIR / "strict_pg_stall.yaml", elsewhere / "kv_flood")
    else:
        (elsewhere / "kv_flood").mkdir()
    assert resolve_experiment(Path("kv_flood")) == Path("kv_flood")


def test_a_missing_yaml_file_is_a_path_not_a_name(elsewhere: Path) -> None:
    # kv_flood.yaml here does not exist: the user meant a file, and is told that one is missing.
    assert resolve_experiment(Path("kv_flood.yaml")) == Path("kv_flood.yaml")


def test_an_unknown_name_lists_the_packaged_names(elsewhere: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve_experiment(Path("kv_flod"))
    message = str(caught.value)
    assert message.startswith("kv_flod: no such experiment file")
    assert "\n" not in message
    for name in packaged_experiments():
        if "/" not in name:
            assert name in message
    assert "controls/<name>" in message


def test_the_cli_runs_a_packaged_name_from_an_empty_folder(tmp_path: Path) -> None:
    # Resolved and validated: what stops it is the missing environment, not the file.
    for name in ("kv_flood", "controls/kv_flood"):
        result = _inferchaos(tmp_path, "run", name, "--dry-run", "--out", str(tmp_path / "runs"))
        assert result.returncode == 2, result.stderr
        assert result.lines == [result.lines[0]] and "no local environment is recorded" in result.lines[0]
        assert not (tmp_path / "runs").exists()


def test_the_cli_refuses_an_unknown_name_in_one_line_naming_the_packaged_ones(tmp_path: Path) -> None:
    result = _inferchaos(tmp_path, "run", "kv_flod", "--out", str(tmp_path / "runs"))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert len(result.lines) == 1, result.stderr
    line = result.lines[0]
    assert line.startswith("inferchaos: invalid input: kv_flod: no such experiment file")
    assert "kv_flood" in line and "controls/<name>" in line
