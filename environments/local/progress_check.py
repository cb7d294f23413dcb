"""The progress-aware health check of the local environment's replicas.

vLLM's ``/health`` only checks an ``errored`` flag (v1/engine/async_llm.py ``check_health``):
with its EngineCore stopped the API server still answers 200, so a health check that forwards
``/health`` keeps a hung engine in rotation for as long as it hangs (vLLM #36451, Ray Serve
#61263). The progress-aware check also asks whether the replica gets anything done: a replica
is stalled when requests are in flight and, for ``stall_after_s``, neither a byte came back
from its vLLM server nor vLLM's token counters moved. A saturated replica still streams
tokens, and a replica slowed tenfold still makes progress, so neither is stalled; an idle
replica is never judged, because with nothing asked of it nothing is owed.
"""

from __future__ import annotations

from dataclasses import dataclass
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

    def started(self, now: float) -> None:
        """A request went to the vLLM server; an idle replica's stall clock starts now."""
        if self.in_flight == 0:
            self.last_progress = now
        self.in_flight += 1

    def progressed(self, now: float) -> None:
        """Bytes came back from the vLLM server."""
        self.last_progress = now

    def finished(self, now: float) -> None:
        """A request ended (answered, failed or abandoned by its client)."""
        self.in_flight = max(0, self.in_flight - 1)
        self.last_progress = now

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
