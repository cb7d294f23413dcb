"""The vLLM probes read from Prometheus: the same samples as steady_state/vllm.py, by PromQL.

Scraping every replica's ``/metrics`` from where the suite runs costs one request and one
parse per replica per tick, and on a real cluster the Pods are often unreachable from there.
Through Prometheus a tick is a fixed set of queries, whatever the replica count: the gauges
and counters summed over each replica's engines (the KV cache the fullest engine's), as direct
scraping adds them up, and the latency quantiles by ``histogram_quantile`` over ``rate`` of
the buckets, all grouped by the label that names a replica. Where Prometheus has loaded the
recording rules of primitives/vllm_promql.py (the local environment's has), the quantiles and
the preemption rate are read as it recorded them, in one query: computing them at each tick
costs Prometheus a ``rate`` over every bucket series of every replica, which grows with the
replica count. One :class:`PrometheusVllmSource` answers every replica's probe of a tick; each
replica keeps its own probe, so a replica whose scrape failed is an error row of its own
(``vllm@replica-0``), as with direct scraping.

Every replica's values still make the answer grow with the fleet (186 ms at 1,000 replicas,
bench/probe_scale.py). A fleet of more than :data:`EVERY_REPLICA_UP_TO` replicas is therefore
read in focus (:class:`Focus`): the replicas its SLOs name keep their probes, and
:class:`PrometheusVllmOutliersProbe` reads the others' extremes, a fixed number per reading.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

import httpx

from inferchaos.errors import ProbeError
from inferchaos.layers import Layer
from inferchaos.primitives import http
from inferchaos.primitives.prometheus_api import PromSeries, finite, instant_query, recording_rule_names
from inferchaos.primitives.vllm_metrics import KV_USAGE, WINDOW_QUANTILES
from inferchaos.primitives.vllm_promql import (
    CACHE_INFO,
    HEALTH,
    KV_SERIES,
    PART,
    PREEMPTION_RATE,
    RECORDED,
    SERIES,
    SERIES_PROBES,
    UP,
    Focus,
    PromVllmSelector,
    RecordingRule,
    merge_parts,
)
from inferchaos.steady_state.probe_base import Sample

logger = logging.getLogger(__name__)

# A fleet of up to this many replicas is read whole at each tick (a tick took 15 ms through
# Prometheus at 50 replicas, and every replica has a line in the plots); a larger one in focus,
# its SLOs' replicas and the others' highest and lowest (Focus; bench/probe_scale.py).
EVERY_REPLICA_UP_TO = 50


@dataclass
class ReplicaReading:
    """What Prometheus knows of one replica now: whether its last scrape worked, and its samples.

    ``labels`` (``{"replica": name}``) is one mapping that all of the replica's samples share:
    at 1,000 replicas a tick builds some 17,000 samples, and a mapping each doubled the objects
    it allocates (and the garbage collections they set off). Samples are frozen and nothing
    changes their labels.
    """

    scraped: bool
    labels: dict[str, str]
    samples: list[Sample] = field(default_factory=list)


def _kv_capacity(labels: Mapping[str, str]) -> float | None:
    blocks, block_size = labels.get("num_gpu_blocks", ""), labels.get("block_size", "")
    return float(int(blocks) * int(block_size)) if blocks.isdigit() and block_size.isdigit() else None


def readings_of(results: Mapping[str, list[PromSeries]], replica_label: str) -> dict[str, ReplicaReading]:
    """Per replica, the samples of one tick's query results (see :meth:`PromVllmSelector.queries`).

    A replica is one Prometheus has an ``up`` or a sample for: a focused tick (see
    :class:`Focus`) asks ``up`` of the replicas down alone, and a series Prometheus answers is
    one its last scrape found (a failed scrape marks the target's series stale at once).
    Quantiles without observations in the window (NaN) are left out, as direct scraping leaves
    them out: a made-up 0 reads as fast.
    """
    readings: dict[str, ReplicaReading] = {}
    for s in results.get(UP, []):
        name = s.labels.get(replica_label)
        if name:
            readings[name] = ReplicaReading(scraped=s.value == 1.0, labels={"replica": name})

    def add(name: str | None, probe: str, value: float) -> None:
        if not name:
            return
        reading = readings.get(name)
        if reading is None:
            reading = readings[name] = ReplicaReading(scraped=True, labels={"replica": name})
        if reading.scraped:
            reading.samples.append(Sample(probe, value, reading.labels))

    for s in results.get(SERIES, []):
        probe = SERIES_PROBES.get(s.labels.get("__name__", ""))
        if probe is not None:
            add(s.labels.get(replica_label), probe, s.value)
    kv_seen: set[str] = set()
    # Today's KV name first, so a replica exposing both reads as today's.
    for s in sorted(results.get(KV_SERIES, []), key=lambda s: s.labels.get("__name__") != KV_USAGE):
        name = s.labels.get(replica_label)
        if name not in kv_seen:
            kv_seen.add(name or "")
            add(name, "vllm.kv_cache_usage", s.value)
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


def by_rule(recorded: list[PromSeries], rules: list[RecordingRule]) -> dict[str, list[PromSeries]]:
    """The recorded series of one query, split by the query each rule stands for (see
    :func:`readings_of`), labelled as that query answers: an outlier rule's series of a vLLM
    series named as it, every other without a name. A replica then reads once when both a
    named query and an outlier rule answer it (:func:`merge_parts`)."""
    by_record = {r.record: r for r in rules}
    split: dict[str, list[PromSeries]] = {}
    for s in recorded:
        rule = by_record.get(s.labels.get("__name__", ""))
        if rule is not None:
            labels = {k: v for k, v in s.labels.items() if k != "__name__"}
            if rule.metric:
                labels["__name__"] = rule.metric
            split.setdefault(rule.key, []).append(PromSeries(labels, s.value))
    return split


class PrometheusVllmSource:
    """One round of queries per tick, shared by every replica's probe of that tick.

    A round answered less than ``max_age_s`` ago is answered again (the replicas' probes of one
    tick run together), however long it took; so is its failure, so a Prometheus that is down
    costs one round, not one per replica. A selector whose ``recorded`` is None reads the
    recorded series where Prometheus evaluates every rule of
    :meth:`PromVllmSelector.recording_rules` (by name), else computes them; decided once, at
    the first round Prometheus answers. With ``focus``, a round reads the replicas it names and
    the others' extremes (:class:`Focus`), not every replica.
    """

    def __init__(
        self,
        url: str,
        selector: PromVllmSelector,
        *,
        focus: Focus | None = None,
        timeout_s: float = 2.0,
        max_age_s: float = 0.5,
        client: httpx.AsyncClient | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = url
        self.selector = selector
        self.focus = focus
        self.timeout_s = timeout_s
        self.max_age_s = max_age_s
        self._queries = selector.queries(focus) if selector.recorded is not None else None
        # The rules the recorded route reads: a focused tick's outliers too.
        self._rules = selector.recording_rules()
        if focus is not None:
            self._rules += selector.outlier_rules(focus.outliers)
        self._client = client
        self._owns_client = client is None
        self._clock = clock
        self._lock = asyncio.Lock()
        self._round: tuple[float, dict[str, ReplicaReading] | ProbeError] | None = None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = http.async_client(timeout=self.timeout_s)
        return self._client

    async def readings(self) -> dict[str, ReplicaReading]:
        """Every replica's reading of this tick; ProbeError when Prometheus could not answer."""
        async with self._lock:
            if self._round is None or self._clock() - self._round[0] >= self.max_age_s:
                outcome = await self._query_round()
                # Aged from its answer, not from its asking: a round slower than max_age_s (one
                # of 1,000 replicas took 0.4-1 s on 2 cores) must still serve every probe of the
                # tick waiting on it, not send each of them another round (bench/probe_scale.py).
                self._round = (self._clock(), outcome)
            outcome = self._round[1]
        if isinstance(outcome, ProbeError):
            raise outcome
        return outcome

    async def _round_queries(self) -> dict[str, str]:
        """The queries of this round: the selector's, or those Prometheus' rules allow."""
        if self._queries is not None:
            return self._queries
        computed = replace(self.selector, recorded=False).queries(self.focus)
        try:
            loaded = await recording_rule_names(self._http(), self.url, self.timeout_s)
        except ProbeError as e:
            logger.info("could not list the recording rules of %s (asking again next round): %s", self.url, e)
            return computed
        missing = sorted({r.record for r in self._rules} - loaded)
        if missing:
            logger.info(
                "%s does not record %s: the vLLM quantiles are computed (a focus's outliers ranked) at each tick",
                self.url,
                ", ".join(missing),
            )
            self._queries = computed
        else:
            logger.info("%s records the vLLM quantiles (%s): reading them", self.url, self._rules[0].record)
            self._queries = replace(self.selector, recorded=True).queries(self.focus)
        return self._queries

    async def _query_round(self) -> dict[str, ReplicaReading] | ProbeError:
        client = self._http()
        queries = await self._round_queries()
        keys = list(queries)
        try:
            answers = await asyncio.gather(
                *(instant_query(client, self.url, queries[k], self.timeout_s) for k in keys)
            )
        except ProbeError as e:
            logger.info("a round of vLLM queries to %s failed: %s", self.url, e)
            return e
        parts: dict[str, list[PromSeries]] = {}
        for part, series in zip(keys, answers, strict=True):
            key, _, end = part.partition(PART)
            if key == RECORDED:
                # Each recorded series as the answer of the query its rule stands for, kept
                # apart by its part until the parts are merged (a named replica may be an outlier).
                parts |= {f"{k}{PART}{end}": split for k, split in by_rule(series, self._rules).items()}
            else:
                parts[part] = series
        return readings_of(merge_parts(parts), self.selector.replica_label)

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


class PrometheusVllmOutliersProbe:
    """The replicas a focused tick did not name, as far as it read them: their extremes.

    Each replica's samples carry its own ``replica`` label, as a replica's probe writes them. A
    replica whose last scrape failed reads ``vllm.healthy`` 0, as the error row of a replica's
    own probe does (steady_state/evaluation.py counts a failed read of it as 0).
    """

    layer = Layer.VLLM
    name = "vllm@outliers"

    def __init__(self, source: PrometheusVllmSource, named: frozenset[str]) -> None:
        self.source = source
        self.named = named

    @property
    def labels(self) -> dict[str, str]:
        """No replica's: its samples each carry their own."""
        return {}

    async def read(self) -> list[Sample]:
        """The samples of every replica read this tick but not named; ProbeError when Prometheus could not answer."""
        samples: list[Sample] = []
        for replica, reading in (await self.source.readings()).items():
            if replica in self.named:
                continue
            if reading.scraped:
                samples += reading.samples
            else:
                samples.append(Sample("vllm.healthy", 0.0, reading.labels))
        return samples

    async def aclose(self) -> None:
        """Release the shared source's connections."""
        await self.source.aclose()
