"""Nothing is injected into a system that is not steady, and a fault that never bit never passes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inferchaos.errors import EnvironmentError_
from inferchaos.faults.ledger import Ledger
from inferchaos.reports.verdict_schema import Status
from inferchaos.run.runner import RunOptions, run_experiment
from tests.fakes.scripted_world import (
    DEFAULT_SLOS,
    HEALTHY,
    FakeEnv,
    FaultScript,
    RunResult,
    World,
    make_spec,
    run_fake_experiment,
)

pytestmark = pytest.mark.long_running


def test_baseline_not_met_fails_without_injecting(baseline_failed_run: RunResult) -> None:
    """A platform not steady before the fault fails the run (exit 1): nothing is injected, and
    the game day must not pass over it as a run that never began."""
    verdict = baseline_failed_run.verdict
    assert verdict.status is Status.FAILED and verdict.exit_code == 1
    assert verdict.reason.startswith("the platform was not steady before the fault: kv_headroom_before:"), (
        verdict.reason
    )
    names = baseline_failed_run.world.names()
    assert "inject" not in names and "revert" not in names, names
    assert verdict.fault is None
    ledger = baseline_failed_run.ledger
    assert not ledger.folder.exists() or not any(ledger.folder.iterdir()), list(ledger.folder.iterdir())
    assert names == ["canary.start", "canary.stop"]


def test_baseline_not_met_journal_is_failed_not_completed(baseline_failed_run: RunResult) -> None:
    journal = json.loads(baseline_failed_run.read("journal.json"))
    # chaoslib's word for a steady state not met before the method.
    assert journal["status"] == "failed"
    assert journal["steady_states"]["before"]["steady_state_met"] is False
    assert journal["run"] == [] and journal["rollbacks"] == []
    timeline = baseline_failed_run.read("timeline.csv")
    assert "phase.baseline_start" in timeline and "phase.end" in timeline
    assert "phase.injected" not in timeline


def test_fault_that_did_not_bite_fails(no_bite_run: RunResult) -> None:
    verdict = no_bite_run.verdict
    assert verdict.status is Status.FAILED
    assert verdict.reason == "fault had no observable effect: no request reached replica-0"
    assert verdict.fault is not None and verdict.fault.effect_observed is False
    names = no_bite_run.world.names()
    assert names.count("revert") == 1 and no_bite_run.ledger.entries() == [], names


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (FakeEnv(up=False), "environment is not up"),
        (FakeEnv(front_door_healthy=False), "does not serve"),
    ],
    ids=["env-down", "front-door-down"],
)
def test_environment_not_serving_is_refused_before_anything_is_touched(
    tmp_path: Path, private_home: Path, env: FakeEnv, message: str
) -> None:
    spec = make_spec(tmp_path / "refused.yaml")
    run_dir = tmp_path / "run"
    with pytest.raises(EnvironmentError_, match=message) as raised:
        run_experiment(spec, env, RunOptions(interval_s=0.25, run_dir=run_dir))
    assert raised.value.exit_code == 2
    assert Ledger().entries() == []
    assert not run_dir.exists(), "a refused run must not leave a run folder"
    assert env.ray_connects == 0


def test_dry_run_plans_and_touches_nothing(
    tmp_path: Path, private_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = make_spec(tmp_path / "dry.yaml")
    run_dir = tmp_path / "run"
    env = FakeEnv()
    assert run_experiment(spec, env, RunOptions(dry_run=True, run_dir=run_dir)) is None
    out = capsys.readouterr().out
    assert "would touch:" in out and "  - nothing real" in out
    assert "availability: mean(canary.success) >= 0.9 [during]" in out
    assert Ledger().entries() == [] and not run_dir.exists() and env.ray_connects == 0


SURVIVOR = {
    "name": "survivor_ttft",
    "probe": "canary.ttft_s",
    "labels": {"replica": "replica-1"},
    "agg": "p95",
    "op": "<=",
    "threshold": {"times_baseline": 3, "at_least": 0.5},
    "phase": "during",
}


def test_a_baseline_with_nothing_to_scale_an_slo_from_samples_on_for_one_more_baseline(
    tmp_path: Path, private_home: Path
) -> None:
    # The fake canary never names replica-1: the baseline goes on for one more baseline's length
    # (the front door may send a whole baseline to one replica), then the SLO fails closed.
    spec = make_spec(tmp_path / "unscaled.yaml", baseline_s=1.0, slos=[*DEFAULT_SLOS, SURVIVOR])
    result = run_fake_experiment(spec, tmp_path / "run")
    assert any(
        "nothing yet to scale survivor_ttft from; sampling up to 1 s more" in line for line in result.progress
    ), result.progress
    phases = result.verdict.phases
    assert phases["injected"] - phases["baseline_start"] >= 2.0
    (survivor,) = [s for s in result.verdict.slos if s.name == "survivor_ttft"]
    assert not survivor.ok and survivor.baseline is None
    assert result.verdict.timing.detected_by != "survivor_ttft"


def test_a_baseline_with_something_to_scale_every_slo_from_does_not_wait(passed_run: RunResult) -> None:
    assert not any("nothing yet to scale" in line for line in passed_run.progress), passed_run.progress


def test_a_bite_spoiled_by_another_replica_breaking_fails_naming_that_replica(
    tmp_path: Path, private_home: Path
) -> None:
    """The fault's bite asks that the other replicas stay healthy; replica-0, which the scenario
    does not allow out, stopped answering meanwhile. The run fails on that failure, naming the
    replica and its layer, not on a fault that did not bite."""
    spec = make_spec(tmp_path / "scenario.yaml")
    world = World(baseline={**HEALTHY, "vllm.healthy": 1.0}, during={"vllm.healthy": 0.0})
    script = FaultScript(bites=False, reason="the other replicas did not stay healthy")
    verdict = run_fake_experiment(spec, tmp_path / "run", world=world, script=script).verdict
    assert verdict.status is Status.FAILED
    assert verdict.reason.startswith("the platform failed beside the fault"), verdict.reason
    assert "not injected by the scenario: replica-0" in verdict.reason, verdict.reason
    assert verdict.triage is not None and verdict.triage.layer == "vllm", verdict.triage
