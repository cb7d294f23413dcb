"""The vLLM probes through Prometheus: the PromQL they send and how they read its answers.

The answers are in the shape of Prometheus' HTTP API (``/api/v1/query``); the real server, scraping
real replicas, is tests/integration/test_prometheus_backend.py's.
"""

from __future__ import annotations

import asyncio
import math

import pytest

from inferchaos.errors import ProbeError
from inferchaos.experiments.probes import vllm_probes
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
from inferchaos.steady_state.base import Sample
from inferchaos.steady_state.prometheus_vllm import (
    CACHE_INFO,
    HEALTH,
    PREEMPTION_RATE,
    SERIES,
    UP,
    PrometheusVllmProbe,
    PrometheusVllmSource,
    PromVllmSelector,
    readings_of,
)
from inferchaos.steady_state.vllm import WINDOW_QUANTILES, VllmProbe

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
    assert queries[SERIES].startswith('{job="vllm",__name__=~"vllm:(num_requests_running|')
    assert "gpu_cache_usage_perc" in queries[SERIES], "vLLM's older KV name is read too"
    assert queries[PREEMPTION_RATE] == 'sum by (replica) (rate(vllm:num_preemptions_total{job="vllm"}[5s]))'
    assert queries["vllm.ttft_p95_s"] == (
        "histogram_quantile(0.95, sum by (replica, le) "
        '(rate(vllm:time_to_first_token_seconds_bucket{job="vllm"}[5s])))'
    )
    assert set(queries) == {
        SERIES,
        UP,
        HEALTH,
        CACHE_INFO,
        PREEMPTION_RATE,
        *(p for p, _, _ in WINDOW_QUANTILES),
    }
    # A cluster's Prometheus with no matchers and no health job: bare selectors, no health query.
    bare = PromVllmSelector(replica_label="pod").queries()
    assert bare[UP] == "max by (pod) (up)" and HEALTH not in bare
    assert bare[CACHE_INFO] == "vllm:cache_config_info"


def _results() -> dict[str, list[PromSeries]]:
    r0, r1 = {"replica": "replica-0"}, {"replica": "replica-1"}
    results = {
        UP: [PromSeries(r0, 1.0), PromSeries(r1, 1.0)],
        HEALTH: [PromSeries(r0, 1.0), PromSeries(r1, 0.0)],
        SERIES: [
            PromSeries({**r0, "__name__": "vllm:num_requests_waiting"}, 3.0),
            PromSeries({**r0, "__name__": "vllm:gpu_cache_usage_perc"}, 0.1),
            PromSeries({**r0, "__name__": "vllm:kv_cache_usage_perc"}, 0.9),
            PromSeries({**r1, "__name__": "vllm:gpu_cache_usage_perc"}, 0.4),
            PromSeries({**r1, "__name__": "vllm:generation_tokens_total"}, 1234.0),
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


def test_a_replica_whose_scrape_failed_has_no_samples_and_one_prometheus_never_saw_is_absent() -> None:
    results = _results()
    results[UP] = [PromSeries({"replica": "replica-0"}, 0.0)]
    readings = readings_of(results, "replica")
    assert readings["replica-0"].scraped is False and readings["replica-0"].samples == []
    assert "replica-1" not in readings, "series without an up are not a replica Prometheus scrapes"


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


def _status(prometheus: PrometheusStatus | None) -> EnvStatus:
    replicas = [
        ReplicaStatus(name, f"http://10.0.0.{i}:8000", f"http://10.0.0.{i}:8000/metrics", "n", True)
        for i, name in enumerate(("vllm-b", "vllm-a"))
    ]
    return EnvStatus(
        "cluster", True, RayStatus("r:6379", "http://d"), VllmStatus(replicas=replicas),
        FrontDoorStatus("http://fd", True), ModelStatus("m", 128), prometheus=prometheus,
    )  # fmt: skip


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
