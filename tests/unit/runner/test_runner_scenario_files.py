"""The shipped scenarios are valid for both the Chaos Toolkit (`chaos validate`) and inferchaos."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from inferchaos.experiments.spec import load_and_validate

REPO = Path(__file__).resolve().parents[3]
CHAOS = REPO / ".venv" / "bin" / "chaos"
SCENARIOS = sorted((REPO / "experiments").glob("*.yaml"))


# The Kubernetes scenarios run on the kind environment (tests/unit/k8s/test_k8s_experiments.py).
K8S_SCENARIOS = {"anti_affinity_pending", "gpu_ledger_squat", "k8s_node_loss"}


def test_there_are_eight_scenarios() -> None:
    assert [p.stem for p in SCENARIOS] == [
        "actor_leak",
        "anti_affinity_pending",
        "gpu_ledger_squat",
        "gpu_memory_squat",
        "k8s_node_loss",
        "kv_flood",
        "node_loss",
        "strict_pg_stall",
    ]


@pytest.mark.skipif(not CHAOS.is_file(), reason="the Chaos Toolkit CLI is not installed in .venv")
@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_chaos_validate_accepts_the_scenario(path: Path, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "HOME": str(tmp_path)}
    done = subprocess.run(
        [str(CHAOS), "--no-version-check", "--no-log-file", "--settings", str(tmp_path / "settings.yaml"),
         "validate", str(path)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "experiment syntax and semantic look valid" in done.stdout + done.stderr


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_load_and_validate_accepts_the_scenario(path: Path) -> None:
    spec = load_and_validate(path)
    assert spec.name == path.stem
    assert spec.env == ("kind" if path.stem in K8S_SCENARIOS else "local")
    assert spec.fault.duration_s > 0 and spec.baseline_s > 0
    assert spec.slos.slos, "a scenario without SLOs judges nothing"
    assert spec.raw["method"][spec.fault.index]["provider"]["func"] == spec.fault.func
