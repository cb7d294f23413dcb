"""Invalid experiments: `inferchaos run` exits 2 with one line naming the file and the key, and injects nothing.

Each file of tests/fixtures/bad_experiments/ is experiments/kv_flood.yaml with one thing
broken. No environment exists in these tests: validation must fail before one is contacted
(a message about `inferchaos env up` means a bad file got past validation).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
CORPUS = REPO / "tests" / "fixtures" / "bad_experiments"
MISSING = "does_not_exist.yaml"

# file -> what the one error line must say after "<file>: " (the key path, or the place).
EXPECTED: dict[str, str] = {
    "yaml_syntax_error.yaml": "YAML syntax error at line 29, column ",
    "missing_method.yaml": "method: required",
    "unknown_fault.yaml": "method[0].provider.func: unknown fault 'drain_node'",
    "unknown_probe.yaml": "slos[0].probe: unknown probe 'vllm.kv_cache_usge'",
    "unknown_operator.yaml": "slos[2].op: unknown operator '=>'",
    "threshold_is_string.yaml": "slos[3].threshold: must be a number, got str '1.5'",
    "negative_duration.yaml": "method[0].pauses.after: must be a positive number of seconds, got -5",
    "empty.yaml": "the file is empty",
    "not_a_mapping.yaml": "an experiment must be a mapping of keys, got list",
    "old_module_path.yaml": "method[0].provider.module: 'faults.vllm.actions' moved: use 'inferchaos.faults.vllm.actions'",
    MISSING: "no such experiment file",
}


def test_the_corpus_is_exactly_the_expected_files() -> None:
    on_disk = {p.name for p in CORPUS.iterdir()}
    assert on_disk == set(EXPECTED) - {MISSING}


def test_the_missing_case_really_is_missing() -> None:
    assert not (CORPUS / MISSING).exists()


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_bad_experiment_exits_2_with_one_line(name: str, tmp_path: Path) -> None:
    path = CORPUS / name
    home = tmp_path / "home"
    env = {**os.environ, "INFERCHAOS_HOME": str(home), "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "inferchaos.experiments.cli", "run", str(path), "--out", str(tmp_path / "runs")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "Traceback" not in done.stdout
    assert "inferchaos env up" not in done.stderr, f"{name} got past validation: {done.stderr}"
    assert len(lines) == 1, f"expected one line on stderr, got:\n{done.stderr}"
    assert f"{path}: {EXPECTED[name]}" in lines[0], lines[0]
    ledger = home / "ledger"
    assert not ledger.exists() or not any(ledger.iterdir()), sorted(ledger.iterdir())
    assert not (tmp_path / "runs").exists(), "an invalid experiment must not leave a run folder"
