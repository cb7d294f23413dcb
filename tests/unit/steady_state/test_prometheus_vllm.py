"""The vLLM probes through Prometheus: the PromQL they send and how they read its answers.

The answers are in the shape of Prometheus' HTTP API (``/api/v1/query``); the real server, scraping
real replicas, is tests/integration/test_prometheus_backend.py's.
"""

from __future__ import annotations

import asyncio
import math
import re
import shutil
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import TestServer

from inferchaos.errors import ProbeError
from inferchaos.primitives.env_status import (
    EnvStatus,
    FrontDoorStatus,
    ModelStatus,
    PrometheusStatus,
    RayStatus,
    ReplicaStatus,
    VllmStatus,
)
from inferchaos.primitives.processes import free_port
from inferchaos.primitives.prometheus_api import PromSeries, vector_of
from inferchaos.primitives.vllm_promql import RECORDED, RULE_GROUP, Focus, merge_parts
from inferchaos.run.probe_set import vllm_probes
from inferchaos.steady_state.probe_base import Sample
from inferchaos.steady_state.prometheus_vllm import (
    CACHE_INFO,
    EVERY_REPLICA_UP_TO,
    HEALTH,
    KV_SERIES,
    PREEMPTION_RATE,
    SERIES,
    UP,
    PrometheusVllmOutliersProbe,
    PrometheusVllmProbe,
    PrometheusVllmSource,
    PromVllmSelector,
    by_rule,
    readings_of,
)
from inferchaos.steady_state.vllm import WINDOW_QUANTILES, VllmProbe
from tests.skips import needs_package

LOCAL = PromVllmSelector(replica_label="replica", matchers='job="vllm"', health_matchers='job="vllm_health"')


def _vector(*elements: tuple[dict[str, str], str]) -> dict[str, object]:
    return {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [{"metric": m, "value": [1796000000.5, v]} for m, v in elements],
        },
    }


def test_an_instant_vector_reads_as_labelled_numbers_nan_included() -> None:
    series = vector_of(_vector(({"replica": "replica-0"}, "0.25"), ({"replica": "replica-1"}, "NaN")), "q")
    assert series[0] == PromSeries({"replica": "replica-0"}, 0.25)
    assert math.isnan(series[1].value)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (
            {"status": "error", "errorType": "bad_data", "error": "parse error at char 3"},
            "bad_data: parse error",
        ),
        (
            {"status": "success", "data": {"resultType": "matrix", "result": []}},
            "a matrix, not an instant vector",
        ),
        (
            {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}}]}},
            "malformed sample",
        ),
    ],
)
def test_an_answer_that_is_not_an_instant_vector_is_a_probe_error(
    payload: dict[str, object], message: str
) -> None:
    with pytest.raises(ProbeError, match=message):
        vector_of(payload, "up")


def test_one_tick_is_a_fixed_set_of_queries_grouped_by_the_replica_label() -> None:
    queries = LOCAL.queries()
    # A replica with a target at each worker's address (the netns environment) is up where any is.
    assert queries[UP] == 'max by (replica) (up{job="vllm"})'
    assert queries[HEALTH] == 'max by (replica) (up{job="vllm_health"})'
    # Per replica, as direct scraping adds up a replica's engines: counts summed, the KV cache
    # the fullest engine's (tests/integration/test_prometheus_engines.py, against the real server).
    summed, fullest = queries[SERIES], queries[KV_SERIES]
    assert summed.startswith('sum by (__name__, replica) ({job="vllm",__name__=~"vllm:(num_requests_running|')
    assert "kv_cache" not in summed
    assert fullest == (
        'max by (__name__, replica) ({job="vllm",__name__=~"vllm:(kv_cache_usage_perc|gpu_cache_usage_perc)"})'
    ), "vLLM's older KV name is read too"
    assert queries[PREEMPTION_RATE] == 'sum by (replica) (rate(vllm:num_preemptions_total{job="vllm"}[5s]))'
    assert queries["vllm.ttft_p95_s"] == (
        "histogram_quantile(0.95, sum by (replica, le) "
        '(rate(vllm:time_to_first_token_seconds_bucket{job="vllm"}[5s])))'
    )
    assert set(queries) == {
        SERIES,
        KV_SERIES,
        UP,
        HEALTH,
        CACHE_INFO,
        PREEMPTION_RATE,
        *(p for p, _, _ in WINDOW_QUANTILES),
    }
    # A cluster's Prometheus with no matchers and no health job: bare selectors, no health query.
    bare = PromVllmSelector(replica_label="pod").queries()
    assert bare[UP] == "max by (pod) (up)" and HEALTH not in bare
    assert bare[CACHE_INFO] == "max by (pod, num_gpu_blocks, block_size) (vllm:cache_config_info)"


def _results() -> dict[str, list[PromSeries]]:
    r0, r1 = {"replica": "replica-0"}, {"replica": "replica-1"}
    results = {
        UP: [PromSeries(r0, 1.0), PromSeries(r1, 1.0)],
        HEALTH: [PromSeries(r0, 1.0), PromSeries(r1, 0.0)],
        SERIES: [
            PromSeries({**r0, "__name__": "vllm:num_requests_waiting"}, 3.0),
            PromSeries({**r1, "__name__": "vllm:generation_tokens_total"}, 1234.0),
        ],
        KV_SERIES: [
            PromSeries({**r0, "__name__": "vllm:gpu_cache_usage_perc"}, 0.1),
            PromSeries({**r0, "__name__": "vllm:kv_cache_usage_perc"}, 0.9),
            PromSeries({**r1, "__name__": "vllm:gpu_cache_usage_perc"}, 0.4),
        ],
        CACHE_INFO: [
            PromSeries(
                {**r0, "__name__": "vllm:cache_config_info", "num_gpu_blocks": "32", "block_size": "128"}, 1.0
            )
        ],
        PREEMPTION_RATE: [PromSeries(r0, 0.5)],
        "vllm.ttft_p95_s": [PromSeries(r0, 0.8), PromSeries(r1, math.nan)],
    }
    return results


def _values(samples: list[Sample]) -> dict[str, float]:
    return {s.probe: s.value for s in samples}


def test_each_replica_reads_the_samples_direct_scraping_gives() -> None:
    readings = readings_of(_results(), "replica")
    r0 = _values(readings["replica-0"].samples)
    assert r0 == {
        "vllm.num_requests_waiting": 3.0,
        "vllm.kv_cache_usage": 0.9,  # today's name wins over the older one on the same replica
        "vllm.kv_cache_capacity_tokens": 4096.0,
        "vllm.healthy": 1.0,
        "vllm.preemption_rate": 0.5,
        "vllm.ttft_p95_s": 0.8,
    }
    assert all(s.labels == {"replica": "replica-0"} for s in readings["replica-0"].samples)
    r1 = _values(readings["replica-1"].samples)
    # An older vLLM's KV name; /health answering 503 (its job's up 0); a window without any first
    # token is no TTFT at all, not a fast one.
    assert r1 == {"vllm.kv_cache_usage": 0.4, "vllm.generation_tokens_total": 1234.0, "vllm.healthy": 0.0}


def test_a_replica_whose_scrape_failed_has_no_samples_and_one_answered_without_up_is_read() -> None:
    results = _results()
    results[UP] = [PromSeries({"replica": "replica-0"}, 0.0)]
    readings = readings_of(results, "replica")
    assert readings["replica-0"].scraped is False and readings["replica-0"].samples == []
    # A focused tick asks `up` of the replicas down alone: a series answered is one Prometheus'
    # last scrape found (a failed scrape marks the target's series stale at once).
    assert readings["replica-1"].scraped is True
    assert _values(readings["replica-1"].samples)["vllm.kv_cache_usage"] == 0.4


def test_a_prometheus_that_does_not_answer_is_an_error_row_of_every_replica_not_a_silent_zero() -> None:
    source = PrometheusVllmSource(
        f"http://127.0.0.1:{free_port()}", PromVllmSelector(replica_label="replica")
    )

    async def read() -> None:
        try:
            for name in ("replica-0", "replica-1"):
                with pytest.raises(ProbeError, match="did not answer"):
                    await PrometheusVllmProbe(name, source).read()
        finally:
            await source.aclose()

    asyncio.run(read())


def _status(prometheus: PrometheusStatus | None, names: tuple[str, ...] = ("vllm-b", "vllm-a")) -> EnvStatus:
    replicas = [
        ReplicaStatus(
            name,
            f"http://10.0.{i // 250}.{i % 250}:8000",
            f"http://10.0.{i // 250}.{i % 250}:8000/metrics",
            "n",
            True,
        )
        for i, name in enumerate(names)
    ]
    return EnvStatus(
        "cluster",
        True,
        RayStatus("r:6379", "http://d"),
        VllmStatus(replicas=replicas),
        FrontDoorStatus("http://fd", True),
        ModelStatus("m", 128),
        prometheus=prometheus,
    )


def test_an_environment_with_prometheus_reads_every_replica_through_one_source_with_its_labels() -> None:
    direct = vllm_probes(_status(None))
    assert [type(p) for p in direct] == [VllmProbe, VllmProbe]
    assert [p.name for p in direct] == ["vllm@vllm-a", "vllm@vllm-b"]
    settings = PrometheusStatus(
        url="http://prom:9090", replica_label="pod", matchers='namespace="llm"', rate_window_s=60
    )
    through = vllm_probes(_status(settings))
    assert all(isinstance(p, PrometheusVllmProbe) for p in through)
    assert [p.name for p in through] == ["vllm@vllm-a", "vllm@vllm-b"]
    sources = {id(p.source) for p in through if isinstance(p, PrometheusVllmProbe)}
    assert len(sources) == 1, "one round of queries per tick, whatever the replica count"
    [probe, _] = [p for p in through if isinstance(p, PrometheusVllmProbe)]
    assert probe.source.url == "http://prom:9090"
    assert probe.source.selector.queries()["vllm.ttft_p95_s"] == (
        "histogram_quantile(0.95, sum by (pod, le) "
        '(rate(vllm:time_to_first_token_seconds_bucket{namespace="llm"}[60s])))'
    )


def test_a_focused_tick_asks_each_readings_extremes_and_the_named_replicas_whatever_the_fleet() -> None:
    # A Prometheus without the outlier rules ranks every replica at each tick.
    every = LOCAL.queries()
    focused = LOCAL.queries(Focus(frozenset({"replica-7"}), outliers=3))
    # Per metric name: `or` would match across names and drop one name's extremes.
    assert focused["series@top"] == f"topk by (__name__) (3, {every[SERIES]})"
    assert focused["series@bottom"] == f"bottomk by (__name__) (3, {every[SERIES]})"
    assert focused["vllm.ttft_p95_s@top"] == f"topk (3, {every['vllm.ttft_p95_s']})"
    # `up` is 1 or 0: only its lowest say anything, the replicas down.
    assert focused["up@bottom"] == 'bottomk (3, max by (replica) (up{job="vllm"}))'
    assert "up@top" not in focused and "health@top" not in focused
    # The named replica's own queries are every replica's, narrowed to it.
    assert focused["series@named"] == every[SERIES].replace('"})', '",replica=~"replica\\\\-7"})')
    assert focused["health@named"] == 'max by (replica) (up{job="vllm_health",replica=~"replica\\\\-7"})'
    # The capacity is in the info series' labels, which nothing orders by: the named replicas' only.
    assert [k for k in focused if k.startswith(CACHE_INFO)] == ["cache_info@named"]
    alone = LOCAL.queries(Focus(outliers=2))
    assert not any(k.endswith("@named") for k in alone), "no replica named, none asked by name"
    with pytest.raises(ValueError, match="at least 1 outlier"):
        Focus(outliers=0)


def test_a_prometheus_with_the_outlier_rules_is_read_from_them_in_one_query_beside_the_named() -> None:
    recording = replace(LOCAL, recorded=True)
    focused = recording.queries(Focus(frozenset({"replica-7"})))
    outliers = {r.record for r in recording.outlier_rules()}
    match = re.fullmatch(r'\{__name__=~"(.*)"\}', focused["recorded@outliers"])
    assert match is not None and set(match.group(1).split("|")) == outliers
    assert focused["recorded@named"].endswith(',replica=~"replica\\\\-7"}')
    assert set(focused) == {"recorded@outliers", *(f"{k}@named" for k in recording.queries())}
    assert not any("topk" in q or "bottomk" in q for q in focused.values()), "nothing ranked at the tick"
    rules = {r.record: r for r in recording.outlier_rules()}
    assert rules["replica:vllm_num_requests_waiting:top3"].expr == (
        'topk(3, sum by (replica) (vllm:num_requests_waiting{job="vllm"}))'
    )
    assert rules["replica:up:bottom3"].expr == 'bottomk(3, max by (replica) (up{job="vllm"}))'
    assert "replica:up:top3" not in rules
    # A quantile's outliers rank its recorded series, and read as it does.
    p95 = rules["replica:vllm_time_to_first_token_seconds:top3_p95_rate5s"]
    assert p95.expr == "topk(3, replica:vllm_time_to_first_token_seconds:p95_rate5s)"
    recorded = {"__name__": p95.record, "replica": "replica-2"}
    waiting = {"__name__": "replica:vllm_num_requests_waiting:top3", "replica": "replica-2"}
    split = by_rule([PromSeries(recorded, 0.9), PromSeries(waiting, 4.0)], recording.outlier_rules())
    assert split == {
        "vllm.ttft_p95_s": [PromSeries({"replica": "replica-2"}, 0.9)],
        SERIES: [PromSeries({"replica": "replica-2", "__name__": "vllm:num_requests_waiting"}, 4.0)],
    }


def test_the_parts_of_a_focused_tick_join_per_query_a_series_answered_twice_once() -> None:
    r7 = {"__name__": "vllm:num_requests_waiting", "replica": "replica-7"}
    r2 = {"__name__": "vllm:num_requests_waiting", "replica": "replica-2"}
    merged = merge_parts(
        {
            "series@top": [PromSeries(r7, 9.0), PromSeries(r2, 4.0)],
            "series@named": [PromSeries(r7, 9.0)],
            "up@bottom": [PromSeries({"replica": "replica-7"}, 1.0)],
            UP: [PromSeries({"replica": "replica-0"}, 1.0)],
        }
    )
    assert merged[SERIES] == [PromSeries(r7, 9.0), PromSeries(r2, 4.0)]
    assert merged[UP] == [
        PromSeries({"replica": "replica-7"}, 1.0),
        PromSeries({"replica": "replica-0"}, 1.0),
    ]


def test_a_fleet_larger_than_the_whole_read_is_read_in_focus_named_replicas_each() -> None:
    settings = PrometheusStatus(url="http://prom:9090", replica_label="pod")
    small = tuple(f"vllm-{n}" for n in range(EVERY_REPLICA_UP_TO))
    assert [type(p) for p in vllm_probes(_status(settings, small))] == [PrometheusVllmProbe] * len(small)
    large = tuple(f"vllm-{n}" for n in range(EVERY_REPLICA_UP_TO + 1))
    probes = vllm_probes(_status(settings, large), named=frozenset({"vllm-3", "vllm-12", "gone"}))
    assert [p.name for p in probes] == ["vllm@vllm-12", "vllm@vllm-3", "vllm@outliers"]
    outliers = probes[-1]
    assert isinstance(outliers, PrometheusVllmOutliersProbe)
    assert outliers.named == frozenset({"vllm-3", "vllm-12"}), "a name no replica has is no replica's"
    assert outliers.source.focus is not None and outliers.source.focus.named == outliers.named
    assert all(isinstance(p, PrometheusVllmProbe) and p.source is outliers.source for p in probes[:-1])


def test_every_reading_a_tick_computes_has_a_rule_named_level_metric_operations() -> None:
    rules = LOCAL.recording_rules()
    computed = LOCAL.queries()
    assert {r.key for r in rules} == {PREEMPTION_RATE, *(p for p, _, _ in WINDOW_QUANTILES)}
    assert len({r.record for r in rules}) == len(rules), "one series per rule"
    for rule in rules:
        # A rule is exactly the query it spares a tick, so both routes read the same number.
        assert rule.expr == computed[rule.key]
        # level:metric:operations: the label the rule keeps, vLLM's metric, the operations
        # newest first (a quantile of a rate, or the rate).
        assert re.fullmatch(r"replica:vllm_[a-z0-9_]+:(p\d+(_\d+)?_)?rate5s", rule.record), rule.record
    by_key = {r.key: r.record for r in rules}
    assert by_key["vllm.ttft_p95_s"] == "replica:vllm_time_to_first_token_seconds:p95_rate5s"
    # A counter under rate() drops its _total.
    assert by_key[PREEMPTION_RATE] == "replica:vllm_num_preemptions:rate5s"
    # A cluster's replica label and window name its rules; a fraction of a second is in ms
    # (a name holds no dot, and PromQL refuses "2.5s").
    cluster = PromVllmSelector(replica_label="pod", matchers='namespace="llm"', window_s=2.5)
    assert {r.key: r.record for r in cluster.recording_rules()}["vllm.itl_p50_s"] == (
        "pod:vllm_inter_token_latency_seconds:p50_rate2500ms"
    )
    assert "[2500ms]" in cluster.queries()["vllm.itl_p50_s"]


def test_the_rules_file_is_one_group_holding_every_rule() -> None:
    document = yaml.safe_load(LOCAL.rules_yaml())
    [group] = document["groups"]
    assert group["name"] == RULE_GROUP
    every = [*LOCAL.recording_rules(), *LOCAL.outlier_rules()]
    assert group["rules"] == [{"record": r.record, "expr": r.expr} for r in every]
    assert len({r.record for r in every}) == len(every), "one series name per rule"


@needs_package("prometheus", shutil.which("promtool"), "the distribution's prometheus (promtool)")
def test_the_real_promtool_accepts_the_rules_of_a_local_and_a_cluster_selector(tmp_path: Path) -> None:
    cluster = PromVllmSelector(replica_label="pod", matchers='namespace="llm"', window_s=60)
    for n, selector in enumerate((LOCAL, cluster)):
        rules = tmp_path / f"rules-{n}.yml"
        rules.write_text(selector.rules_yaml())
        checked = subprocess.run(
            ["promtool", "check", "rules", str(rules)], capture_output=True, text=True, timeout=60
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr
        count = len(selector.recording_rules()) + len(selector.outlier_rules())
        assert f"SUCCESS: {count} rules found" in checked.stdout


def test_recorded_queries_read_exactly_the_rules_series_and_nothing_else_changes() -> None:
    recorded = replace(LOCAL, recorded=True).queries()
    computed = LOCAL.queries()
    assert set(recorded) == {SERIES, KV_SERIES, UP, HEALTH, CACHE_INFO, RECORDED}, "one query for every rule"
    match = re.fullmatch(r'\{__name__=~"(.*)"\}', recorded[RECORDED])
    assert match is not None, recorded[RECORDED]
    assert sorted(match.group(1).split("|")) == sorted(r.record for r in LOCAL.recording_rules())
    assert {k: v for k, v in recorded.items() if k != RECORDED} == {
        k: v for k, v in computed.items() if k in recorded
    }
    # Unsaid (the default), the queries are those any Prometheus answers.
    assert LOCAL.recorded is None and computed == replace(LOCAL, recorded=False).queries()


def test_recorded_series_read_as_the_samples_the_computed_queries_give() -> None:
    computed = _results()
    computed[PREEMPTION_RATE] = [PromSeries({"replica": "replica-0"}, 0.5)]
    records = {r.key: r.record for r in LOCAL.recording_rules()}
    # Prometheus answers a recorded series with its name and the labels the rule kept.
    recorded_series = [
        PromSeries({"__name__": records[key], **s.labels}, s.value)
        for key in (PREEMPTION_RATE, "vllm.ttft_p95_s")
        for s in computed[key]
    ]
    recorded = {k: v for k, v in computed.items() if k not in records}
    recorded |= by_rule(
        recorded_series + [PromSeries({"__name__": "other:x:y"}, 1.0)], LOCAL.recording_rules()
    )
    through_rules, through_queries = readings_of(recorded, "replica"), readings_of(computed, "replica")
    assert through_rules.keys() == through_queries.keys()
    for name, reading in through_queries.items():
        assert through_rules[name].samples == reading.samples, name


@dataclass
class FakePrometheus:
    """What the stand-in Prometheus answers: each query string's vector, the recording rules it
    lists (``rules_status`` other than 200: it has no rules API), and the queries it was sent."""

    url: str = ""
    answers: dict[str, list[PromSeries]] = field(default_factory=dict)
    rules: list[str] = field(default_factory=list)
    rules_status: int = 200
    sent: list[str] = field(default_factory=list)
    rule_listings: int = 0


@pytest.fixture
async def fake_prometheus() -> AsyncIterator[FakePrometheus]:
    """Prometheus' query and rules APIs on 127.0.0.1; a query it has no answer for is an empty vector."""
    fake = FakePrometheus()

    async def query(request: web.Request) -> web.Response:
        text = str((await request.post()).get("query", ""))
        fake.sent.append(text)
        result = [
            {"metric": s.labels, "value": [1796000000.5, f"{s.value:g}"]} for s in fake.answers.get(text, [])
        ]
        return web.json_response({"status": "success", "data": {"resultType": "vector", "result": result}})

    async def rules(request: web.Request) -> web.Response:
        fake.rule_listings += 1
        if fake.rules_status != 200:
            return web.Response(status=fake.rules_status, text="404 page not found")
        assert request.query.get("type") == "record"
        listed = [{"name": name, "query": "...", "health": "ok", "type": "recording"} for name in fake.rules]
        group = {"name": RULE_GROUP, "file": "vllm_rules.yml", "rules": listed, "interval": 1}
        return web.json_response({"status": "success", "data": {"groups": [group]}})

    app = web.Application()
    app.router.add_post("/api/v1/query", query)
    app.router.add_get("/api/v1/rules", rules)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    fake.url = str(server.make_url("")).rstrip("/")
    try:
        yield fake
    finally:
        await server.close()


def _answer(fake: FakePrometheus, selector: PromVllmSelector, results: dict[str, list[PromSeries]]) -> None:
    queries = selector.queries()
    fake.answers |= {queries[key]: series for key, series in results.items() if key in queries}


async def _read_twice(fake: FakePrometheus, selector: PromVllmSelector) -> dict[str, float]:
    clock = [0.0]
    source = PrometheusVllmSource(fake.url, selector, clock=lambda: clock[0])
    try:
        first = _values(await PrometheusVllmProbe("replica-0", source).read())
        clock[0] += 1.0  # the next tick: a new round
        assert _values(await PrometheusVllmProbe("replica-0", source).read()) == first
    finally:
        await source.aclose()
    return first


async def test_a_round_slower_than_max_age_still_serves_every_probe_of_the_tick(
    fake_prometheus: FakePrometheus,
) -> None:
    computing = replace(LOCAL, recorded=False)
    _answer(fake_prometheus, computing, _results())
    # Each query takes 0.2 s of the clock: a round (12 queries) outlasts max_age_s.
    clock = lambda: 0.2 * len(fake_prometheus.sent)  # noqa: E731
    source = PrometheusVllmSource(fake_prometheus.url, computing, max_age_s=0.5, clock=clock)
    try:
        probes = [PrometheusVllmProbe(name, source) for name in ("replica-0", "replica-1", "replica-0")]
        await asyncio.gather(*(p.read() for p in probes))
    finally:
        await source.aclose()
    assert len(fake_prometheus.sent) == len(computing.queries()), (
        "one round for the tick, not one per replica"
    )


async def test_a_prometheus_that_records_the_rules_is_read_from_them_asked_once(
    fake_prometheus: FakePrometheus,
) -> None:
    fake_prometheus.rules = [r.record for r in LOCAL.recording_rules()] + ["job:other:sum"]
    records = {r.key: r.record for r in LOCAL.recording_rules()}
    _answer(fake_prometheus, replace(LOCAL, recorded=True), _results())
    fake_prometheus.answers[replace(LOCAL, recorded=True).queries()[RECORDED]] = [
        PromSeries({"__name__": records["vllm.ttft_p95_s"], "replica": "replica-0"}, 0.8),
        PromSeries({"__name__": records[PREEMPTION_RATE], "replica": "replica-0"}, 0.5),
    ]
    values = await _read_twice(fake_prometheus, LOCAL)
    assert values == _values(readings_of(_results(), "replica")["replica-0"].samples)
    assert fake_prometheus.rule_listings == 1, "the rules are listed once, not at every tick"
    assert not any("histogram_quantile" in q for q in fake_prometheus.sent)
    assert len(fake_prometheus.sent) == 2 * 6, "six queries a tick"


@pytest.mark.parametrize("listing", ["some rules missing", "no rules API"])
async def test_a_prometheus_without_the_rules_is_asked_to_compute_the_quantiles(
    fake_prometheus: FakePrometheus, listing: str
) -> None:
    if listing == "no rules API":
        fake_prometheus.rules_status = 404
    else:
        fake_prometheus.rules = [r.record for r in LOCAL.recording_rules()][:-1]
    _answer(fake_prometheus, LOCAL, _results())
    values = await _read_twice(fake_prometheus, LOCAL)
    assert values["vllm.ttft_p95_s"] == 0.8 and values["vllm.preemption_rate"] == 0.5
    assert fake_prometheus.rule_listings == 1
    assert replace(LOCAL, recorded=True).queries()[RECORDED] not in fake_prometheus.sent
    assert LOCAL.queries()["vllm.ttft_p95_s"] in fake_prometheus.sent


async def test_a_selector_that_says_its_route_never_lists_the_rules(fake_prometheus: FakePrometheus) -> None:
    _answer(fake_prometheus, replace(LOCAL, recorded=False), _results())
    await _read_twice(fake_prometheus, replace(LOCAL, recorded=False))
    assert fake_prometheus.rule_listings == 0
