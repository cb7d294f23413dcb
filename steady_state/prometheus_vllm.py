"""The vLLM probes read from Prometheus: the same samples as steady_state/vllm.py, by PromQL.

Scraping every replica's ``/metrics`` from where the suite runs costs one request and one
parse per replica per tick, and on a real cluster the Pods are often unreachable from there.
Through Prometheus a tick is a fixed set of queries, whatever the replica count: the gauges
and counters in one selector, the latency quantiles by ``histogram_quantile`` over ``rate`` of
the buckets, grouped by the label that names a replica. One :class:`PrometheusVllmSource`
answers every replica's probe of a tick; each replica keeps its own probe, so a replica whose
scrape failed is an error row of its own (``vllm@replica-0``), as with direct scraping.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import httpx

from inferchaos.errors import ProbeError
from inferchaos.layers import Layer
from inferchaos.primitives.prometheus_api import PromSeries, finite, instant_query
from inferchaos.primitives.vllm_metrics import (
    CACHE_CONFIG,
    E2E,
    GENERATION_TOKENS,
    ITL,
    KV_USAGE,
    OLDER_NAMES,
    PREEMPTIONS,
    PROMPT_TOKENS,
    RUNNING,
    TTFT,
    WAITING,
)
from inferchaos.steady_state.base import Sample
from inferchaos.steady_state.vllm import WINDOW_QUANTILES

logger = logging.getLogger(__name__)

# Series read as they are (vLLM's name -> the probe's), the older KV name after today's.
SERIES_PROBES: Mapping[str, str] = {
    RUNNING: "vllm.num_requests_running",
    WAITING: "vllm.num_requests_waiting",
    KV_USAGE: "vllm.kv_cache_usage",
    **{old: "vllm.kv_cache_usage" for old in OLDER_NAMES[KV_USAGE]},
    PREEMPTIONS: "vllm.num_preemptions_total",
    PROMPT_TOKENS: "vllm.prompt_tokens_total",
    GENERATION_TOKENS: "vllm.generation_tokens_total",
}
HISTOGRAMS: Mapping[str, str] = {"ttft": TTFT, "itl": ITL, "e2e": E2E}
# Keys of the queries that are not latency quantiles.
SERIES, UP, HEALTH, CACHE_INFO, PREEMPTION_RATE = "series", "up", "health", "cache_info", "preemption_rate"


@dataclass(frozen=True)
class PromVllmSelector:
    """Which series are the replicas', and the label that names a replica on them.

    ``matchers`` select the replicas' ``/metrics`` targets (``job="vllm"``); ``health_matchers``
    a second job that scrapes each replica's ``/health`` (an empty 200 is a scrape with no
    samples, a 503 a failed one), whose ``up`` is ``vllm.healthy``; without it that reading
    is left out. ``window_s`` is the range of ``rate``: it must hold two scrapes at least.
    """

    replica_label: str = "replica"
    matchers: str = ""
    health_matchers: str | None = None
    window_s: float = 5.0

    def selector(self, metric: str = "", *extra: str) -> str:
        inner = ",".join(m for m in (self.matchers, *extra) if m)
        return f"{metric}{{{inner}}}" if inner else metric

    def queries(self) -> dict[str, str]:
        """Every query of one tick, by key (a quantile's key is its probe name)."""
        by = self.replica_label
        window = f"[{self.window_s:g}s]"
        names = "|".join(name.removeprefix("vllm:") for name in SERIES_PROBES)
        queries = {
            SERIES: self.selector("", f'__name__=~"vllm:({names})"'),
            # A replica that may run at several addresses (the local environment's namespaces)
            # has a target at each; it is up where any of them is.
            UP: f"max by ({by}) ({self.selector('up')})",
            CACHE_INFO: self.selector(CACHE_CONFIG),
            PREEMPTION_RATE: f"sum by ({by}) (rate({self.selector(PREEMPTIONS)}{window}))",
        }
        if self.health_matchers is not None:
            health = f"up{{{self.health_matchers}}}" if self.health_matchers else "up"
            queries[HEALTH] = f"max by ({by}) ({health})"
        for probe, attribute, q in WINDOW_QUANTILES:
            buckets = self.selector(f"{HISTOGRAMS[attribute]}_bucket")
            queries[probe] = f"histogram_quantile({q:g}, sum by ({by}, le) (rate({buckets}{window})))"
        return queries


@dataclass
class ReplicaReading:
    """What Prometheus knows of one replica now: whether its last scrape worked, and its samples."""

    scraped: bool
    samples: list[Sample] = field(default_factory=list)


def _kv_capacity(labels: Mapping[str, str]) -> float | None:
    blocks, block_size = labels.get("num_gpu_blocks", ""), labels.get("block_size", "")
    return float(int(blocks) * int(block_size)) if blocks.isdigit() and block_size.isdigit() else None


def readings_of(results: Mapping[str, list[PromSeries]], replica_label: str) -> dict[str, ReplicaReading]:
    """Per replica, the samples of one tick's query results (see :meth:`PromVllmSelector.queries`).

    A replica is one Prometheus has an ``up`` for. Quantiles without observations in the
    window (NaN) are left out, as direct scraping leaves them out: a made-up 0 reads as fast.
    """
    readings: dict[str, ReplicaReading] = {}
    for s in results.get(UP, []):
        name = s.labels.get(replica_label)
        if name:
            readings[name] = ReplicaReading(scraped=s.value == 1.0)

    def add(name: str | None, probe: str, value: float) -> None:
        reading = readings.get(name or "")
        if name and reading is not None and reading.scraped:
            reading.samples.append(Sample(probe, value, {"replica": name}))

    kv_seen: set[str] = set()
    # Today's KV name first, so a replica exposing both reads as today's.
    for s in sorted(results.get(SERIES, []), key=lambda s: s.labels.get("__name__") != KV_USAGE):
        name, metric = s.labels.get(replica_label), s.labels.get("__name__", "")
        probe = SERIES_PROBES.get(metric)
        if probe is None:
            continue
        if probe == "vllm.kv_cache_usage":
            if name in kv_seen:
                continue
            kv_seen.add(name or "")
        add(name, probe, s.value)
    for s in results.get(CACHE_INFO, []):
        capacity = _kv_capacity(s.labels)
        if capacity is not None:
            add(s.labels.get(replica_label), "vllm.kv_cache_capacity_tokens", capacity)
    for s in results.get(HEALTH, []):
        add(s.labels.get(replica_label), "vllm.healthy", 1.0 if s.value == 1.0 else 0.0)
    for s in finite(results.get(PREEMPTION_RATE, [])):
        add(s.labels.get(replica_label), "vllm.preemption_rate", s.value)
    for probe, _, _ in WINDOW_QUANTILES:
        for s in finite(results.get(probe, [])):
            add(s.labels.get(replica_label), probe, s.value)
    return readings


class PrometheusVllmSource:
    """One round of queries per tick, shared by every replica's probe of that tick.

    A round younger than ``max_age_s`` is answered again (the replicas' probes of one tick
    run together); so is its failure, so a Prometheus that is down costs one round, not one
    per replica.
    """

    def __init__(
        self,
        url: str,
        selector: PromVllmSelector,
        *,
        timeout_s: float = 2.0,
        max_age_s: float = 0.5,
        client: httpx.AsyncClient | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = url
        self.selector = selector
        self.timeout_s = timeout_s
        self.max_age_s = max_age_s
        self._queries = selector.queries()
        self._client = client
        self._owns_client = client is None
        self._clock = clock
        self._lock = asyncio.Lock()
        self._round: tuple[float, dict[str, ReplicaReading] | ProbeError] | None = None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self.timeout_s)
        return self._client

    async def readings(self) -> dict[str, ReplicaReading]:
        """Every replica's reading of this tick; ProbeError when Prometheus could not answer."""
        async with self._lock:
            if self._round is None or self._clock() - self._round[0] >= self.max_age_s:
                self._round = (self._clock(), await self._query_round())
            outcome = self._round[1]
        if isinstance(outcome, ProbeError):
            raise outcome
        return outcome

    async def _query_round(self) -> dict[str, ReplicaReading] | ProbeError:
        client = self._http()
        keys = list(self._queries)
        try:
            answers = await asyncio.gather(
                *(instant_query(client, self.url, self._queries[k], self.timeout_s) for k in keys)
            )
        except ProbeError as e:
            logger.info("a round of vLLM queries to %s failed: %s", self.url, e)
            return e
        return readings_of(dict(zip(keys, answers, strict=True)), self.selector.replica_label)

    async def aclose(self) -> None:
        """Close the HTTP client if this source created it; idempotent."""
        if self._owns_client and self._client is not None:
            await self._client.aclose()
            self._client = None


class PrometheusVllmProbe:
    """One replica's vLLM readings, from its Prometheus series."""

    layer = Layer.VLLM

    def __init__(self, replica: str, source: PrometheusVllmSource) -> None:
        self.replica = replica
        self.name = f"vllm@{replica}"
        self.source = source

    @property
    def labels(self) -> dict[str, str]:
        """Labels on every Sample of this replica, and on its error rows."""
        return {"replica": self.replica}

    async def read(self) -> list[Sample]:
        """This replica's samples; ProbeError when its last scrape failed or Prometheus has none of it."""
        reading = (await self.source.readings()).get(self.replica)
        if reading is None:
            raise ProbeError(
                f"{self.replica}: Prometheus has no {self.selector_text()} target for it (not scraped yet?)"
            )
        if not reading.scraped:
            raise ProbeError(f"{self.replica}: Prometheus' last scrape of its /metrics failed (up 0)")
        return list(reading.samples)

    def selector_text(self) -> str:
        return self.source.selector.selector("up")

    async def aclose(self) -> None:
        """Release the shared source's connections (the sampler closes every probe once)."""
        await self.source.aclose()
