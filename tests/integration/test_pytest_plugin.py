"""Resilience gates as ordinary pytest tests, through the installed plugin.

The gate's run is strict_pg_stall's one run on the healthy platform (healthy_runs.py), so it is
judged as every healthy run is: passed, bitten, recovered, nothing left behind.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from env_checks import wait_until_whole
from healthy_runs import GATE_SCENARIO, assert_passed_and_clean

from inferchaos.environments.local.env import LocalEnvironment

pytestmark = pytest.mark.integration

pytest_plugins = ["pytester"]

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"

GATE = f"""
import pytest

@pytest.mark.chaos(layer="ray")
def test_pg_stall_gate(run_experiment):
    verdict = run_experiment({str(EXPERIMENTS / (GATE_SCENARIO + ".yaml"))!r})
    assert verdict.status == "passed", verdict.reason
"""


def test_a_gate_runs_an_experiment_and_reports_one_junit_testcase(
    local_env: LocalEnvironment, integration_home: Path, pytester: pytest.Pytester
) -> None:
    wait_until_whole(local_env)
    pytester.makepyfile(test_gates=GATE)
    junit = pytester.path / "gates.xml"
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--junitxml={junit}", timeout=600)
    result.assert_outcomes(passed=1)
    (case,) = ET.parse(junit).getroot().iter("testcase")
    properties = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert case.get("name") == "test_pg_stall_gate"
    assert properties["chaos_layer"] == "ray"
    assert properties["chaos_status"] == "passed"
    run_dir = Path(properties["chaos_run_dir"])
    verdict = json.loads((run_dir / "verdict.json").read_text())
    assert_passed_and_clean(GATE_SCENARIO, verdict, run_dir, local_env, integration_home)
    assert local_env.load_state().ready, "a gate session must not take down an environment it did not start"
