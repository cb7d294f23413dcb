"""A replica of several engines (vLLM's data-parallel ranks) reads the same through Prometheus
as by scraping its ``/metrics`` directly: its request counts and token counters summed over
the engines, its KV cache the fullest engine's.

The distribution's ``prometheus`` scrapes a stand-in for two replicas' ``/metrics``
(tests/integration/scraped_stand_in.py): replica-0 runs two engines, one of them full,
replica-1 one. The direct probe reads the same pages. Neither Ray nor vLLM is needed: the
live local environment's replicas run one engine each (test_prometheus_backend.py compares
those).
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from scraped_stand_in import Job, Scraping, needs_prometheus, prometheus_scraping, query, vllm_page

from inferchaos.faults.base import wait_until
from inferchaos.primitives.vllm_metrics import RUNNING
from inferchaos.primitives.vllm_promql import SERIES_PROBES
from inferchaos.steady_state.probe_base import Sample
from inferchaos.steady_state.prometheus_vllm import (
    PrometheusVllmProbe,
    PrometheusVllmSource,
    PromVllmSelector,
)
from inferchaos.steady_state.vllm import VllmProbe

pytestmark = [pytest.mark.integration, needs_prometheus]

MATCHERS = 'job=~"vllm-.+"'
# Per replica, per engine: running, waiting, KV usage, preemptions, prompt and generation tokens.
ENGINES = {
    "replica-0": {"0": (3, 5, 1.0, 7, 9000, 1200), "1": (2, 0, 0.25, 1, 4000, 800)},
    "replica-1": {"0": (1, 0, 0.5, 0, 300, 40)},
}


@pytest.fixture(scope="module")
def scraping(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scraping]:
    """A real Prometheus scraping both replicas' pages each second."""
    pages = {f"/{replica}/metrics": vllm_page(ENGINES[replica]) for replica in ENGINES} | {"/health": ""}
    # Each target names its replica, as the local environment's file_sd targets and a Pod's do.
    jobs = {f"vllm-{replica}": Job(f"/{replica}/metrics", labels={"replica": replica}) for replica in ENGINES}
    with prometheus_scraping(tmp_path_factory.mktemp("engines"), pages, jobs) as scraping:
        scraped = wait_until(
            lambda: len(query(scraping.url, f"count by (replica) ({RUNNING}{{{MATCHERS}}})")) == 2,
            30.0,
            0.5,
        )
        assert scraped is not None, f"targets not scraped: {query(scraping.url, 'up')}"
        yield scraping


def _series(samples: list[Sample]) -> dict[str, float]:
    read = set(SERIES_PROBES.values())
    return {s.probe: s.value for s in samples if s.probe in read}


async def test_a_replica_of_two_engines_reads_as_direct_scraping_reads_it(scraping: Scraping) -> None:
    selector = PromVllmSelector(replica_label="replica", matchers=MATCHERS, recorded=False)
    source = PrometheusVllmSource(scraping.url, selector, timeout_s=5.0)
    read: dict[str, dict[str, float]] = {}
    async with httpx.AsyncClient(timeout=5.0) as client:
        try:
            for replica in ENGINES:
                page = f"{scraping.stand_in}/{replica}/metrics"
                direct = VllmProbe(replica, page, f"{scraping.stand_in}/health", client=client)
                read[replica] = _series(await PrometheusVllmProbe(replica, source).read())
                assert read[replica] == _series(await direct.read()), replica
        finally:
            await source.aclose()
    two = read["replica-0"]
    assert two["vllm.num_requests_running"] == 5.0 and two["vllm.num_requests_waiting"] == 5.0
    assert two["vllm.prompt_tokens_total"] == 13000.0
    assert two["vllm.kv_cache_usage"] == 1.0, "one full engine already queues: the fullest one's"
