"""action.yml: inferchaos as a CI gate. It validates and plans before it injects, uploads the
run folders whatever the verdict, and fails the job by inferchaos' exit code.

The run step's script runs here for real, against the real CLI, on input that inferchaos
refuses before it touches any environment.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
ACTION = yaml.safe_load((ROOT / "action.yml").read_text())
SCRIPT = ROOT / ".github" / "actions" / "run-inferchaos.sh"
BAD = ROOT / "tests" / "fixtures" / "bad_experiments"
INFERCHAOS = Path(sys.executable).with_name("inferchaos")


def _steps() -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = ACTION["runs"]["steps"]
    return steps


def _run_script(tmp_path: Path, **inputs: str) -> tuple[int, str, str]:
    """The run step as the action runs it; returns the script's exit code, the exit-code output
    it wrote, and what it printed."""
    output = tmp_path / "github_output"
    env = {
        **os.environ,
        "INFERCHAOS_HOME": str(tmp_path / "home"),
        "INFERCHAOS_BIN": str(INFERCHAOS),
        "INFERCHAOS_OUT": str(tmp_path / "runs"),
        "GITHUB_OUTPUT": str(output),
        **inputs,
    }
    done = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=120)
    return done.returncode, output.read_text().strip(), done.stdout + done.stderr


def test_the_action_is_composite_and_fails_the_job_last_by_the_exit_code() -> None:
    assert ACTION["runs"]["using"] == "composite"
    steps = _steps()
    names = [step.get("id") or step.get("uses") or step.get("name") for step in steps]
    upload = next(
        i for i, s in enumerate(steps) if str(s.get("uses", "")).startswith("actions/upload-artifact")
    )
    run = names.index("run")
    assert run < upload == len(steps) - 2
    assert steps[upload]["if"] == "always()" and "${{ inputs.out }}/" in steps[upload]["with"]["path"]
    last = steps[-1]
    assert last["if"] == "always()" and last["env"]["EXIT_CODE"] == "${{ steps.run.outputs.exit-code }}"
    assert last["run"].startswith('exit "${EXIT_CODE')
    assert ACTION["outputs"]["exit-code"]["value"] == "${{ steps.run.outputs.exit-code }}"


def test_every_run_input_reaches_the_script() -> None:
    run = next(step for step in _steps() if step.get("id") == "run")
    for name in ("env", "config", "suite", "experiments", "controls", "dry-run-first", "args", "out"):
        variable = "INFERCHAOS_" + name.upper().replace("-", "_")
        assert run["env"][variable] == f"${{{{ inputs.{name} }}}}", name
        assert variable in SCRIPT.read_text(), variable
    assert set(ACTION["inputs"]) - {"install", "python-version", "artifact-name"} == {
        "env",
        "config",
        "suite",
        "experiments",
        "controls",
        "dry-run-first",
        "args",
        "out",
    }


def test_a_bad_experiment_in_the_list_stops_the_gate_with_2_before_any_run(tmp_path: Path) -> None:
    good = ROOT / "experiments" / "kv_flood.yaml"
    code, output, printed = _run_script(
        tmp_path, INFERCHAOS_EXPERIMENTS=f"{BAD / 'unknown_fault.yaml'}\n\n{good}\n"
    )
    assert code == 0 and output == "exit-code=2", printed
    assert "unknown_fault.yaml" in printed
    # Nothing ran: no run folder, not even for the valid experiment after it.
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_a_game_day_over_a_folder_with_a_bad_file_is_refused_with_2(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "bad.yaml").write_text((BAD / "unknown_operator.yaml").read_text())
    code, output, printed = _run_script(tmp_path, INFERCHAOS_SUITE=str(suite))
    assert code == 0 and output == "exit-code=2", printed
    assert printed.count("bad.yaml") >= 1


def test_the_kind_workflow_runs_its_game_day_through_the_action() -> None:
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "kind-gameday.yml").read_text())
    steps = workflow["jobs"]["gameday"]["steps"]
    gate = next(step for step in steps if step.get("uses") == "./")
    assert gate["with"]["env"] == "kind" and gate["with"]["suite"] == "k8s"
    assert gate["with"]["config"] == "environments/kind/kind.yaml"
    # The action's upload and the workflow's own must not share an artifact name.
    uploads = [
        s["with"]["name"] for s in steps if str(s.get("uses", "")).startswith("actions/upload-artifact")
    ]
    assert gate["with"]["artifact-name"] not in uploads
