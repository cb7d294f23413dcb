"""Restarting a local replica onto a squatted budget, and judging how its start-up went.

The "restart" is a SIGKILL of the replica's vLLM process group: Serve's health check notices
and starts a new replica, which claims the same slot and so the same memory budget. Each
start-up attempt rewrites the slot's ReplicaRecord, and a failed attempt's record can be
overwritten (by the replica's own clean-up, or by Serve's next attempt) within seconds, so
:func:`watch_restart` polls the records and keeps every attempt it saw.

The squat can only be taken once the killed server has released its memory, and Serve may
start the next attempt before the squatter holds its bytes (on 2 busy cores taking 2 GB took
the squatter up to several seconds, and Serve's restart came 4-9 s after the kill). Such an
attempt raced the injector, not the squatted device: it is kept apart (``raced``) and the
attempt judged is the first one that started once the squat held. A raced attempt still
judges the platform where it cannot have been the race: one that hangs on the squatted
device, or starts despite it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import psutil

from inferchaos.errors import FaultError, ProbeError
from inferchaos.faults.base import JsonObject
from inferchaos.primitives.memory_budget import MemoryBudget, read_memory_stat
from inferchaos.primitives.processes import ENV_MARKER, kill_tree_now, pid_alive
from inferchaos.primitives.replica_slots import ReplicaRecord

logger = logging.getLogger(__name__)

# A budget whose processes have all gone holds only this much anonymous memory.
RELEASED_RSS_BYTES = 64 * 1024 * 1024
# Extra time past fail_within_s before an attempt still "starting" is called hung.
HUNG_GRACE_S = 5.0

# Verdicts of the first start-up attempt after the restart.
FAILED_FAST = "failed_fast"
FAILED_LATE = "failed_late"
STARTED = "started"
HUNG = "hung"
STARTING = "starting"
SUPERSEDED = "superseded"
NOT_RESTARTED = "not_restarted"


@dataclass
class RestartAttempt:
    """One start-up of the replica after the restart, as its record last showed it."""

    started_at: float
    state: str
    vllm_pid: int = 0
    failure: str = ""
    failed_at: float | None = None
    ready_at: float | None = None

    @classmethod
    def from_record(cls, record: ReplicaRecord) -> RestartAttempt:
        # The replica's clean-up may turn "failed" (or "healthy") into "stopped"; the fields that
        # say how the start-up went remain.
        state = record.state
        if record.failed_at is not None or state == "failed":
            state = "failed"
        elif state == "stopped" and record.ready_at is not None:
            state = "healthy"
        return cls(
            record.started_at, state, record.vllm_pid, record.failure, record.failed_at, record.ready_at
        )


@dataclass
class RestartOutcome:
    """How the first attempt after the restart went."""

    verdict: str
    attempt: RestartAttempt | None
    failed_after_start_s: float | None = None
    restart_to_failure_s: float | None = None

    @property
    def failed_fast(self) -> bool:
        """The expectation held: a failure within the limit, with its reason captured."""
        return self.verdict == FAILED_FAST and bool(self.attempt and self.attempt.failure)


@dataclass
class RestartWatch:
    """What :func:`watch_restart` saw: the attempts, and any other replica that was not healthy."""

    attempts: list[RestartAttempt] = field(default_factory=list)
    others_unhealthy: list[str] = field(default_factory=list)
    # Attempts that started between the kill and the moment the squat held.
    raced: list[RestartAttempt] = field(default_factory=list)

    def to_state(self) -> JsonObject:
        """The watch as plain data for the ledger entry."""
        return {
            "attempts": [asdict(a) for a in self.attempts],
            "raced_attempts": [asdict(a) for a in self.raced],
            "others_unhealthy": list(self.others_unhealthy),
        }


def kill_replica_server(record: ReplicaRecord, env_id: str) -> list[int]:
    """SIGKILL the replica's vLLM server group and every descendant; the pids killed.

    The pid comes from a file, so it is checked to be this environment's vLLM server first.
    """
    try:
        proc = psutil.Process(record.vllm_pid)
        is_ours = proc.environ().get(ENV_MARKER) == env_id and any("vllm" in part for part in proc.cmdline())
    except (psutil.NoSuchProcess, psutil.ZombieProcess) as e:
        raise FaultError(
            f"{record.name}'s vLLM server (pid {record.vllm_pid}) is gone; nothing to restart"
        ) from e
    except psutil.AccessDenied as e:
        raise FaultError(f"cannot inspect {record.name}'s vLLM server pid {record.vllm_pid}: {e}") from e
    if not is_ours:
        raise FaultError(f"pid {record.vllm_pid} is not {record.name}'s vLLM server of environment {env_id}")
    return kill_tree_now(record.vllm_pid)


def budget_rss_bytes(budget: MemoryBudget) -> int:
    """Anonymous memory charged to the budget (page cache left out): v1's rss, v2's anon."""
    stats = read_memory_stat(budget)
    return stats.get("total_rss", stats.get("rss", stats.get("anon", 0)))


def wait_budget_released(budget: MemoryBudget, killed: list[int], timeout_s: float) -> float | None:
    """When the killed processes were gone and the budget's anonymous memory had fallen; None on timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            released = (
                not any(pid_alive(pid) for pid in killed) and budget_rss_bytes(budget) <= RELEASED_RSS_BYTES
            )
        except ProbeError as e:
            raise FaultError(f"could not watch memory budget {budget.name}: {e}") from e
        if released:
            return time.time()
        time.sleep(0.1)
    logger.warning(
        "memory budget %s still holds memory %.0f s after the replica was killed", budget.name, timeout_s
    )
    return None


def merge_attempts(
    seen: list[RestartAttempt], record: ReplicaRecord | None, after: float, until: float | None = None
) -> list[RestartAttempt]:
    """``seen`` updated with ``record`` when it is an attempt started after ``after`` (and, with
    ``until``, no later than that).

    An attempt last seen "starting" whose record was replaced by a later attempt ended without
    the failure being read: it is marked superseded.
    """
    attempts = [RestartAttempt(**asdict(a)) for a in seen]
    if record is None or record.started_at <= after or (until is not None and record.started_at > until):
        return attempts
    current = RestartAttempt.from_record(record)
    for attempt in attempts:
        if attempt.started_at == current.started_at:
            attempt.state, attempt.failure, attempt.failed_at, attempt.ready_at = (
                current.state,
                current.failure,
                current.failed_at,
                current.ready_at,
            )
            return attempts
    for attempt in attempts:
        if attempt.state == "starting":
            attempt.state = SUPERSEDED
    return sorted([*attempts, current], key=lambda a: a.started_at)


def assess_restart(
    attempts: list[RestartAttempt], restarted_at: float, fail_within_s: float, now: float
) -> RestartOutcome:
    """Judge the first attempt after the restart against "fail within ``fail_within_s``, never hang"."""
    first = min(attempts, key=lambda a: a.started_at, default=None)
    if first is None:
        return RestartOutcome(NOT_RESTARTED, None)
    if first.state == "failed" and first.failed_at is not None:
        after_start = first.failed_at - first.started_at
        verdict = FAILED_FAST if after_start <= fail_within_s else FAILED_LATE
        return RestartOutcome(verdict, first, round(after_start, 2), round(first.failed_at - restarted_at, 2))
    if first.state == "healthy":
        return RestartOutcome(STARTED, first)
    if first.state in (SUPERSEDED, "stopped"):
        # It ended, but not with a failure anyone could read.
        return RestartOutcome(SUPERSEDED, first)
    verdict = HUNG if now - first.started_at > fail_within_s else STARTING
    return RestartOutcome(verdict, first)


def assess_attempts(
    attempts: list[RestartAttempt],
    raced: list[RestartAttempt],
    restarted_at: float,
    fail_within_s: float,
    now: float,
) -> RestartOutcome:
    """Judge the first attempt that started on the squatted device; with none yet, the last
    attempt that raced the squat where it hung or started (neither of which the race explains)."""
    outcome = assess_restart(attempts, restarted_at, fail_within_s, now)
    if outcome.attempt is None and raced:
        late = assess_restart(raced[-1:], restarted_at, fail_within_s, now)
        if late.verdict in (HUNG, STARTED):
            return late
    return outcome


def watch_restart(
    read_records: Callable[[], list[ReplicaRecord]],
    replica: str,
    restarted_at: float,
    fail_within_s: float,
    restart_wait_s: float,
    interval_s: float = 0.25,
    since: float | None = None,
) -> RestartWatch:
    """Poll the replica records until the first attempt that started after ``since`` (the squat
    held; the restart by default) has an outcome.

    Returns once that attempt failed, became healthy or was superseded, once it has been
    starting for longer than ``fail_within_s`` (plus a little grace), or when no attempt began
    within ``restart_wait_s``. Attempts that started between the restart and ``since`` are
    kept apart as raced. Other replicas found not healthy on the way are noted.
    """
    since = restarted_at if since is None else since
    watch = RestartWatch()
    deadline_first = time.monotonic() + restart_wait_s
    while True:
        records = read_records()
        target = next((r for r in records if r.name == replica), None)
        watch.attempts = merge_attempts(watch.attempts, target, since)
        watch.raced = merge_attempts(watch.raced, target, restarted_at, until=since)
        for other in records:
            if other.name != replica and other.state != "healthy":
                note = f"{other.name}:{other.state}"
                if note not in watch.others_unhealthy:
                    watch.others_unhealthy.append(note)
        outcome = assess_attempts(watch.attempts, watch.raced, restarted_at, fail_within_s, time.time())
        if outcome.verdict in (FAILED_FAST, FAILED_LATE, STARTED, SUPERSEDED):
            return watch
        if outcome.attempt is None and time.monotonic() > deadline_first:
            return watch
        if (
            outcome.attempt is not None
            and time.time() - outcome.attempt.started_at > fail_within_s + HUNG_GRACE_S
        ):
            return watch
        time.sleep(interval_s)
