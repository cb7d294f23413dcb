"""Triage names the fault's layer even when its symptom surfaces late and no SLO breaks."""

from __future__ import annotations

from pathlib import Path

import pytest

import inferchaos.run.runner as runner_module
from inferchaos.reports.verdict_schema import Status
from tests.fakes.scripted_world import FaultScript, World, make_spec, run_fake_experiment


def test_without_a_breach_triage_looks_over_the_whole_fault_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INFERCHAOS_HOME", str(tmp_path / "home"))
    # Scaled down: the symptom appears 0.8 s into the fault, after the usual look-ahead.
    monkeypatch.setattr(runner_module, "TRIAGE_LOOKAHEAD_S", 0.2)
    result = run_fake_experiment(
        make_spec(tmp_path / "late.yaml", during_s=1.5),
        tmp_path / "run",
        world=World(during={"vllm.kv_cache_usage": 0.95}),
        script=FaultScript(inject_takes_s=0.8, reason="the KV cache filled late"),
    )
    verdict = result.verdict
    assert verdict.status is Status.PASSED, verdict.reason
    assert verdict.timing.time_to_detect_s is None  # nothing breached
    assert verdict.triage.layer == "vllm", verdict.triage
    assert verdict.triage.evidence["probe"] == "vllm.kv_cache_usage"
