"""The PromQL of the vLLM probes, for both ends: the queries a tick sends and the rules that spare them.

The probe's end (steady_state/prometheus_vllm.py) sends :meth:`PromVllmSelector.queries` once
per tick. The Prometheus end takes :meth:`PromVllmSelector.recording_rules`, which precompute
per replica, once per evaluation interval, the latency quantiles and the preemption rate that
would otherwise be ``histogram_quantile`` over ``rate`` of every bucket series of every replica
at each tick, and :func:`keep_relabel_config`, which keeps at ingestion only the vLLM series
the probes read. All of them are generated from the same constants (primitives/vllm_metrics.py),
so a rule is exactly the query it replaces. They live below both ends: the local environment's
Prometheus (environments/local/prometheus_server.py) loads them, and a cluster's operator loads
:meth:`PromVllmSelector.rules_yaml` into theirs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from inferchaos.primitives.prometheus_api import PromSeries, promql_duration
from inferchaos.primitives.vllm_metrics import (
    CACHE_CONFIG,
    GENERATION_TOKENS,
    HISTOGRAMS,
    KV_USAGE,
    OLDER_NAMES,
    PREEMPTIONS,
    PROMPT_TOKENS,
    RUNNING,
    WAITING,
    WINDOW_QUANTILES,
)

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
# The series read as they are, by how a replica's engines add up: summed, or the fullest one's.
_FULLEST: tuple[str, ...] = tuple(m for m, probe in SERIES_PROBES.items() if probe == "vllm.kv_cache_usage")
_SUMMED: tuple[str, ...] = tuple(m for m in SERIES_PROBES if m not in _FULLEST)
# Keys of the queries that are not latency quantiles (a quantile's key is its probe name).
SERIES, KV_SERIES, UP, HEALTH = "series", "kv_series", "up", "health"
CACHE_INFO, PREEMPTION_RATE = "cache_info", "preemption_rate"
# Every recorded series, in one query: their names tell them apart.
RECORDED = "recorded"
RULE_GROUP = "inferchaos_vllm"
# A focused tick's query keys: ``<key>@top``, ``<key>@bottom``, ``<key>@named`` and, from the
# outlier rules, ``recorded@outliers`` (see Focus).
PART = "@"
TOP, BOTTOM, NAMED, OUTLIER_RULES = "top", "bottom", "named", "outliers"
# How many replicas at each end of each reading a focused tick reads (the outlier rules' k).
OUTLIERS = 3
# Queries with several metric names in one answer: their extremes are taken per name.
_BY_NAME: frozenset[str] = frozenset({SERIES, KV_SERIES, RECORDED})
# What a focused tick asks of the replicas it does not name, per query: ``up`` is 1 or 0, so
# only its lowest say anything (the replicas down); the cache config's value is always 1 (its
# capacity is in labels, which no PromQL orders by), so it is read of the named replicas alone.
_EXTREMES: Mapping[str, tuple[str, ...]] = {UP: (BOTTOM,), HEALTH: (BOTTOM,), CACHE_INFO: ()}
# What a scrape of a replica keeps: the series read as they are, the cache config, and the
# buckets the quantiles are computed from. vLLM publishes some 600 series per replica.
KEPT_METRICS: tuple[str, ...] = (
    *SERIES_PROBES,
    CACHE_CONFIG,
    *(f"{histogram}_bucket" for histogram in HISTOGRAMS.values()),
)


@dataclass(frozen=True)
class RecordingRule:
    """One recording rule: ``record`` holds ``expr`` as of its last evaluation; ``key`` is the
    query whose answer it precomputes (a quantile's probe name, ``preemption_rate``, or for the
    outliers of a read-as-is series ``series`` or ``kv_series``, whose vLLM name is ``metric``)."""

    key: str
    record: str
    expr: str
    metric: str = ""


def _metric_part(name: str) -> str:
    # Prometheus reserves colons for recording rules (level:metric:operations); vLLM's own
    # ``vllm:`` prefix would read as a level, so it is spelt with an underscore in a rule's name.
    return name.replace(":", "_")


def _quantile_operation(q: float) -> str:
    return "p" + f"{q * 100:g}".replace(".", "_")


@dataclass(frozen=True)
class Focus:
    """Which replicas a tick reads at a fleet's scale: each of ``named`` (the replicas an
    experiment's SLOs name), and of every other replica only the ``outliers`` highest and lowest
    of each reading (``topk`` and ``bottomk``, per metric name), and those whose scrape failed.

    A tick then answers at most ``2 * outliers + len(named)`` replicas per reading, whatever the
    fleet's size, and an SLO's ``max`` or ``min`` over every replica is still exact: the extremes
    of each tick are read. A fleet-wide ``mean``, quantile or ``count`` is not (it needs every
    replica: steady_state/prometheus_vllm.py reads every replica below a fleet size).

    Finding the extremes costs Prometheus a pass over every replica's series (40 ms a query at
    1,000 replicas on 2 cores). Where it records :meth:`PromVllmSelector.outlier_rules`, it
    does so once per evaluation interval, and the tick reads the few series they keep.
    """

    named: frozenset[str] = frozenset()
    outliers: int = OUTLIERS

    def __post_init__(self) -> None:
        if self.outliers < 1:
            raise ValueError(f"a focus reads at least 1 outlier at each end, got {self.outliers}")


@dataclass(frozen=True)
class PromVllmSelector:
    """Which series are the replicas', and the label that names a replica on them.

    ``matchers`` select the replicas' ``/metrics`` targets (``job="vllm"``); ``health_matchers``
    a second job that scrapes each replica's ``/health`` (an empty 200 is a scrape with no
    samples, a 503 a failed one), whose ``up`` is ``vllm.healthy``; without it that reading
    is left out. ``window_s`` is the range of ``rate``: it must hold two scrapes at least.

    ``recorded`` says where the quantiles and the preemption rate come from: True, the series
    of :meth:`recording_rules` (a Prometheus that loaded them); False, ``histogram_quantile``
    computed at each tick (any Prometheus); None, whichever the Prometheus has, as its rules
    API says (steady_state/prometheus_vllm.py asks it once). :meth:`queries` reads None as False.
    """

    replica_label: str = "replica"
    matchers: str = ""
    health_matchers: str | None = None
    window_s: float = 5.0
    recorded: bool | None = None

    def selector(self, metric: str = "", *extra: str) -> str:
        inner = ",".join(m for m in (self.matchers, *extra) if m)
        return f"{metric}{{{inner}}}" if inner else metric

    def _health_up(self, *extra: str) -> str:
        """``up`` of the health job's targets (``health_matchers``), narrowed by ``extra``."""
        inner = ",".join(m for m in (self.health_matchers or "", *extra) if m)
        return f"up{{{inner}}}" if inner else "up"

    def _named(self, names: tuple[str, ...], *extra: str) -> str:
        """The replicas' series of any of the vLLM metrics ``names``."""
        alternatives = "|".join(name.removeprefix("vllm:") for name in names)
        return self.selector("", f'__name__=~"vllm:({alternatives})"', *extra)

    def recording_rules(self) -> list[RecordingRule]:
        """The rules that precompute, per replica, what a tick would otherwise compute.

        Named ``level:metric:operations`` (https://prometheus.io/docs/practices/rules/): the
        replica label, the metric (a counter's ``_total`` dropped under ``rate``), and the
        operations newest first, e.g. ``replica:vllm_time_to_first_token_seconds:p95_rate5s``.
        """
        return self._rules(())

    def _rules(self, extra: tuple[str, ...]) -> list[RecordingRule]:
        """:meth:`recording_rules`, their expressions over the replicas ``extra`` matchers select."""
        by, window = self.replica_label, promql_duration(self.window_s)
        preemptions = _metric_part(PREEMPTIONS.removesuffix("_total"))
        rules = [
            RecordingRule(
                PREEMPTION_RATE,
                f"{by}:{preemptions}:rate{window}",
                f"sum by ({by}) (rate({self.selector(PREEMPTIONS, *extra)}[{window}]))",
            )
        ]
        for probe, attribute, q in WINDOW_QUANTILES:
            histogram = HISTOGRAMS[attribute]
            buckets = self.selector(f"{histogram}_bucket", *extra)
            rules.append(
                RecordingRule(
                    probe,
                    f"{by}:{_metric_part(histogram)}:{_quantile_operation(q)}_rate{window}",
                    f"histogram_quantile({q:g}, sum by ({by}, le) (rate({buckets}[{window}])))",
                )
            )
        return rules

    def outlier_rules(self, outliers: int = OUTLIERS) -> list[RecordingRule]:
        """The rules that keep, once per evaluation interval, what a focused tick would otherwise
        rank every replica for (:class:`Focus`): per reading, the ``outliers`` replicas of the
        highest and of the lowest values (of ``up``, the lowest alone). Named like the others,
        the ranking the newest operation: ``replica:vllm_num_requests_waiting:top3``,
        ``replica:vllm_time_to_first_token_seconds:bottom3_p95_rate5s``. A quantile's outliers
        rank its recorded series, so they follow :meth:`recording_rules` in one group."""
        by, rules = self.replica_label, []
        for metric in (*_SUMMED, *_FULLEST):
            key, grouped = (SERIES, "sum") if metric in _SUMMED else (KV_SERIES, "max")
            series = f"{grouped} by ({by}) ({self.selector(metric)})"
            for end in (TOP, BOTTOM):
                record = f"{by}:{_metric_part(metric)}:{end}{outliers}"
                rules.append(RecordingRule(key, record, f"{end}k({outliers}, {series})", metric))
        ups = [(UP, "up", self.selector("up"))]
        if self.health_matchers is not None:
            ups.append((HEALTH, "health_up", self._health_up()))
        for key, name, selected in ups:
            rules.append(
                RecordingRule(
                    key, f"{by}:{name}:{BOTTOM}{outliers}", f"bottomk({outliers}, max by ({by}) ({selected}))"
                )
            )
        for rule in self.recording_rules():
            level, metric, operations = rule.record.split(":")
            for end in (TOP, BOTTOM):
                record = f"{level}:{metric}:{end}{outliers}_{operations}"
                rules.append(RecordingRule(rule.key, record, f"{end}k({outliers}, {rule.record})"))
        return rules

    def queries(self, focus: Focus | None = None) -> dict[str, str]:
        """Every query of one tick, by key (a quantile's key is its probe name; the recorded
        series come in one query, :data:`RECORDED`). With ``focus``, each per-replica query is
        split into its parts (``<key>@top``, ``@bottom``, ``@named``; :func:`merge_parts` joins
        their answers): separate queries, since ``or`` matches label sets without the metric
        name and would drop one name's extremes where another name's hold the same replica."""
        every = self._per_replica_queries(())
        if focus is None:
            return every
        named = self._per_replica_queries(self._only(focus.named)) if focus.named else {}
        queries: dict[str, str] = {}
        if self.recorded:
            # Every reading's extremes as the outlier rules keep them, in one query.
            records = "|".join(r.record for r in self.outlier_rules(focus.outliers))
            queries[f"{RECORDED}{PART}{OUTLIER_RULES}"] = '{__name__=~"' + records + '"}'
            return queries | {f"{key}{PART}{NAMED}": query for key, query in named.items()}
        for key, query in every.items():
            by = " by (__name__)" if key in _BY_NAME else ""
            for end in _EXTREMES.get(key, (TOP, BOTTOM)):
                queries[f"{key}{PART}{end}"] = f"{end}k{by} ({focus.outliers}, {query})"
            if key in named:
                queries[f"{key}{PART}{NAMED}"] = named[key]
        return queries

    def _only(self, replicas: frozenset[str]) -> tuple[str]:
        """The matcher of ``replicas`` alone (names quoted for a regex, as Prometheus anchors it)."""
        names = "|".join(sorted(re.escape(r).replace("\\", "\\\\") for r in replicas))
        return (f'{self.replica_label}=~"{names}"',)

    def _per_replica_queries(self, extra: tuple[str, ...]) -> dict[str, str]:
        """:meth:`queries` of every replica, or of those ``extra`` matchers select."""
        by = self.replica_label
        queries = {
            # Per replica as direct scraping reads its /metrics (primitives/vllm_metrics.py):
            # summed over its engines (data-parallel ranks), the KV cache the fullest engine's.
            # Two queries: `or` matches label sets without the metric name, so it would drop
            # the KV series of every replica the summed side has. Grouping by the name and the
            # replica alone also leaves out every other label (engine, instance, job,
            # model_name): at 1,000 replicas the answer shrank from 1,140 to 650 kB.
            SERIES: f"sum by (__name__, {by}) ({self._named(_SUMMED, *extra)})",
            KV_SERIES: f"max by (__name__, {by}) ({self._named(_FULLEST, *extra)})",
            # A replica that may run at several addresses (the local environment's namespaces)
            # has a target at each; it is up where any of them is.
            UP: f"max by ({by}) ({self.selector('up', *extra)})",
            # Only the two labels the capacity is made of: the info series carries some twenty
            # more, which were most of a tick's answer (250 kB at 200 replicas).
            CACHE_INFO: f"max by ({by}, num_gpu_blocks, block_size) ({self.selector(CACHE_CONFIG, *extra)})",
        }
        if self.health_matchers is not None:
            queries[HEALTH] = f"max by ({by}) ({self._health_up(*extra)})"
        rules = self.recording_rules()
        if self.recorded:
            recorded = ",".join(('__name__=~"' + "|".join(r.record for r in rules) + '"', *extra))
            queries[RECORDED] = "{" + recorded + "}"
        else:
            queries |= {r.key: r.expr for r in self._rules(extra)}
        return queries

    def rules_document(self) -> dict[str, Any]:
        """The rules file (``rule_files`` of prometheus.yml; its ``groups`` are a PrometheusRule's
        spec): :meth:`recording_rules`, then :meth:`outlier_rules`, which read them."""
        every = [*self.recording_rules(), *self.outlier_rules()]
        rules = [{"record": r.record, "expr": r.expr} for r in every]
        return {"groups": [{"name": RULE_GROUP, "rules": rules}]}

    def rules_yaml(self) -> str:
        """:meth:`rules_document` as YAML, for a cluster's Prometheus to load."""
        return yaml.safe_dump(self.rules_document(), sort_keys=False)


def keep_relabel_config() -> dict[str, Any]:
    """A ``metric_relabel_configs`` entry for the replicas' job: keep only :data:`KEPT_METRICS`.

    Prometheus anchors the regex; ``up`` and the ``scrape_*`` series are not scraped samples and stay.
    """
    return {"source_labels": ["__name__"], "regex": "|".join(KEPT_METRICS), "action": "keep"}


def merge_parts(results: Mapping[str, list[PromSeries]]) -> dict[str, list[PromSeries]]:
    """The answers of a focused tick's parts (``<key>@<part>``), joined per key; a series two
    parts answered (a named replica that is also an outlier) once. A key answered by one part
    passes as it is: Prometheus answers no label set twice in one vector, and comparing the
    label sets of every replica's series cost 26 ms a tick at 1,000 replicas."""
    parts: dict[str, list[list[PromSeries]]] = {}
    for part, series in results.items():
        parts.setdefault(part.split(PART, 1)[0], []).append(series)
    merged: dict[str, list[PromSeries]] = {}
    for key, answers in parts.items():
        if len(answers) == 1:
            merged[key] = answers[0]
            continue
        seen: set[frozenset[tuple[str, str]]] = set()
        into = merged[key] = []
        for series in answers:
            for s in series:
                identity = frozenset(s.labels.items())
                if identity not in seen:
                    seen.add(identity)
                    into.append(s)
    return merged
