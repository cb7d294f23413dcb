"""`inferchaos run --fail-fast` (and `gameday --fail-fast`): a run that has already failed ends without its recovery phase.

What a CI gate relies on: the verdict is the same failure, named by the SLO that failed
before the revert; the fault and a control's sabotage are still reverted and the ledger ends
empty; the recovery SLOs read "not judged" rather than as failures of their own, and no
recovery is claimed. A run whose fault window held still has its recovery judged in full.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inferchaos.cli import gameday as cli_gameday
from inferchaos.cli import main as cli
from inferchaos.cli import run_command as cli_run
from inferchaos.faults.ledger import Ledger
from inferchaos.layers import Layer
from inferchaos.reports.verdict_schema import Status
from inferchaos.run.controls import ControlResult, ControlSpec, SabotageAt, SabotageStep
from tests.fakes.scripted_world import (
    FAKE_SABOTAGE,
    HEALTHY,
    FakeFault,
    FakeLocalEnvironment,
    FakeProbeFactory,
    FaultScript,
    World,
    make_spec,
    run_fake_experiment,
)

pytestmark = pytest.mark.long_running

# The fault fails half the canary's requests while it is in place: availability fails during.
FAILING = {"canary.success": 0.5}


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERCHAOS_HOME", str(tmp_path / "home"))


def test_a_run_failed_in_its_fault_window_ends_without_judging_recovery(tmp_path: Path) -> None:
    spec = make_spec(tmp_path / "scenario.yaml")
    world = World(during=dict(FAILING))
    verdict = run_fake_experiment(spec, tmp_path / "run", world=world, fail_fast=True).verdict
    assert verdict.status is Status.FAILED
    assert verdict.reason.startswith("SLO availability [during] breached")
    assert "--fail-fast: the run ended without its recovery phase" in verdict.reason
    slos = {s.name: s for s in verdict.slos}
    assert not slos["availability"].ok and slos["availability"].observed is not None
    recovery_slos = [s for s in verdict.slos if s.phase == "recovery"]
    assert recovery_slos and all(
        s.observed is None and s.reason.startswith("not judged: --fail-fast ended the run once availability")
        for s in recovery_slos
    ), recovery_slos
    assert verdict.timing.recovered is None and verdict.timing.time_to_recover_s is None
    # The layers' verdicts are those of the SLOs judged: the canary failed availability.
    assert verdict.layers["canary"].ok is False
    assert world.count("revert") == 1
    assert Ledger().entries() == []


def test_without_it_the_same_run_still_judges_its_recovery(tmp_path: Path) -> None:
    spec = make_spec(tmp_path / "scenario.yaml")
    verdict = run_fake_experiment(spec, tmp_path / "run", world=World(during=dict(FAILING))).verdict
    assert verdict.status is Status.FAILED
    ttft_after = next(s for s in verdict.slos if s.name == "ttft_after")
    assert ttft_after.ok and ttft_after.samples > 0
    assert verdict.timing.recovered is not None


def test_a_run_whose_fault_window_held_has_its_recovery_judged_in_full(tmp_path: Path) -> None:
    """Only a failure before the recovery ends a run early: one that fails in recovery is judged there."""
    spec = make_spec(tmp_path / "scenario.yaml")
    world = World(during={"vllm.num_requests_waiting": 1.0}, after={"canary.ttft_s": 3.0})
    verdict = run_fake_experiment(spec, tmp_path / "run", world=world, fail_fast=True).verdict
    assert verdict.status is Status.FAILED
    ttft_after = next(s for s in verdict.slos if s.name == "ttft_after")
    assert not ttft_after.ok and ttft_after.observed == 3.0
    assert "--fail-fast" not in verdict.reason
    assert verdict.timing.recovered is False


def test_a_control_ended_early_still_releases_its_sabotage(tmp_path: Path) -> None:
    spec = make_spec(tmp_path / "scenario.yaml")
    step = SabotageStep(
        0,
        FAKE_SABOTAGE,
        SabotageAt.INJECT,
        {"values": {"canary.success": 0.0, "vllm.num_requests_waiting": 4.0}},
    )
    control = ControlSpec(
        spec.path, spec, "the fake platform queues and fails every request", Layer.VLLM, False, (step,)
    )
    world = World()
    verdict = run_fake_experiment(
        control.run_spec(), tmp_path / "run", world=world, control=control, fail_fast=True
    ).verdict
    assert verdict.status is Status.FAILED and "--fail-fast" in verdict.reason
    assert verdict.control is not None and verdict.control.result == ControlResult.FAILED_AS_EXPECTED
    assert [entry["ok"] for entry in verdict.control.released] == [True]
    assert world.count("sabotage.revert") == 1 and world.count("revert") == 1
    assert Ledger().entries() == []


def test_an_slo_left_unjudged_names_no_failure_and_no_layer(tmp_path: Path) -> None:
    """Triage and the platform failure read only what was judged: a recovery SLO the run never
    reached says nothing of a replica, however it reads in verdict.json."""
    spec = make_spec(tmp_path / "scenario.yaml")
    world = World(baseline={**HEALTHY, "vllm.healthy": 1.0}, during=dict(FAILING))
    verdict = run_fake_experiment(spec, tmp_path / "run", world=world, fail_fast=True).verdict
    assert verdict.status is Status.FAILED
    unjudged = [s.name for s in verdict.slos if s.reason.startswith("not judged")]
    assert "platform.replica-0.answers_after" in unjudged, unjudged
    failure = verdict.platform.failure if verdict.platform else None
    assert failure is None or failure.phase != "recovery", failure
    assert verdict.triage is not None and "not judged" not in verdict.triage.reason, verdict.triage


def test_a_game_day_with_fail_fast_ends_each_failed_run_without_its_recovery(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CI gate's game day: the failed scenario is still failed (exit 1) and rolled back, and
    its recovery is left unjudged."""
    world = World(during=dict(FAILING))

    def shares_the_world(fault: FakeFault) -> None:
        fault.world, fault.script = world, FaultScript()

    scenario = tmp_path / "fake_scenario.yaml"
    make_spec(scenario)
    monkeypatch.setattr(FakeFault, "__init__", shares_the_world)
    monkeypatch.setattr(cli_run, "build_probes", FakeProbeFactory(world))
    monkeypatch.setattr(cli_gameday, "LocalEnvironment", FakeLocalEnvironment)
    monkeypatch.setattr(cli_gameday, "suite_paths", lambda name: [scenario])
    monkeypatch.setattr(cli_gameday, "load_and_validate", make_spec)
    out = tmp_path / "out"
    monkeypatch.setattr("sys.argv", ["inferchaos", "gameday", "--fail-fast", "--out", str(out)])
    with pytest.raises(SystemExit) as done:
        cli.main()
    assert done.value.code == 1
    (verdict_file,) = out.glob("gameday-*/*/verdict.json")
    verdict = json.loads(verdict_file.read_text())
    assert "--fail-fast: the run ended without its recovery phase" in verdict["reason"], verdict["reason"]
    assert verdict["timing"]["recovered"] is None
    assert world.count("revert") == 1
    assert Ledger().entries() == []
