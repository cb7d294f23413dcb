"""The vLLM probes through a real Prometheus scraping the real replicas agree with direct scraping.

The session's environment runs without ``--prometheus``; this test starts the same Prometheus
that ``env up --prometheus`` starts (environments/local/prometheus_server.py), points it at the
environment's replicas and nodes, and ends it by its process group. Counters read through
Prometheus lie between two direct reads taken one scrape interval apart, under traffic.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from inferchaos.environments.local.env import LocalEnvironment
from inferchaos.environments.local.prometheus_server import (
    SCRAPE_INTERVAL_S,
    VLLM_JOB,
    PrometheusRecord,
    replica_targets,
    start_prometheus,
    write_targets,
)
from inferchaos.environments.local.ray_cluster import refresh_scrape_targets
from inferchaos.errors import ProbeError
from inferchaos.faults.base import wait_until
from inferchaos.primitives.env_status import ReplicaStatus
from inferchaos.primitives.openai_stream import stream_completion
from inferchaos.primitives.processes import free_port
from inferchaos.steady_state.base import Sample
from inferchaos.steady_state.prometheus_vllm import (
    PrometheusVllmProbe,
    PrometheusVllmSource,
    PromVllmSelector,
)
from inferchaos.steady_state.vllm import VllmProbe

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        shutil.which("prometheus") is None, reason="the distribution's prometheus is not installed"
    ),
]


@pytest.fixture
def prometheus(local_env: LocalEnvironment, tmp_path: Path) -> Iterator[PrometheusRecord]:
    record = start_prometheus(free_port(), tmp_path / "prometheus", dict(os.environ), tmp_path / "logs")
    try:
        state = replace(
            local_env.load_state(), prometheus=record
        )  # not saved: the session's env stays as it is
        refresh_scrape_targets(state)
        yield record
    finally:
        # This process started it, so it is this process's child to end and reap.
        os.killpg(record.pid, signal.SIGTERM)
        if wait_until(lambda: os.waitpid(record.pid, os.WNOHANG)[0] == record.pid, 10.0) is None:
            os.killpg(record.pid, signal.SIGKILL)
            os.waitpid(record.pid, 0)


def _up(url: str, job: str) -> dict[str, float]:
    answer = httpx.get(f"{url}/api/v1/query", params={"query": f'up{{job="{job}"}}'}, timeout=5.0).json()
    return {
        r["metric"].get("replica") or r["metric"].get("node", "?"): float(r["value"][1])
        for r in answer["data"]["result"]
    }


def _values(samples: list[Sample]) -> dict[str, float]:
    return {s.probe: s.value for s in samples}


def test_promql_probes_agree_with_direct_scraping_within_one_scrape_interval(
    local_env: LocalEnvironment, prometheus: PrometheusRecord
) -> None:
    status = local_env.status()
    replicas = sorted(status.vllm.replicas, key=lambda r: r.name)
    assert len(replicas) >= 2
    # A replica slot that nothing serves: its scrape fails, and its probe must say so.
    targets = {r.name: int(r.url.rsplit(":", 1)[1]) for r in replicas} | {"replica-9": free_port()}
    write_targets(Path(prometheus.targets_dir), VLLM_JOB, replica_targets(targets))
    every_up = wait_until(
        lambda: (
            all(_up(prometheus.url, VLLM_JOB).get(r.name) == 1.0 for r in replicas)
            and all(v == 1.0 for v in _up(prometheus.url, "ray").values())
            and len(_up(prometheus.url, "ray")) >= 3
        ),
        30.0,
        0.5,
    )
    assert every_up is not None, (
        f"targets never all up: {_up(prometheus.url, VLLM_JOB)} {_up(prometheus.url, 'ray')}"
    )
    assert _up(prometheus.url, VLLM_JOB)["replica-9"] == 0.0

    stop = threading.Event()

    def traffic() -> None:
        while not stop.is_set():
            stream_completion(status.front_door.url, status.model.name, "tell me about chaos", max_tokens=24)

    workers = [threading.Thread(target=traffic, daemon=True) for _ in range(2)]
    for w in workers:
        w.start()
    try:
        time.sleep(3.0)  # a few scrapes with requests finishing, for the rate windows
        asyncio.run(_compare(prometheus, replicas))
    finally:
        stop.set()
        for w in workers:
            w.join(timeout=60)
    # Serve's router splits two clients' requests evenly, so the replicas may have served the same
    # tokens: a few more to replica-0's own port set them apart. Two scrapes later, each replica's
    # counters through Prometheus are exactly its own, not its peer's.
    for _ in range(2):
        stream_completion(replicas[0].url, status.model.name, "only replica-0 hears this", max_tokens=8)
    # vLLM counts a request's tokens shortly after its stream ends (a scrape begun just after the
    # last request still missed its 9 tokens): wait for the scrape after the next one.
    settled = time.time() + SCRAPE_INTERVAL_S
    scraped = wait_until(lambda: _scraped_since(prometheus.url, settled, len(replicas)), 15.0, 0.25)
    assert scraped is not None, "Prometheus did not scrape every replica after the last request"
    asyncio.run(_settled(prometheus, replicas))


def _scraped_since(url: str, since: float, count: int) -> bool:
    """Whether each replica's latest scrape began after ``since`` (``timestamp(up)`` is its start)."""
    query = f'timestamp(up{{job="{VLLM_JOB}"}} == 1) > {since}'
    answer = httpx.get(f"{url}/api/v1/query", params={"query": query}, timeout=5.0).json()
    names = {r["metric"].get("replica") for r in answer["data"]["result"]}
    return len(names - {"replica-9"}) >= count


async def _settled(prometheus: PrometheusRecord, replicas: list[ReplicaStatus]) -> None:
    source = PrometheusVllmSource(
        prometheus.url, PromVllmSelector(replica_label="replica", matchers=f'job="{VLLM_JOB}"')
    )
    direct = {r.name: VllmProbe(r.name, r.metrics_url, f"{r.url}/health") for r in replicas}
    try:
        tokens = {
            r.name: _values(await direct[r.name].read())["vllm.generation_tokens_total"] for r in replicas
        }
        assert len(set(tokens.values())) == len(tokens), f"the replicas' counters must differ: {tokens}"
        for r in replicas:
            mine = _values(await direct[r.name].read())
            through = _values(await PrometheusVllmProbe(r.name, source).read())
            print(f"{r.name} settled: direct {mine['vllm.generation_tokens_total']:g} tokens, "
                  f"through prometheus {through['vllm.generation_tokens_total']:g}")  # fmt: skip
            for counter in ("vllm.generation_tokens_total", "vllm.prompt_tokens_total"):
                assert through[counter] == mine[counter], (r.name, counter)
    finally:
        await source.aclose()
        for probe in direct.values():
            await probe.aclose()


async def _compare(prometheus: PrometheusRecord, replicas: list[ReplicaStatus]) -> None:
    selector = PromVllmSelector(
        replica_label="replica",
        matchers=f'job="{VLLM_JOB}"',
        health_matchers='job="vllm_health"',
        window_s=5.0,
    )
    source = PrometheusVllmSource(prometheus.url, selector)
    names = [r.name for r in replicas]
    direct = {r.name: VllmProbe(r.name, r.metrics_url, f"{r.url}/health") for r in replicas}
    try:
        before = {n: _values(await direct[n].read()) for n in names}
        await asyncio.sleep(SCRAPE_INTERVAL_S * 1.5)
        through = {n: _values(await PrometheusVllmProbe(n, source).read()) for n in names}
        after = {n: _values(await direct[n].read()) for n in names}
        print("direct before:", before, "\nthrough prometheus:", through, "\ndirect after:", after)
        for n in names:
            for counter in ("vllm.generation_tokens_total", "vllm.prompt_tokens_total"):
                assert before[n][counter] <= through[n][counter] <= after[n][counter], (n, counter)
            assert through[n]["vllm.kv_cache_capacity_tokens"] == after[n]["vllm.kv_cache_capacity_tokens"]
            assert through[n]["vllm.healthy"] == 1.0, "vLLM's empty 200 on /health is a successful scrape"
            assert 0.0 <= through[n]["vllm.kv_cache_usage"] <= 1.0
        served = [
            n
            for n in names
            if after[n]["vllm.generation_tokens_total"] > before[n]["vllm.generation_tokens_total"]
        ]
        assert served, "the traffic reached no replica"
        # Requests finished in the rate window on each replica that served: it has a TTFT quantile.
        for n in served:
            assert 0.0 < through[n]["vllm.ttft_p95_s"] < 30.0, through[n]
        with pytest.raises(ProbeError, match="up 0"):
            await PrometheusVllmProbe("replica-9", source).read()
        with pytest.raises(ProbeError, match="no .* target"):
            await PrometheusVllmProbe("replica-7", source).read()
    finally:
        await source.aclose()
        for probe in direct.values():
            await probe.aclose()
