"""Parsing a vLLM v1 replica's /metrics text into the numbers the probes and faults read."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from inferchaos.errors import ProbeError

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_USAGE = "vllm:kv_cache_usage_perc"
# vLLM renames metrics between versions; each older name still reads as today's. Before v1,
# the KV cache's fill was ``vllm:gpu_cache_usage_perc`` (the same 0-1 fraction).
OLDER_NAMES: Mapping[str, tuple[str, ...]] = {KV_USAGE: ("vllm:gpu_cache_usage_perc",)}
PREEMPTIONS = "vllm:num_preemptions_total"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
GENERATION_TOKENS = "vllm:generation_tokens_total"
TTFT = "vllm:time_to_first_token_seconds"
ITL = "vllm:inter_token_latency_seconds"
E2E = "vllm:e2e_request_latency_seconds"
CACHE_CONFIG = "vllm:cache_config_info"
# The latency histograms, by their VllmSnapshot attribute.
HISTOGRAMS: Mapping[str, str] = {"ttft": TTFT, "itl": ITL, "e2e": E2E}
# The latency quantiles every vLLM probe emits per window: (probe name, histogram attribute,
# quantile). The one list: direct scraping computes them, the PromQL probe queries them, and
# a Prometheus' recording rules precompute them (primitives/vllm_promql.py).
WINDOW_QUANTILES: tuple[tuple[str, str, float], ...] = (
    ("vllm.ttft_p50_s", "ttft", 0.50),
    ("vllm.ttft_p95_s", "ttft", 0.95),
    ("vllm.ttft_p99_s", "ttft", 0.99),
    ("vllm.itl_p50_s", "itl", 0.50),
    ("vllm.itl_p95_s", "itl", 0.95),
    ("vllm.e2e_p50_s", "e2e", 0.50),
    ("vllm.e2e_p95_s", "e2e", 0.95),
)
# The families parse_metrics reads. A replica exposes some 60 families (~50 KB); parsing
# only these makes a read about 4x cheaper (6.6 -> 1.5 ms measured), which matters because
# every replica is parsed on the sampler's event loop once per tick.
READ_FAMILIES = frozenset(
    {
        RUNNING,
        WAITING,
        KV_USAGE,
        "vllm:num_preemptions",
        "vllm:prompt_tokens",
        "vllm:generation_tokens",
        TTFT,
        ITL,
        E2E,
        CACHE_CONFIG,
        *(old for olds in OLDER_NAMES.values() for old in olds),
    }
)
_SAMPLE_SUFFIXES = ("_bucket", "_count", "_sum", "_total")  # _created is a family of its own
# The samples parse_metrics cannot do without (a histogram by its buckets), by today's name.
NEEDED_SAMPLES: tuple[str, ...] = (
    RUNNING,
    WAITING,
    KV_USAGE,
    PREEMPTIONS,
    PROMPT_TOKENS,
    GENERATION_TOKENS,
    f"{TTFT}_bucket",
    f"{ITL}_bucket",
    f"{E2E}_bucket",
)


@dataclass(frozen=True)
class Histogram:
    """A cumulative histogram: ``(upper bound, count of observations <= bound)``, +Inf last."""

    buckets: tuple[tuple[float, float], ...]

    @property
    def count(self) -> float:
        """Observations in total (the +Inf bucket)."""
        return self.buckets[-1][1] if self.buckets else 0.0

    def since(self, earlier: Histogram) -> Histogram:
        """Observations made after ``earlier`` was taken, bucket by bucket.

        A smaller total than before means the replica restarted and counts from zero, so
        everything it has now is new.
        """
        before = dict(earlier.buckets)
        if self.count < earlier.count or set(before) != {le for le, _ in self.buckets}:
            return self
        return Histogram(tuple((le, max(0.0, n - before[le])) for le, n in self.buckets))

    def quantile(self, q: float) -> float | None:
        """See :func:`histogram_quantile`."""
        return histogram_quantile(q, self.buckets)


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """The q-quantile of a cumulative histogram, as Prometheus ``histogram_quantile`` computes it.

    The observation of rank ``q * total`` lies in the first bucket whose cumulative count
    reaches it; its value is interpolated linearly between that bucket's bounds (the lower
    bound of the first bucket is 0). Ranks in the +Inf bucket answer the highest finite
    bound. None when the histogram holds no observations.
    """
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile must be within [0, 1], got {q}")
    ordered = sorted(buckets)
    if not ordered or ordered[-1][1] <= 0:
        return None
    total = ordered[-1][1]
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for index, (upper_bound, cumulative) in enumerate(ordered):
        if cumulative >= rank and cumulative > lower_count:
            if math.isinf(upper_bound):
                return ordered[index - 1][0] if index > 0 else None
            if index == 0 and upper_bound <= 0:
                return upper_bound
            fraction = (rank - lower_count) / (cumulative - lower_count)
            return lower_bound + (upper_bound - lower_bound) * fraction
        lower_bound, lower_count = upper_bound, cumulative
    return ordered[-1][0]


@dataclass(frozen=True)
class VllmSnapshot:
    """One read of a replica's ``/metrics``.

    Gauges and counters are summed over engines (data-parallel ranks); KV-cache usage is
    the fullest engine's, because one full engine already queues and preempts.
    """

    running: float
    waiting: float
    kv_cache_usage: float
    preemptions_total: float
    prompt_tokens_total: float
    generation_tokens_total: float
    ttft: Histogram
    itl: Histogram
    e2e: Histogram
    kv_capacity_tokens: int | None


def _family_of(line: str) -> str:
    """The metric family a line of text exposition belongs to ("" for other comments)."""
    if line.startswith("#"):
        parts = line.split(" ", 3)  # "# HELP name ..." / "# TYPE name type"
        if len(parts) < 3 or parts[1] not in ("HELP", "TYPE"):
            return ""
        name = parts[2]  # a counter's may end in _total, as its samples do
    else:
        name = line.split("{", 1)[0].split(" ", 1)[0]
    if name in READ_FAMILIES:
        return name
    for suffix in _SAMPLE_SUFFIXES:
        if name.endswith(suffix) and name[: -len(suffix)] in READ_FAMILIES:
            return name[: -len(suffix)]
    return name


def read_families_only(text: str) -> str:
    """The lines of ``text`` that belong to :data:`READ_FAMILIES`, still valid exposition.

    Only whole lines are dropped; the families kept are parsed by prometheus_client as before.
    """
    return "".join(line + "\n" for line in text.splitlines() if _family_of(line) in READ_FAMILIES)


def _samples_by_name(text: str) -> dict[str, list[tuple[Mapping[str, str], float]]]:
    by_name: dict[str, list[tuple[Mapping[str, str], float]]] = {}
    # When nothing is left (an error page, another exporter), the whole text is parsed so the
    # error says what it is: not exposition at all, or exposition without vLLM's families.
    for family in text_string_to_metric_families(read_families_only(text) or text):
        for sample in family.samples:
            by_name.setdefault(sample.name, []).append((sample.labels, sample.value))
    return by_name


def names_of(name: str) -> tuple[str, ...]:
    """``name`` and the older names vLLM exposed the same metric under, newest first."""
    return (name, *OLDER_NAMES.get(name, ()))


def _exposed_name(by_name: Mapping[str, object], name: str) -> str | None:
    return next((n for n in names_of(name) if n in by_name), None)


def _required(by_name: Mapping[str, list[tuple[Mapping[str, str], float]]], name: str) -> list[float]:
    exposed = _exposed_name(by_name, name)
    if exposed is None:
        older = OLDER_NAMES.get(name)
        nor = f" (nor {', '.join(older)})" if older else ""
        raise ProbeError(f"/metrics has no {name}{nor}: not a vLLM v1 replica?")
    return [value for _, value in by_name[exposed]]


@dataclass(frozen=True)
class ExposedNames:
    """Under which name a replica exposes each of :data:`NEEDED_SAMPLES`."""

    # Today's name -> the name found (today's or an older one); None when neither is there.
    names: Mapping[str, str | None]

    @property
    def missing(self) -> list[str]:
        """Needed samples exposed under no name parse_metrics reads."""
        return [name for name, found in self.names.items() if found is None]

    @property
    def renamed(self) -> dict[str, str]:
        """Needed samples found under an older name: today's name -> the older one."""
        return {name: found for name, found in self.names.items() if found not in (None, name)}


def exposed_names(text: str) -> ExposedNames:
    """Which of the samples parse_metrics needs ``text`` carries, and under which names.

    A preflight reads this rather than parse_metrics' first complaint, so that it can say
    everything that is missing at once. ProbeError when ``text`` is not text exposition.
    """
    try:
        by_name = _samples_by_name(text)
    except ValueError as e:
        raise ProbeError(f"/metrics is not Prometheus text exposition: {e}") from e
    return ExposedNames({name: _exposed_name(by_name, name) for name in NEEDED_SAMPLES})


def _histogram(by_name: Mapping[str, list[tuple[Mapping[str, str], float]]], name: str) -> Histogram:
    totals: dict[float, float] = {}
    exposed = _exposed_name(by_name, f"{name}_bucket") or f"{name}_bucket"
    for labels, value in by_name.get(exposed, []):
        le = float(labels["le"])
        totals[le] = totals.get(le, 0.0) + value
    if not totals:
        raise ProbeError(f"/metrics has no {name}_bucket: not a vLLM v1 replica?")
    return Histogram(tuple(sorted(totals.items())))


def _kv_capacity_tokens(entries: Iterable[tuple[Mapping[str, str], float]]) -> int | None:
    # The config labels are strings such as "4096" or "None"; the explicit token size wins,
    # blocks * block size is what older versions let us work out.
    for labels, _ in entries:
        size = labels.get("kv_cache_size_tokens", "")
        if size.isdigit():
            return int(size)
        blocks, block_size = labels.get("num_gpu_blocks", ""), labels.get("block_size", "")
        if blocks.isdigit() and block_size.isdigit():
            return int(blocks) * int(block_size)
    return None


def parse_metrics(text: str) -> VllmSnapshot:
    """Parse a replica's ``/metrics`` text; ProbeError when it is not vLLM v1 exposition."""
    try:
        by_name = _samples_by_name(text)
    except ValueError as e:
        raise ProbeError(f"/metrics is not Prometheus text exposition: {e}") from e
    return VllmSnapshot(
        running=sum(_required(by_name, RUNNING)),
        waiting=sum(_required(by_name, WAITING)),
        kv_cache_usage=max(_required(by_name, KV_USAGE)),
        preemptions_total=sum(_required(by_name, PREEMPTIONS)),
        prompt_tokens_total=sum(_required(by_name, PROMPT_TOKENS)),
        generation_tokens_total=sum(_required(by_name, GENERATION_TOKENS)),
        ttft=_histogram(by_name, TTFT),
        itl=_histogram(by_name, ITL),
        e2e=_histogram(by_name, E2E),
        kv_capacity_tokens=_kv_capacity_tokens(by_name.get(CACHE_CONFIG, [])),
    )
