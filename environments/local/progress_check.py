"""The progress-aware health check of the local environment's replicas.

vLLM's ``/health`` only checks an ``errored`` flag (v1/engine/async_llm.py ``check_health``):
with its EngineCore stopped the API server still answers 200, so a health check that forwards
``/health`` keeps a hung engine in rotation for as long as it hangs (vLLM #36451, Ray Serve
#61263). The progress-aware check also asks whether the replica gets anything done: a replica
is stalled when requests are in flight and, for ``stall_after_s``, neither a byte came back
from its vLLM server nor vLLM's token counters moved. A saturated replica still streams
tokens, and a replica slowed tenfold still makes progress, so neither is stalled; an idle
replica is never judged, because with nothing asked of it nothing is owed.

A replica can also be starved: it makes progress, but is held to a fraction of the CPU it
needs. The starvation check reads what a platform running containers with CPU limits reads
(cAdvisor's ``container_cpu_cfs_throttled_periods_total``): the CFS bandwidth counters of the
cpu cgroup of the replica's vLLM server, and judges the share of its quota periods in which
the kernel throttled it while requests were in flight. Behavioural signals were tried first
and measured on 2 shared cores (the data beside the constants below): what a token costs
depends on the work, and the CPU a replica gets or waits for depends on what the rest of the
machine runs, so a flood or a busy neighbour made healthy replicas look as starved as a
throttled one. Only a cgroup the vLLM server does not share with its replica actor is
judged, as a container of its own would be: every server starts in the group the whole
platform runs in, and a quota over that group (a CI machine's CPU limit) throttles every
replica alike, so judging it would take them all out at once. A replica slowed in other ways
(a stop/continue duty cycle, a noisy neighbour) is not seen by this check.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from inferchaos.primitives.cpu_quota import DEFAULT_PERIOD_US


class HealthCheck(StrEnum):
    """Which health check a local replica answers Serve with."""

    # /health plus progress (the default): a hung engine is taken out of rotation.
    PROGRESS = "progress"
    # vLLM's /health forwarded as it is, which is what most platforms run today.
    PLAIN = "plain"


# A file in the environment's state folder that overrides the health check every replica
# started with, read at each check: how a negative control blinds a running platform's check.
OVERRIDE_FILE = "health_check_override"


def health_check_in_force(state_dir: Path, started_with: str) -> HealthCheck:
    """The check replicas answer with now: the override when one is written, else ``started_with``."""
    try:
        override = (state_dir / OVERRIDE_FILE).read_text().strip()
    except FileNotFoundError:
        return HealthCheck(started_with)
    # A torn or foreign write must not blind the check by accident: only "plain" overrides.
    return HealthCheck.PLAIN if override == HealthCheck.PLAIN else HealthCheck(started_with)


# How long in-flight requests may go without any progress before the replica counts as hung.
# A long prompt's prefill on 2 cores takes well under a second, and ten times that on a
# replica slowed tenfold; 5 s stays clear of both, and Serve then needs 3 failed checks at its
# 1 s period, so a hang is out of rotation about 8 s after the first request meets it.
STALL_AFTER_S = 5.0


@dataclass
class ProgressWatch:
    """What one replica has in flight and when it last made progress (monotonic seconds)."""

    stall_after_s: float = STALL_AFTER_S
    in_flight: int = 0
    last_progress: float = 0.0
    # vLLM's prompt + generation token counters at the last read; None before the first.
    tokens_seen: float | None = None
    # Seconds spent with at least one request in flight, up to ``busy_since``'s stretch.
    busy_s: float = 0.0
    busy_since: float | None = None

    def busy_total(self, now: float) -> float:
        """Seconds this replica has had requests in flight, the current stretch included."""
        return self.busy_s + (now - self.busy_since if self.busy_since is not None else 0.0)

    def started(self, now: float) -> None:
        """A request went to the vLLM server; an idle replica's stall clock starts now."""
        if self.in_flight == 0:
            self.last_progress = now
            self.busy_since = now
        self.in_flight += 1

    def progressed(self, now: float) -> None:
        """Bytes came back from the vLLM server."""
        self.last_progress = now

    def finished(self, now: float) -> None:
        """A request ended (answered, failed or abandoned by its client)."""
        self.in_flight = max(0, self.in_flight - 1)
        self.last_progress = now
        if self.in_flight == 0 and self.busy_since is not None:
            self.busy_s += now - self.busy_since
            self.busy_since = None

    def suspect(self, now: float) -> bool:
        """True when requests have waited ``stall_after_s`` without a byte: time to read the counters."""
        return self.in_flight > 0 and now - self.last_progress >= self.stall_after_s

    def stalled(self, now: float, tokens: float) -> str | None:
        """Why the replica is hung, given vLLM's token counters now; None while it progresses.

        A first read has nothing to compare with, so it only starts the comparison: a hang is
        declared one check later at the earliest.
        """
        before, self.tokens_seen = self.tokens_seen, tokens
        if before is None or tokens != before:
            if before is not None:
                self.last_progress = now
            return None
        return (
            f"{self.in_flight} request(s) in flight and no progress for {now - self.last_progress:.1f} s "
            f"(no bytes from vLLM, its token counters flat at {tokens:g})"
        )


# A replica is starved when, over its last JUDGE_BUSY_S seconds with requests in flight, its
# cgroup was throttled in at least THROTTLED_SHARE of the CFS periods it ran in (and ran in
# MIN_PERIODS of them: a replica that barely ran is not judged). Only as many periods as its
# busy time spans count: an engine that wakes every period while idle runs in periods that no
# request waited in, and those must not dilute the ones that did. A replica in no group with a
# quota counts no period and is never starved. The throttling counters are judged because the
# behavioural signals were not telling: the share of the CPU a replica's threads were ready to
# use (schedstat), and its CPU per busy second, read as low for healthy replicas under a flood
# or beside a busy peer as for a throttled one (figures in bench/RESULTS.md).
THROTTLED_SHARE = 0.5
MIN_PERIODS = 5
JUDGE_BUSY_S = 1.0


@dataclass(frozen=True)
class CpuRead:
    """One read of the counters the starvation check compares (seconds, CFS periods, tokens)."""

    wall_s: float
    busy_s: float
    periods: int
    throttled: int
    tokens: float
    # The cgroup's quota period: how many periods a stretch of busy time spans.
    period_s: float = DEFAULT_PERIOD_US / 1e6


@dataclass
class StarvationWatch:
    """How often a busy replica's cgroup was throttled by its CPU quota (the fail-slow check)."""

    throttled_share: float = THROTTLED_SHARE
    min_periods: int = MIN_PERIODS
    judge_busy_s: float = JUDGE_BUSY_S
    _reads: deque[CpuRead] = field(default_factory=deque)
    # The last verdict given: it stands until a read with new busy time says otherwise. A
    # starved replica that had no request in the last second is no less starved, and a check
    # that passed it then would reset the consecutive failures Serve counts before it acts.
    _standing: str | None = None

    @property
    def standing(self) -> str | None:
        """Why the replica was last judged starved, while no later judgment cleared it."""
        return self._standing

    def restart(self) -> None:
        """Forget the stretch under way (the check was off meanwhile), and its verdict."""
        self._reads.clear()
        self._standing = None

    def judge(self, read: CpuRead) -> str | None:
        """Why the replica is starved, given this read; None while its quota leaves it be, while
        it ran in too few periods to judge, or with too little busy time to judge (the last
        ``judge_busy_s`` of it are judged, read by read).

        No token at all is a hang, the stall check's to judge, not a starved replica.
        """
        self._standing = self._judge(read)
        return self._standing

    def _judge(self, read: CpuRead) -> str | None:
        reads = self._reads
        last = reads[-1] if reads else None
        if last is not None and (
            read.busy_s < last.busy_s
            or read.periods < last.periods
            or read.throttled < last.throttled
            or read.tokens < last.tokens
        ):
            reads.clear()  # counters went back: a new server, or another cgroup
        reads.append(read)
        # Keep the newest read that is at least judge_busy_s of busy time old: the stretch's start.
        while len(reads) > 1 and read.busy_s - reads[1].busy_s >= self.judge_busy_s:
            reads.popleft()
        first = reads[0]
        busy = read.busy_s - first.busy_s
        periods, throttled = read.periods - first.periods, read.throttled - first.throttled
        if busy < self.judge_busy_s or read.tokens == first.tokens or periods < self.min_periods:
            return None
        busy_periods = busy / read.period_s
        if throttled < self.throttled_share * min(periods, busy_periods):
            return None
        return (
            f"starved: its CPU quota throttled it in {throttled} of the {periods} periods it ran in "
            f"over its last {busy:.1f} busy s ({busy_periods:.0f} periods' worth)"
        )
