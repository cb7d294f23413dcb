"""Judging the restarted replica: fail fast with the reason captured, never hang; and the evidence built on it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from inferchaos.faults.base import FaultHandle
from inferchaos.faults.gpu import squat
from inferchaos.faults.gpu.restart import (
    FAILED_FAST,
    FAILED_LATE,
    HUNG,
    NOT_RESTARTED,
    STARTED,
    STARTING,
    SUPERSEDED,
    RestartAttempt,
    assess_restart,
    merge_attempts,
    watch_restart,
)
from inferchaos.faults.gpu.squat import SquatDeviceMemory
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
    reads = iter([
        [replica_record(0), replica_record(1, state="healthy", started_at=now - 100)],
        [replica_record(0, state="starting"), replica_record(1, state="starting", started_at=now + 1)],
        [replica_record(0), _failed(now + 1, 2.0)],
    ])  # fmt: skip
    watch = watch_restart(
        lambda: next(reads), "replica-1", now, fail_within_s=60, restart_wait_s=30, interval_s=0
    )
    assert [a.state for a in watch.attempts] == ["failed"]
    assert watch.others_unhealthy == ["replica-0:starting"]


def _handle(state_dir: str, restarted_at: float, **state: Any) -> FaultHandle:
    handle = FaultHandle(
        fault="device.squat_device_memory",
        layer=Layer.DEVICE,
        params={"device": "host:1", "bytes": 2_000_000_000},
        env="local",
    )
    handle.state = {
        "backend": "host", "device": "host:1", "bytes": 2_000_000_000, "allocated_bytes": 2_000_000_000,
        "budget": "inferchaos-abc123-replica-1", "replica": "replica-1", "restart_replica": True,
        "fail_within_s": 60.0, "state_dir": state_dir, "restarted_at": restarted_at,
        "squat_ready_at": restarted_at + 2, "preflight_flagged_at": restarted_at + 2.1,
        "preflight": {"device_free_bytes": 600_000_000, "replica_need_bytes": 1_900_000_000, "flagged": True},
        "squatter_pid": 0, "squatter_alive_at_outcome": True, "attempts": [], "others_unhealthy": [],
        **state,
    }  # fmt: skip
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
    handle = _handle(fake_env.state.state_dir, restarted, attempts=[vars(RestartAttempt.from_record(failed))],
                     others_unhealthy=["replica-0:failed"])  # fmt: skip
    evidence = SquatDeviceMemory().evidence(fake_env, handle)
    assert not evidence.bit
    assert "other replicas did not stay healthy" in evidence.reason
