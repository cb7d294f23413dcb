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


# A replica is slow when, over at least JUDGE_AFTER_BUSY_S of busy time, it processed fewer
# than 1/SLOW_FACTOR of the tokens per busy second it managed in its own warm-up, and fewer
# than 1/PEER_FACTOR of the fastest other replica's lately: when every replica slows (the
# machine is busy: a replacement loading its model, a crash-looping controller), none is the
# outlier, and without a peer's recent speed to compare with, none is judged. Tokens per
# busy second, not latency: a flooded replica queues (its TTFT grows tenfold) but processes
# more tokens per second than ever, as batching and long prefills count in full, while a
# replica slowed tenfold processes a tenth. The thresholds are measured in the module's
# docstring of experiments/slow_replica.yaml.
SLOW_FACTOR = 5.0
PEER_FACTOR = 3.0
JUDGE_AFTER_BUSY_S = 2.0
# The speed a replica publishes for its peers covers at least this much busy time (a canary's
# request keeps a replica busy about 0.05 s).
PUBLISH_AFTER_BUSY_S = 0.2


@dataclass
class SpeedWatch:
    """One replica's tokens per busy second against its own warm-up (the latency outlier check)."""

    reference_tokens_per_s: float | None = None
    slow_factor: float = SLOW_FACTOR
    peer_factor: float = PEER_FACTOR
    judge_after_busy_s: float = JUDGE_AFTER_BUSY_S
    # The start of the stretch being judged: busy seconds and token counters then.
    busy_at: float | None = None
    tokens_at: float = 0.0
    # The last judgement, kept until the next one: Serve replaces a replica after several
    # failed checks in a row, and a stretch takes several checks to fill.
    slow_reason: str | None = None
    # Tokens per busy second of the last stretch judged.
    last_rate: float | None = None

    def rate_now(self, busy_s: float, tokens: float) -> float | None:
        """The speed to publish for the peers: over the stretch under way once it holds
        PUBLISH_AFTER_BUSY_S of busy time, else the last stretch judged."""
        if (
            self.busy_at is not None
            and tokens >= self.tokens_at
            and busy_s - self.busy_at >= PUBLISH_AFTER_BUSY_S
        ):
            return (tokens - self.tokens_at) / (busy_s - self.busy_at)
        return self.last_rate

    def restart(self) -> None:
        """Forget the stretch under way and the last judgement (the check was off meanwhile)."""
        self.busy_at, self.slow_reason = None, None

    def judge(self, busy_s: float, tokens: float, peer_rate: float | None) -> str | None:
        """Why the replica is slow, given its busy seconds, vLLM's token counters now and the
        fastest peer's recent tokens per busy second; None while it keeps up (or has no
        reference or no peer to compare with, or too little busy time to judge yet)."""
        if self.reference_tokens_per_s is None:
            return None
        if self.busy_at is None or tokens < self.tokens_at:
            self.busy_at, self.tokens_at = busy_s, tokens
            return self.slow_reason
        busy = busy_s - self.busy_at
        if busy < self.judge_after_busy_s:
            return self.slow_reason
        rate = (tokens - self.tokens_at) / busy
        self.busy_at, self.tokens_at, self.last_rate = busy_s, tokens, rate
        # No token at all is a hang, the stall check's to judge (after STALL_AFTER_S, as the
        # scenarios' windows were measured with), not a slow replica.
        slow = (
            rate > 0
            and rate < self.reference_tokens_per_s / self.slow_factor
            and peer_rate is not None
            and rate < peer_rate / self.peer_factor
        )
        self.slow_reason = (
            f"slow: {rate:.0f} tokens per busy second over the last {busy:.1f} s, below 1/{self.slow_factor:g} "
            f"of its warm-up's {self.reference_tokens_per_s:.0f} and 1/{self.peer_factor:g} of a peer's {peer_rate:.0f}"
            if slow and peer_rate is not None
            else None
        )
        return self.slow_reason
