"""The canary: small streaming completions through the front door, as a user would send them.

Requests leave at a fixed rate from background tasks, independent of the sampler's tick,
so a slow or hanging front door shows up as failures and long latencies rather than as a
sampler that stalls. Every request becomes data: a refused connection is ``success 0``, and
its latencies count at the request timeout (see :func:`result_samples`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
from dataclasses import dataclass

import httpx

from inferchaos.errors import ConfigError
from inferchaos.layers import Layer
from inferchaos.primitives import http
from inferchaos.primitives.openai_stream import StreamResult, stream_completion_async
from inferchaos.steady_state.censoring import censored_labels
from inferchaos.steady_state.probe_base import Sample

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CanaryPace:
    """How often the canary asks and how long it waits for an answer: what a run and an
    experiment choose, where :class:`CanaryConfig` adds what the environment knows."""

    rate_per_s: float = 2.0
    request_timeout_s: float = 10.0
    max_in_flight: int = 8


@dataclass(frozen=True)
class CanaryConfig:
    """What the canary sends and how often."""

    base_url: str
    model: str
    prompt: str = "The quick brown fox"
    max_tokens: int = 8
    rate_per_s: float = 2.0
    max_in_flight: int = 8
    request_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if not (self.rate_per_s > 0 and math.isfinite(self.rate_per_s)):
            raise ConfigError(f"canary.rate_per_s: must be a positive number, got {self.rate_per_s!r}")
        if self.max_in_flight < 1:
            raise ConfigError(f"canary.max_in_flight: must be at least 1, got {self.max_in_flight!r}")
        if not self.request_timeout_s > 0:
            raise ConfigError(f"canary.request_timeout_s: must be positive, got {self.request_timeout_s!r}")
        if self.max_tokens < 1:
            raise ConfigError(f"canary.max_tokens: must be at least 1, got {self.max_tokens!r}")


def result_samples(result: StreamResult, timeout_s: float) -> list[Sample]:
    """The Samples of one finished canary request, whose timeout was ``timeout_s``.

    A failed request enters the latency percentiles at ``timeout_s`` as a censored sample
    (steady_state/censoring.py): ``canary.e2e_s`` always, and ``canary.ttft_s`` when no first
    token came (refused, timed out, broken off, or not sent at all). Left out, the percentiles
    would be those of the survivors; at its near-zero measured e2e, a refusal would flatter
    them. A failure after its first token keeps its measured TTFT. The replica the front door
    named stays on every sample, so a replica's SLO counts its failures too.
    """
    labels = {"replica": result.replica} if result.replica else {}
    samples = [Sample("canary.success", 1.0 if result.ok else 0.0, labels)]
    if result.ttft_s is not None:
        samples.append(Sample("canary.ttft_s", result.ttft_s, labels))
    elif not result.ok:
        samples.append(Sample("canary.ttft_s", timeout_s, censored_labels(labels)))
    if result.inter_token_s is not None:
        samples.append(Sample("canary.itl_s", result.inter_token_s, labels))
    if result.ok:
        samples.append(Sample("canary.e2e_s", result.e2e_s, labels))
    else:
        samples.append(Sample("canary.e2e_s", timeout_s, censored_labels(labels)))
    return samples


def phase_between_ticks(rate_per_s: float, interval_s: float) -> float:
    """Offset of the canary's first request from the first sampling tick.

    A canary request in flight while a tick reads ``/metrics`` makes both slower: the
    replica's API server answers the scrape between streamed tokens, and the sampler parses
    on the same event loop that reads the stream. Half the shorter of the two periods puts
    every request between ticks when one period divides the other (the defaults: 2/s and
    1 s put requests at 0.25 s and 0.75 s of each tick). Measured at rest on 2 cores: the
    median tick went from 79 ms (requests leaving with the tick) to 32 ms.
    """
    return min(1.0 / rate_per_s, interval_s) / 2


class CanaryProbe:
    """Sends canary requests at ``config.rate_per_s`` between :meth:`start` and :meth:`stop`.

    :meth:`read` returns the requests that finished since the previous read, and
    ``canary.oldest_wait_s``: how long the oldest request in flight has waited for its first
    token (0 when none waits). A hung engine answers nothing, so its requests only finish when
    they time out; that reading shows them waiting from the first tick on. At most
    ``config.max_in_flight`` requests are outstanding; a request due while the cap is reached
    is not sent and counts as a failure, because a front door that holds requests that long
    is failing its users.
    """

    name = "canary"
    layer = Layer.CANARY

    def __init__(self, config: CanaryConfig, client: httpx.AsyncClient | None = None) -> None:
        self.config = config
        self._client = client
        self._owns_client = client is None
        self._runner: asyncio.Task[None] | None = None
        self._in_flight: set[asyncio.Task[StreamResult]] = set()
        self._finished: list[StreamResult] = []
        # When each request in flight that has no first token yet was sent (loop time), by number.
        self._waiting: dict[int, float] = {}
        # Every replica that has answered so far, in order, with the server that first answered
        # under its name, for ``canary.routed`` and ``canary.routed_original``.
        self._replicas_seen: dict[str, str] = {}
        self.sent = 0
        self.dropped = 0

    @property
    def in_flight(self) -> int:
        """Requests sent and not finished."""
        return len(self._in_flight)

    async def start(self, phase_s: float = 0.0) -> None:
        """Begin sending requests in the background, the first ``phase_s`` from now.

        A second call is a no-op. See :func:`phase_between_ticks` for the phase to use.
        """
        if self._runner is not None:
            return
        if self._client is None:
            self._client = http.async_client()
        self._runner = asyncio.create_task(self._send_at_rate(phase_s), name="canary-rate")

    async def stop(self) -> None:
        """Stop sending and abandon requests still in flight (they are not reported)."""
        runner, self._runner = self._runner, None
        if runner is not None:
            runner.cancel()
            await asyncio.gather(runner, return_exceptions=True)
        pending = list(self._in_flight)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        self._waiting.clear()
        if self._owns_client and self._client is not None:
            await self._client.aclose()
            self._client = None

    async def read(self) -> list[Sample]:
        """Samples of every request finished since the last read (possibly none)."""
        finished, self._finished = self._finished, []
        samples = []
        for result in finished:
            samples.extend(result_samples(result, self.config.request_timeout_s))
            samples.extend(self._routed_samples(result))
        if self._runner is not None:
            now = asyncio.get_running_loop().time()
            oldest = max((now - sent for sent in self._waiting.values()), default=0.0)
            samples.append(Sample("canary.oldest_wait_s", oldest, {}))
        return samples

    def _routed_samples(self, result: StreamResult) -> list[Sample]:
        """``canary.routed{replica}``: 1 for the replica that took the request, 0 for every other
        replica seen so far, so that its mean is the share of requests routed to a replica.

        ``canary.routed_original{replica}``: the same, counting only the server that first
        answered under the replica's name. Once the platform replaced a replica (a new server
        under the same name), its mean is the share the original server still took: what a
        fault that slowed that server asks of the platform.
        """
        if not result.replica:
            return []  # refused before any replica took it: its routing is unknown
        self._replicas_seen.setdefault(result.replica, result.server)
        samples = []
        for replica, original in self._replicas_seen.items():
            took = replica == result.replica
            labels = {"replica": replica}
            samples.append(Sample("canary.routed", 1.0 if took else 0.0, labels))
            samples.append(
                Sample("canary.routed_original", 1.0 if took and result.server == original else 0.0, labels)
            )
        return samples

    async def _send_at_rate(self, phase_s: float) -> None:
        loop = asyncio.get_running_loop()
        period = 1.0 / self.config.rate_per_s
        start = loop.time() + phase_s
        await asyncio.sleep(phase_s)
        slot = 0
        while True:
            self._send_one()
            # Drift-free: slot k leaves at start + k * period. Slots missed while the event
            # loop was busy are skipped, not sent in a burst that would itself be load.
            slot = max(slot + 1, math.floor((loop.time() - start) / period) + 1)
            await asyncio.sleep(max(0.0, start + slot * period - loop.time()))

    def _send_one(self) -> None:
        if len(self._in_flight) >= self.config.max_in_flight:
            self.dropped += 1
            logger.debug("canary: %d requests in flight; counting this one as failed", len(self._in_flight))
            self._finished.append(
                StreamResult(
                    False, 0, None, 0.0, 0, "", f"not sent: {len(self._in_flight)} requests in flight"
                )
            )
            return
        assert self._client is not None
        self.sent += 1
        number = self.sent
        self._waiting[number] = asyncio.get_running_loop().time()
        task = asyncio.create_task(
            stream_completion_async(
                self._client,
                self.config.base_url,
                self.config.model,
                self.config.prompt,
                max_tokens=self.config.max_tokens,
                timeout_s=self.config.request_timeout_s,
                on_first_token=functools.partial(self._first_token, number),
            )
        )
        self._in_flight.add(task)
        task.add_done_callback(functools.partial(self._on_done, number))

    def _first_token(self, number: int) -> None:
        self._waiting.pop(number, None)

    def _on_done(self, number: int, task: asyncio.Task[StreamResult]) -> None:
        self._in_flight.discard(task)
        self._waiting.pop(number, None)
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            # stream_completion_async turns HTTP failures into results; anything else is a
            # bug worth a traceback, and still a failed request from the user's side.
            logger.error("canary request raised", exc_info=error)
            self._finished.append(
                StreamResult(False, 0, None, 0.0, 0, "", f"{type(error).__name__}: {error}")
            )
            return
        self._finished.append(task.result())
