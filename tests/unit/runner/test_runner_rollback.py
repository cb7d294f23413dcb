"""The revert always happens: on success, SLO failure, inject errors, signals and stop conditions."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from inferchaos.faults.ledger import Ledger
from inferchaos.reports.verdict_schema import Status
from tests.fakes.scripted_world import (
    FAKE_FAULT,
    LONG_DURING_S,
    FaultScript,
    RunResult,
    make_spec,
    run_fake_experiment,
)

pytestmark = pytest.mark.long_running


def assert_reverted_once_after_inject(result: RunResult) -> None:
    """Exactly one inject, exactly one revert after it, and nothing left in the ledger."""
    names = result.world.names()
    assert names.count("inject") == 1, names
    assert names.count("revert") == 1, names
    assert names.index("inject") < names.index("revert"), names
    assert not result.world.active, "the fault is still active after the run"
    assert result.ledger.entries() == [], f"ledger still holds {result.ledger.entries()}"


def assert_canary_stopped_after_revert(result: RunResult) -> None:
    """The canary ran around the whole run and every probe was closed."""
    names = result.world.names()
    assert names[0] == "canary.start", names
    assert names[-1] == "canary.stop", names
    assert names.count("canary.stop") == 1, names
    assert result.probes.built and all(p.closed for p in result.probes.built)


def test_success_reverts_once_and_passes(passed_run: RunResult) -> None:
    assert passed_run.verdict.status is Status.PASSED, passed_run.verdict.reason
    assert_reverted_once_after_inject(passed_run)
    assert_canary_stopped_after_revert(passed_run)
    fault = passed_run.verdict.fault
    assert fault is not None and fault.injected_at is not None and fault.reverted_at is not None
    assert fault.reverted_at >= fault.injected_at
    journal = json.loads(passed_run.read("journal.json"))
    assert [r["status"] for r in journal["rollbacks"]] == ["succeeded"]


def test_slo_failure_still_reverts(slo_failed_run: RunResult) -> None:
    verdict = slo_failed_run.verdict
    assert verdict.status is Status.FAILED
    assert "SLO availability [during] breached" in verdict.reason
    assert verdict.timing.time_to_detect_s is not None and verdict.timing.detected_by == "availability"
    assert_reverted_once_after_inject(slo_failed_run)
    assert_canary_stopped_after_revert(slo_failed_run)


def test_inject_error_after_the_ledger_write_is_reverted_from_the_ledger(inject_error_run: RunResult) -> None:
    verdict = inject_error_run.verdict
    assert verdict.status is Status.ERROR
    assert "inject failed: replica-0 vanished mid-flood" in verdict.reason
    # inject never returned a handle: the runner found it in the ledger and reverted it.
    assert_reverted_once_after_inject(inject_error_run)
    assert verdict.fault is not None and verdict.fault.name == FAKE_FAULT
    assert verdict.fault.reverted_at is not None
    assert "evidence" not in inject_error_run.world.names(), "no evidence is read of a failed injection"
    assert_canary_stopped_after_revert(inject_error_run)


@pytest.mark.timeout(120)
def test_unexpected_exception_in_inject_is_still_reverted(tmp_path: Path, private_home: Path) -> None:
    """A bug in a fault (not an InferchaosError) must not leave the injection in place."""
    spec = make_spec(tmp_path / "buggy.yaml")
    result = run_fake_experiment(
        spec, tmp_path / "run", script=FaultScript(inject_raises=RuntimeError("bug in the fault"))
    )
    assert result.error is None, result.error
    assert str(result.verdict.status) == "error"
    assert "RuntimeError: bug in the fault" in result.verdict.reason
    assert (tmp_path / "run" / "verdict.json").is_file(), "an error run still leaves its verdict"
    assert Ledger().entries() == [], "the half-made injection is still in the ledger"


def test_revert_error_leaves_the_entry_for_cleanup(revert_error_run: RunResult) -> None:
    names = revert_error_run.world.names()
    assert names.count("inject") == 1 and names.count("revert") == 1, names
    assert names.index("inject") < names.index("revert"), names
    # `inferchaos cleanup` reverts what the ledger still holds: the entry must survive.
    assert [h.fault for h in revert_error_run.ledger.entries()] == [FAKE_FAULT]


def test_revert_error_is_an_error_verdict(revert_error_run: RunResult) -> None:
    """The run still ends with a verdict (and its reports) that says the revert failed."""
    if revert_error_run.error is not None:
        raise revert_error_run.error
    verdict = revert_error_run.verdict
    assert verdict.status is Status.ERROR
    assert "revert failed: could not stop the flood" in verdict.reason
    journal = json.loads(revert_error_run.read("journal.json"))
    assert [r["status"] for r in journal["rollbacks"]] == ["failed"]
    assert (revert_error_run.run_dir / "report.html").is_file()


@pytest.mark.timeout(120)
def test_signal_during_the_fault_aborts_after_rollback(interrupted_run: RunResult) -> None:
    verdict = interrupted_run.verdict
    assert interrupted_run.interrupted_at is not None, "the signal was never sent"
    assert verdict.status is Status.ABORTED
    assert verdict.reason == "interrupted; the fault was rolled back"
    assert_reverted_once_after_inject(interrupted_run)
    assert_canary_stopped_after_revert(interrupted_run)
    revert_at = interrupted_run.world.first("revert")
    assert revert_at >= interrupted_run.interrupted_at
    assert revert_at - interrupted_run.world.first("inject") < LONG_DURING_S / 2, (
        "the run sat out its during time"
    )
    assert (interrupted_run.run_dir / "verdict.json").is_file()
    # The runner gives the signals back: a later Ctrl-C must still stop the process.
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def test_stop_condition_aborts_and_reverts_at_once(stopped_run: RunResult) -> None:
    verdict = stopped_run.verdict
    assert verdict.status is Status.ABORTED
    assert verdict.reason.startswith("stop condition front_door_down:"), verdict.reason
    assert verdict.reason.endswith("rolled back at once")
    assert verdict.stop_condition is not None and verdict.stop_condition["name"] == "front_door_down"
    assert_reverted_once_after_inject(stopped_run)
    assert_canary_stopped_after_revert(stopped_run)
    held = stopped_run.world.first("revert") - stopped_run.world.first("inject")
    assert held < LONG_DURING_S / 2, f"the fault stayed {held:.1f} s of its {LONG_DURING_S:g} s"


@pytest.mark.timeout(120)
def test_signal_while_inject_is_acting_leaves_no_fault_behind(tmp_path: Path, private_home: Path) -> None:
    spec = make_spec(tmp_path / "slow_inject.yaml", during_s=LONG_DURING_S)
    result = run_fake_experiment(
        spec,
        tmp_path / "run",
        script=FaultScript(inject_takes_s=1.5),
        interrupt=signal.SIGINT,
        interrupt_at="injecting",
    )
    assert result.interrupted_at is not None, "the signal was never sent"
    assert result.verdict.status is Status.ABORTED
    names = result.world.names()
    assert "inject.done" in names, names  # Runner.run returns only after inject's thread ended
    assert names.index("inject.done") < names.index("revert"), f"reverted before inject had finished: {names}"
    assert not result.world.active, "the fault is still active after a run that says it was rolled back"
    assert result.ledger.entries() == []


@pytest.mark.timeout(120)
def test_signal_in_the_baseline_aborts_without_injecting(tmp_path: Path, private_home: Path) -> None:
    spec = make_spec(tmp_path / "early_stop.yaml", baseline_s=LONG_DURING_S)
    result = run_fake_experiment(spec, tmp_path / "run", interrupt=signal.SIGINT, interrupt_at="baseline")
    assert result.interrupted_at is not None, "the signal was never sent"
    assert result.verdict.status is Status.ABORTED
    assert result.verdict.reason.startswith("interrupted"), result.verdict.reason
    assert result.verdict.fault is None
    names = result.world.names()
    assert names == ["canary.start", "canary.stop"], names
    assert result.world.first("canary.stop") - result.world.first("canary.start") < LONG_DURING_S / 2
    assert result.ledger.entries() == []
    # The verdict says aborted; the journal, as chaoslib after a signal, says interrupted.
    journal = json.loads(result.read("journal.json"))
    assert journal["status"] == "interrupted" and journal["run"] == [] and journal["rollbacks"] == []
