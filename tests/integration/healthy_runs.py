"""Which path runs each default scenario's one healthy run, and the symptoms both paths check.

Each scenario runs once on the healthy platform: most through Chaos Toolkit's own `chaos run`
(test_chaos_run.py), one of each layer the runner acts on (vLLM, the network, a node replaced)
through `inferchaos run` (test_scenarios.py), and strict_pg_stall (Ray's) as a resilience gate
through the pytest plugin (test_pytest_plugin.py). A second healthy run of the same scenario
proves nothing the first did not, and costs CI minutes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inferchaos.environments.local.env import LocalEnvironment
from inferchaos.faults.ledger import Ledger
from inferchaos.run.suites import SUITES

RUNNER_SCENARIOS = ("kv_flood", "slow_link", "node_loss")
GATE_SCENARIO = "strict_pg_stall"
CHAOS_RUN_SCENARIOS = tuple(s for s in SUITES["default"] if s not in (*RUNNER_SCENARIOS, GATE_SCENARIO))


def check_symptoms(scenario: str, symptoms: dict[str, Any]) -> None:
    """What a user sees of the faults that cost a replica's cold start, read from the fault's
    evidence: the scenario's healthy run is the one restart these checks take."""
    if scenario == "engine_death":
        assert symptoms["health_failed_after_s"] is not None, symptoms
        assert symptoms["server_exited_after_s"] is not None, "the API server exits once its engine died"
    elif scenario == "node_loss":
        # Ray's health checks here: 3 failures at a 1 s period.
        assert symptoms["node_dead_after_s"] is not None and symptoms["node_dead_after_s"] < 10, symptoms
    elif scenario == "gpu_memory_squat":
        assert symptoms["outcome"] == "failed_fast", "the restarted replica must fail, never hang"
        assert symptoms["failure"], "the failure reason must be captured"
        assert symptoms["preflight_before_restart"] is True, symptoms


def assert_passed_and_clean(
    scenario: str, verdict: dict[str, Any], out: Path, env: LocalEnvironment, home: Path
) -> None:
    """A healthy run through the runner: passed, its fault bit and recovered, nothing left in the
    ledger, and the Ray token in none of the files it wrote under ``out``."""
    assert verdict["status"] == "passed", verdict["reason"]
    assert verdict["fault"]["effect_observed"] is True
    check_symptoms(scenario, verdict["fault"]["evidence"]["symptoms"])
    assert verdict["timing"]["time_to_recover_s"] is not None
    assert Ledger(home / "ledger").is_empty(), "nothing may be left behind after rollback"
    token = env.load_state().read_token()
    for path in out.rglob("*"):
        if path.is_file():
            assert token not in path.read_text(errors="replace"), f"the Ray token leaked into {path}"
