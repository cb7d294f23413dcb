"""A fleet read in focus: each replica its SLOs name, and of every other replica the extremes of
each reading, agree with scraping every replica directly where an SLO's ``max`` or ``min`` looks.

The distribution's ``prometheus`` scrapes a stand-in for ten one-engine replicas whose readings
differ, and an eleventh whose ``/metrics`` answers 404 (its scrape fails: up 0), and evaluates
the vLLM rules (the outlier rules among them). The direct probes read the same pages. A focused
tick must answer, whether it ranks the replicas itself or reads the outlier rules: the named
replica as direct scraping reads it; each reading's highest and lowest value over the fleet; at
most three outliers at each end plus the named replica per reading; and the replica down as
unhealthy.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import httpx
import pytest
from scraped_stand_in import Job, Scraping, needs_prometheus, prometheus_scraping, query, vllm_page

from inferchaos.faults.base import wait_until
from inferchaos.primitives.vllm_metrics import RUNNING
from inferchaos.primitives.vllm_promql import OUTLIERS, SERIES_PROBES, Focus
from inferchaos.steady_state.probe_base import Sample
from inferchaos.steady_state.prometheus_vllm import (
    PrometheusVllmOutliersProbe,
    PrometheusVllmProbe,
    PrometheusVllmSource,
    PromVllmSelector,
)
from inferchaos.steady_state.vllm import VllmProbe

pytestmark = [pytest.mark.integration, needs_prometheus]

MATCHERS = 'job=~"vllm-.+"'
SERVED = [f"replica-{n}" for n in range(10)]
DOWN = "replica-10"
NAMED = "replica-5"
# Running, waiting, KV usage, preemptions, prompt and generation tokens: no two replicas alike.
VALUES = {
    name: (n % 5, (3 * n) % 8, round(0.1 * n + 0.05, 2), 7 - n, 100 * n, 40 * ((5 * n) % 8))
    for n, name in enumerate(SERVED)
}
READ = set(SERIES_PROBES.values())
# The rules this Prometheus evaluates: the quantiles' and the outlier rules.
SELECTOR = PromVllmSelector(replica_label="replica", matchers=MATCHERS)


@pytest.fixture(scope="module")
def scraping(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scraping]:
    """A real Prometheus scraping the eleven replicas' targets each second, evaluating the vLLM rules."""
    pages = {f"/{name}/metrics": vllm_page({"0": VALUES[name]}) for name in SERVED} | {"/health": ""}
    jobs = {f"vllm-{name}": Job(f"/{name}/metrics", labels={"replica": name}) for name in [*SERVED, DOWN]}
    rules = SELECTOR.rules_yaml()
    with prometheus_scraping(tmp_path_factory.mktemp("focus"), pages, jobs, rules) as scraping:
        last = SELECTOR.outlier_rules()[-1].record
        scraped = wait_until(
            lambda: (
                len(query(scraping.url, f"{RUNNING}{{{MATCHERS}}}")) == len(SERVED)
                and len(query(scraping.url, f'up{{replica="{DOWN}"}} == 0')) == 1
                # The outlier rules evaluated after a scrape of every target: the group's last.
                and len(query(scraping.url, f'replica:up:bottom{OUTLIERS}{{replica="{DOWN}"}}')) == 1
                and len(query(scraping.url, last)) > 0
            ),
            30.0,
            0.5,
        )
        assert scraped is not None, f"targets not scraped: {query(scraping.url, 'up')}"
        yield scraping


def _by_replica(samples: list[Sample], probe: str) -> dict[str, float]:
    return {s.labels["replica"]: s.value for s in samples if s.probe == probe}


@pytest.mark.parametrize("recorded", [False, True], ids=["ranked at the tick", "from the outlier rules"])
async def test_a_focused_tick_reads_the_named_replica_and_every_readings_extremes(
    scraping: Scraping, recorded: bool
) -> None:
    selector = replace(SELECTOR, recorded=recorded)
    source = PrometheusVllmSource(
        scraping.url, selector, focus=Focus(frozenset({NAMED}), OUTLIERS), timeout_s=5.0
    )
    async with httpx.AsyncClient(timeout=5.0) as client:
        try:
            named = await PrometheusVllmProbe(NAMED, source).read()
            others = await PrometheusVllmOutliersProbe(source, frozenset({NAMED})).read()
            direct: list[Sample] = []
            for name in SERVED:
                page = f"{scraping.stand_in}/{name}/metrics"
                direct += await VllmProbe(name, page, f"{scraping.stand_in}/health", client=client).read()
        finally:
            await source.aclose()
    assert {s.probe: s.value for s in named if s.probe in READ} == {
        s.probe: s.value for s in direct if s.probe in READ and s.labels["replica"] == NAMED
    }, "the named replica reads as direct scraping reads it"
    assert all(s.labels.get("replica") != NAMED for s in others), "the named replica is its own probe's"
    for probe in sorted(READ):
        every = _by_replica(direct, probe)
        focused = _by_replica(named, probe) | _by_replica(others, probe)
        assert max(focused.values()) == max(every.values()), probe
        assert min(focused.values()) == min(every.values()), probe
        assert all(every[replica] == value for replica, value in focused.items()), probe
        assert len(focused) <= 2 * OUTLIERS + 1 < len(every), f"{probe}: {sorted(focused)}"
    assert Sample("vllm.healthy", 0.0, {"replica": DOWN}) in others, "a failed scrape reads as unhealthy"


async def test_a_focus_without_named_replicas_reads_the_extremes_alone(scraping: Scraping) -> None:
    selector = replace(SELECTOR, recorded=False)
    source = PrometheusVllmSource(scraping.url, selector, focus=Focus(outliers=1), timeout_s=5.0)
    try:
        others = await PrometheusVllmOutliersProbe(source, frozenset()).read()
    finally:
        await source.aclose()
    waiting = _by_replica(others, "vllm.num_requests_waiting")
    expected = [v[1] for v in VALUES.values()]
    assert sorted(waiting.values()) == [min(expected), max(expected)]
