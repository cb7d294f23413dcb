"""Judging the restarted replica: fail fast with the reason captured, never hang; and the evidence built on it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from inferchaos.faults.base import FaultHandle
from inferchaos.faults.device import squat
from inferchaos.faults.device.restart import (
    FAILED_FAST,
    FAILED_LATE,
    HUNG,
    NOT_RESTARTED,
    STARTED,
    STARTING,
    SUPERSEDED,
    RestartAttempt,
    assess_attempts,
    assess_restart,
    merge_attempts,
    watch_restart,
)
from inferchaos.faults.device.squat import SquatDeviceMemory
from inferchaos.layers import Layer
from inferchaos.primitives.replica_slots import ReplicaRecord
from tests.fakes.gpu import FakeLocalEnv, replica_record

OOM = (
    "was killed by SIGKILL (exit 137); the OOM killer acted in its memory budget inferchaos-abc123-replica-1"
)
RESTARTED = 1000.0


def _failed(started: float, after_s: float, state: str = "failed") -> ReplicaRecord:
    return replica_record(1, state=state, started_at=started, failure=OOM, failed_at=started + after_s)


def _attempts(*records: ReplicaRecord) -> list[RestartAttempt]:
    attempts: list[RestartAttempt] = []
    for record in records:
        attempts = merge_attempts(attempts, record, RESTARTED)
    return attempts


def test_a_start_up_that_dies_within_the_limit_failed_fast_with_its_reason() -> None:
    outcome = assess_restart(_attempts(_failed(RESTARTED + 8, 31.5)), RESTARTED, 60, now=RESTARTED + 45)
    assert outcome.verdict == FAILED_FAST and outcome.failed_fast
    assert outcome.attempt is not None and outcome.attempt.failure == OOM
    assert outcome.failed_after_start_s == 31.5
    assert outcome.restart_to_failure_s == 39.5


def test_a_start_up_still_starting_past_the_limit_is_hung() -> None:
    starting = replica_record(1, state="starting", started_at=RESTARTED + 5)
    assert assess_restart(_attempts(starting), RESTARTED, 60, now=RESTARTED + 30).verdict == STARTING
    outcome = assess_restart(_attempts(starting), RESTARTED, 60, now=RESTARTED + 70)
    assert outcome.verdict == HUNG and not outcome.failed_fast


@pytest.mark.parametrize(
    ("record", "verdict"),
    [
        (_failed(RESTARTED + 5, 75), FAILED_LATE),
        (replica_record(1, state="healthy", started_at=RESTARTED + 5), STARTED),
        # The replica's own clean-up marks a failed attempt stopped; its failure fields remain.
        (_failed(RESTARTED + 5, 20, state="stopped"), FAILED_FAST),
        # A record from before the restart is not an attempt on the squatted device.
        (replica_record(1, state="healthy", started_at=RESTARTED - 100), NOT_RESTARTED),
    ],
)
def test_other_outcomes(record: ReplicaRecord, verdict: str) -> None:
    assert assess_restart(_attempts(record), RESTARTED, 60, now=RESTARTED + 90).verdict == verdict


def test_an_attempt_replaced_before_its_failure_was_read_is_superseded_not_failed_fast() -> None:
    first = replica_record(1, state="starting", started_at=RESTARTED + 5)
    second = replica_record(1, state="starting", started_at=RESTARTED + 50)
    outcome = assess_restart(_attempts(first, second), RESTARTED, 60, now=RESTARTED + 55)
    assert outcome.verdict == SUPERSEDED and not outcome.failed_fast


def test_watch_returns_at_the_failure_and_notes_another_replica_that_was_not_healthy() -> None:
    now = time.time()
    reads = iter(
        [
            [replica_record(0), replica_record(1, state="healthy", started_at=now - 100)],
            [replica_record(0, state="starting"), replica_record(1, state="starting", started_at=now + 1)],
            [replica_record(0), _failed(now + 1, 2.0)],
        ]
    )
    watch = watch_restart(
        lambda: next(reads), "replica-1", now, fail_within_s=60, restart_wait_s=30, interval_s=0
    )
    assert [a.state for a in watch.attempts] == ["failed"]
    assert watch.others_unhealthy == ["replica-0:starting"]


def test_an_attempt_begun_before_the_squat_held_is_not_the_one_judged() -> None:
    now = time.time()
    held = now + 3
    # Serve began attempt one 1 s after the kill, before the squatter held its bytes at +3 s; the
    # squat then killed it. Attempt two began on the flagged device and is the one judged.
    reads = iter(
        [
            [replica_record(0), replica_record(1, state="starting", started_at=now + 1)],
            [replica_record(0), _failed(now + 1, 4.0)],
            [replica_record(0), replica_record(1, state="starting", started_at=now + 8)],
            [replica_record(0), _failed(now + 8, 12.0)],
        ]
    )
    watch = watch_restart(
        lambda: next(reads), "replica-1", now, fail_within_s=60, restart_wait_s=30, interval_s=0, since=held
    )
    assert [(a.started_at, a.state) for a in watch.raced] == [(now + 1, "failed")]
    outcome = assess_attempts(watch.attempts, watch.raced, now, 60, now=now + 25)
    assert outcome.verdict == FAILED_FAST and outcome.attempt is not None
    assert outcome.attempt.started_at == now + 8 and outcome.failed_after_start_s == 12.0


@pytest.mark.parametrize(
    ("raced", "verdict"),
    [
        # Hanging or starting on the squatted device is the platform's doing, race or not.
        (replica_record(1, state="starting", started_at=RESTARTED + 1), HUNG),
        (replica_record(1, state="healthy", started_at=RESTARTED + 1), STARTED),
        # A raced attempt that failed may have failed because the squat arrived mid-start: no verdict.
        (_failed(RESTARTED + 1, 4.0), NOT_RESTARTED),
    ],
)
def test_with_no_attempt_after_the_squat_a_raced_one_judges_only_a_hang_or_a_start(
    raced: ReplicaRecord, verdict: str
) -> None:
    attempts = merge_attempts([], raced, RESTARTED, until=RESTARTED + 3)
    assert assess_attempts([], attempts, RESTARTED, 60, now=RESTARTED + 90).verdict == verdict


def _handle(state_dir: str, restarted_at: float, **state: Any) -> FaultHandle:
    handle = FaultHandle(
        fault="device.squat_device_memory",
        layer=Layer.DEVICE,
        params={"device": "host:1", "bytes": 2_000_000_000},
        env="local",
    )
    handle.state = {
        "backend": "host",
        "device": "host:1",
        "bytes": 2_000_000_000,
        "allocated_bytes": 2_000_000_000,
        "budget": "inferchaos-abc123-replica-1",
        "replica": "replica-1",
        "restart_replica": True,
        "fail_within_s": 60.0,
        "state_dir": state_dir,
        "restarted_at": restarted_at,
        "squat_ready_at": restarted_at + 2,
        "preflight_flagged_at": restarted_at + 2.1,
        "preflight": {"device_free_bytes": 600_000_000, "replica_need_bytes": 1_900_000_000, "flagged": True},
        "squatter_pid": 0,
        "squatter_alive_at_outcome": True,
        "attempts": [],
        "others_unhealthy": [],
        **state,
    }
    # Evidence read after revert: the squatter is gone by design.
    handle.reverted_at = restarted_at + 60
    return handle


@pytest.fixture
def others_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(squat, "replica_healthy", lambda record: True)


def test_evidence_bites_when_the_restart_failed_fast_and_reports_recovery(
    fake_env: FakeLocalEnv, others_answer: None
) -> None:
    replicas = Path(fake_env.state.state_dir) / "replicas"
    restarted = time.time() - 120
    replica_record(0).save(replicas)
    failed = _failed(restarted + 6, 30.0, state="stopped")
    handle = _handle(fake_env.state.state_dir, restarted, attempts=[vars(RestartAttempt.from_record(failed))])
    replica_record(1, state="healthy", started_at=restarted + 70, ready_at=restarted + 110).save(replicas)

    evidence = SquatDeviceMemory().evidence(fake_env, handle)
    assert evidence.bit, evidence.reason
    assert "failed 30.0 s into start-up" in evidence.reason and OOM in evidence.reason
    assert evidence.symptoms["outcome"] == FAILED_FAST
    assert evidence.symptoms["failure"] == OOM
    assert evidence.symptoms["restart_to_failure_s"] == 36.0
    assert evidence.symptoms["preflight_before_restart"] is True
    assert evidence.timestamps["replica_failed_at"] == restarted + 36
    assert evidence.timestamps["replica_healthy_at"] == restarted + 110


def test_evidence_calls_a_replica_starting_past_the_limit_hung(
    fake_env: FakeLocalEnv, others_answer: None
) -> None:
    replicas = Path(fake_env.state.state_dir) / "replicas"
    restarted = time.time() - 120
    replica_record(0).save(replicas)
    replica_record(1, state="starting", started_at=restarted + 6).save(replicas)

    evidence = SquatDeviceMemory().evidence(fake_env, _handle(fake_env.state.state_dir, restarted))
    assert not evidence.bit
    assert evidence.symptoms["outcome"] == HUNG
    assert evidence.reason.startswith("replica-1 hung")


def test_evidence_does_not_bite_when_the_other_replica_went_down(
    fake_env: FakeLocalEnv, others_answer: None
) -> None:
    replicas = Path(fake_env.state.state_dir) / "replicas"
    restarted = time.time() - 120
    replica_record(0).save(replicas)
    failed = _failed(restarted + 6, 30.0)
    handle = _handle(
        fake_env.state.state_dir,
        restarted,
        attempts=[vars(RestartAttempt.from_record(failed))],
        others_unhealthy=["replica-0:failed"],
    )
    evidence = SquatDeviceMemory().evidence(fake_env, handle)
    assert not evidence.bit
    assert "other replicas did not stay healthy" in evidence.reason


def test_evidence_judges_the_attempt_after_the_squat_and_says_an_earlier_one_raced_it(
    fake_env: FakeLocalEnv, others_answer: None
) -> None:
    replicas = Path(fake_env.state.state_dir) / "replicas"
    restarted = time.time() - 120
    replica_record(0).save(replicas)
    raced = _failed(restarted + 1.5, 3.0)
    judged = _failed(restarted + 9, 12.0, state="stopped")
    handle = _handle(
        fake_env.state.state_dir,
        restarted,
        attempts_since=restarted + 2.1,
        attempts=[vars(RestartAttempt.from_record(judged))],
        raced_attempts=[vars(RestartAttempt.from_record(raced))],
    )
    evidence = SquatDeviceMemory().evidence(fake_env, handle)
    assert evidence.bit, evidence.reason
    assert evidence.symptoms["failed_after_start_s"] == 12.0
    assert evidence.symptoms["start_attempts_before_the_squat_held"] == 1
    assert evidence.reason.endswith("1 earlier attempt(s) began before the squat held and were not judged")


def test_evidence_without_the_raced_split_still_fails_an_attempt_that_began_before_the_squat(
    fake_env: FakeLocalEnv, others_answer: None
) -> None:
    # What CI saw once: the only attempt recorded began before the squat held. Judged as one
    # attempt (no raced split), the preflight did not come first, and the fault did not bite.
    replicas = Path(fake_env.state.state_dir) / "replicas"
    restarted = time.time() - 120
    replica_record(0).save(replicas)
    early = _failed(restarted + 1.5, 12.0, state="stopped")
    handle = _handle(fake_env.state.state_dir, restarted, attempts=[vars(RestartAttempt.from_record(early))])
    evidence = SquatDeviceMemory().evidence(fake_env, handle)
    assert not evidence.bit
    assert evidence.reason == "the preflight did not flag the device before the new replica started"
