"""Resilience gates as ordinary pytest tests, through the installed plugin."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from inferchaos.environments.local.env import LocalEnvironment

pytestmark = pytest.mark.integration

pytest_plugins = ["pytester"]

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"

GATE = f"""
import pytest

@pytest.mark.chaos(layer="ray")
def test_pg_stall_gate(run_experiment):
    verdict = run_experiment({str(EXPERIMENTS / "strict_pg_stall.yaml")!r})
    assert verdict.status == "passed", verdict.reason
"""


def test_a_gate_runs_an_experiment_and_reports_one_junit_testcase(
    local_env: LocalEnvironment, integration_home: Path, pytester: pytest.Pytester
) -> None:
    pytester.makepyfile(test_gates=GATE)
    junit = pytester.path / "gates.xml"
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--junitxml={junit}", timeout=600)
    result.assert_outcomes(passed=1)
    (case,) = ET.parse(junit).getroot().iter("testcase")
    properties = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert case.get("name") == "test_pg_stall_gate"
    assert properties["chaos_layer"] == "ray"
    assert properties["chaos_status"] == "passed"
    assert Path(properties["chaos_run_dir"], "verdict.json").is_file()
    assert local_env.load_state().ready, "a gate session must not take down an environment it did not start"
