"""The vLLM replica probe: queue, KV cache, preemptions and latency read from ``/metrics``.

``/metrics`` is parsed with prometheus_client's parser into a :class:`VllmSnapshot`. The
latency quantiles are computed over the window since an earlier snapshot from the *deltas*
of the cumulative histogram buckets, the way Prometheus' ``histogram_quantile`` over
``rate(..._bucket)`` does: the lifetime histograms a replica exposes say nothing about now.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import httpx

from inferchaos.errors import ProbeError
from inferchaos.layers import Layer
from inferchaos.primitives import http
from inferchaos.primitives.vllm_metrics import WINDOW_QUANTILES, VllmSnapshot, parse_metrics
from inferchaos.steady_state.probe_base import Sample

logger = logging.getLogger(__name__)


def window_samples(
    current: VllmSnapshot, earlier: VllmSnapshot, elapsed_s: float, labels: Mapping[str, str]
) -> list[Sample]:
    """Preemption rate and latency quantiles over the window between two snapshots.

    A quantile is left out when no request finished in the window: there is no latency to
    report, and a made-up 0 would read as "fast".
    """
    samples: list[Sample] = []
    if elapsed_s > 0:
        increase = current.preemptions_total - earlier.preemptions_total
        if increase < 0:  # the replica restarted; its counter began again at 0
            increase = current.preemptions_total
        samples.append(Sample("vllm.preemption_rate", increase / elapsed_s, dict(labels)))
    for probe, attribute, q in WINDOW_QUANTILES:
        delta = getattr(current, attribute).since(getattr(earlier, attribute))
        value = delta.quantile(q)
        if value is not None:
            samples.append(Sample(probe, value, dict(labels)))
    return samples


@dataclass(frozen=True)
class _Timed:
    at: float
    snapshot: VllmSnapshot


class VllmProbe:
    """Reads one vLLM replica: ``/metrics`` for the numbers, ``/health`` for liveness.

    ``window_s`` 0 computes rates and quantiles since the previous read; a larger value uses
    the newest earlier read at least that old (a steadier, ``rate(x[window])``-like view).
    ``locate``, where given, names the replica's base URL now: a replica re-placed on another
    node (a host of its own, with its own address) is read where it runs, from a fresh history.
    """

    layer = Layer.VLLM

    def __init__(
        self,
        replica: str,
        metrics_url: str,
        health_url: str,
        *,
        timeout_s: float = 2.0,
        window_s: float = 0.0,
        client: httpx.AsyncClient | None = None,
        clock: Callable[[], float] = time.monotonic,
        locate: Callable[[], str | None] | None = None,
    ) -> None:
        self.replica = replica
        self.name = f"vllm@{replica}"
        self.metrics_url = metrics_url
        self.health_url = health_url
        self.timeout_s = timeout_s
        self.window_s = window_s
        self._client = client
        self._owns_client = client is None
        self._clock = clock
        self._history: deque[_Timed] = deque()
        self._locate = locate

    def _follow(self) -> None:
        """Point at the replica's current server, if it moved; its counters start over there."""
        url = self._locate() if self._locate is not None else None
        if url is None:
            return
        base = url.rstrip("/")
        if f"{base}/metrics" != self.metrics_url:
            logger.info("%s: now at %s", self.replica, base)
            self.metrics_url, self.health_url = f"{base}/metrics", f"{base}/health"
            self._history.clear()

    @property
    def labels(self) -> dict[str, str]:
        """Labels on every Sample of this replica."""
        return {"replica": self.replica}

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = http.async_client(timeout=self.timeout_s)
        return self._client

    async def _get_metrics(self) -> str:
        try:
            response = await self._http().get(self.metrics_url, timeout=self.timeout_s)
        except httpx.HTTPError as e:
            raise ProbeError(f"{self.replica}: GET {self.metrics_url} failed: {type(e).__name__}: {e}") from e
        if response.status_code != 200:
            raise ProbeError(f"{self.replica}: GET {self.metrics_url} answered HTTP {response.status_code}")
        return response.text

    async def _is_healthy(self) -> bool:
        # /health answers 503 once the engine is dead; an unanswered probe is not healthy either.
        try:
            response = await self._http().get(self.health_url, timeout=self.timeout_s)
        except httpx.HTTPError as e:
            logger.info("%s: GET %s failed: %s: %s", self.replica, self.health_url, type(e).__name__, e)
            return False
        return response.status_code == 200

    async def read(self) -> list[Sample]:
        """Read the replica now; ProbeError when ``/metrics`` cannot be read or parsed."""
        self._follow()
        health = asyncio.ensure_future(self._is_healthy())
        try:
            text = await self._get_metrics()
            healthy = await health
        finally:
            health.cancel()  # a no-op once it is done; stops it when /metrics failed
        now = self._clock()
        snapshot = parse_metrics(text)
        labels = self.labels
        samples = [
            Sample("vllm.num_requests_running", snapshot.running, labels),
            Sample("vllm.num_requests_waiting", snapshot.waiting, labels),
            Sample("vllm.kv_cache_usage", snapshot.kv_cache_usage, labels),
            Sample("vllm.num_preemptions_total", snapshot.preemptions_total, labels),
            Sample("vllm.prompt_tokens_total", snapshot.prompt_tokens_total, labels),
            Sample("vllm.generation_tokens_total", snapshot.generation_tokens_total, labels),
            Sample("vllm.healthy", 1.0 if healthy else 0.0, labels),
        ]
        if snapshot.kv_capacity_tokens is not None:
            samples.append(
                Sample("vllm.kv_cache_capacity_tokens", float(snapshot.kv_capacity_tokens), labels)
            )
        base = self._remember(_Timed(now, snapshot))
        if base is not None:
            samples.extend(window_samples(snapshot, base.snapshot, now - base.at, labels))
        return samples

    def _remember(self, current: _Timed) -> _Timed | None:
        """Keep ``current`` and return the earlier read that starts the window, if any."""
        self._history.append(current)
        # Drop reads while the next-oldest is already old enough to start the window.
        while len(self._history) > 2 and self._history[1].at <= current.at - self.window_s:
            self._history.popleft()
        return self._history[0] if len(self._history) > 1 else None

    async def aclose(self) -> None:
        """Close the HTTP client if this probe created it."""
        if self._owns_client and self._client is not None:
            await self._client.aclose()
            self._client = None
