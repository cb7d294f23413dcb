"""VllmProbe against an in-process fake replica serving recorded /metrics."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import pytest

from inferchaos.errors import ProbeError
from inferchaos.steady_state.catalog import KNOWN_PROBES
from inferchaos.steady_state.probe_base import Sample
from inferchaos.steady_state.sampler import Sampler
from inferchaos.steady_state.timeline import Timeline
from inferchaos.steady_state.vllm import VllmProbe

if TYPE_CHECKING:
    from conftest import FakeServer


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def by_probe(samples: list[Sample]) -> dict[str, float]:
    return {s.probe: s.value for s in samples}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def probe(fake_server: FakeServer, clock: FakeClock) -> AsyncIterator[VllmProbe]:
    p = VllmProbe("replica-0", fake_server.metrics_url, fake_server.health_url, clock=clock)
    yield p
    await p.aclose()


async def test_first_read_reports_levels_and_no_window(
    fake_server: FakeServer, probe: VllmProbe, flooded_metrics: str
) -> None:
    fake_server.metrics = [flooded_metrics]
    samples = await probe.read()
    values = by_probe(samples)
    assert values["vllm.num_requests_running"] == 2.0
    assert values["vllm.num_requests_waiting"] == 2.0
    assert values["vllm.kv_cache_usage"] == pytest.approx(0.935, abs=1e-3)
    assert values["vllm.num_preemptions_total"] == 3.0
    assert values["vllm.prompt_tokens_total"] == 31410.0
    assert values["vllm.generation_tokens_total"] == 4979.0
    assert values["vllm.healthy"] == 1.0
    # Nothing to compare with yet: no rate and no window quantiles.
    assert "vllm.preemption_rate" not in values
    assert not any(name.startswith("vllm.ttft_") for name in values)
    assert all(s.labels == {"replica": "replica-0"} for s in samples)
    assert {s.probe for s in samples} <= KNOWN_PROBES


async def test_second_read_reports_rate_and_quantiles_over_the_window(
    fake_server: FakeServer, probe: VllmProbe, clock: FakeClock, idle_metrics: str, flooded_metrics: str
) -> None:
    fake_server.metrics = [idle_metrics, flooded_metrics]
    await probe.read()
    clock.now += 2.0
    values = by_probe(await probe.read())
    assert values["vllm.preemption_rate"] == pytest.approx(3 / 2.0)
    assert values["vllm.ttft_p50_s"] == pytest.approx(1.3)
    assert values["vllm.ttft_p95_s"] == pytest.approx(2.75)
    assert values["vllm.ttft_p99_s"] == pytest.approx(4.55)
    for name in ("vllm.itl_p50_s", "vllm.itl_p95_s", "vllm.e2e_p50_s", "vllm.e2e_p95_s"):
        assert values[name] > 0
    assert set(values) <= KNOWN_PROBES


async def test_no_requests_in_the_window_means_no_quantiles(
    fake_server: FakeServer, probe: VllmProbe, clock: FakeClock, flooded_metrics: str
) -> None:
    fake_server.metrics = [flooded_metrics]
    await probe.read()
    clock.now += 1.0
    values = by_probe(await probe.read())
    assert values["vllm.preemption_rate"] == 0.0
    assert not any(name.endswith(("_p50_s", "_p95_s", "_p99_s")) for name in values)


async def test_window_s_measures_from_an_old_enough_read(
    fake_server: FakeServer, clock: FakeClock, idle_metrics: str, flooded_metrics: str
) -> None:
    probe = VllmProbe("replica-0", fake_server.metrics_url, fake_server.health_url, window_s=5.0, clock=clock)
    fake_server.metrics = [idle_metrics, flooded_metrics, flooded_metrics, flooded_metrics]
    try:
        await probe.read()  # t=100, idle
        for _ in range(3):  # t=102, 104, 106: the flood happened between 100 and 102
            clock.now += 2.0
            values = by_probe(await probe.read())
        # At t=106 the window starts at the read of t=100 (the newest at least 5 s old),
        # so the three preemptions are still in it.
        assert values["vllm.preemption_rate"] == pytest.approx(3 / 6.0)
        assert values["vllm.ttft_p50_s"] == pytest.approx(1.3)
    finally:
        await probe.aclose()


async def test_unhealthy_replica_reads_as_healthy_0(
    fake_server: FakeServer, probe: VllmProbe, idle_metrics: str
) -> None:
    fake_server.metrics = [idle_metrics]
    fake_server.health_status = 503
    assert by_probe(await probe.read())["vllm.healthy"] == 0.0


async def test_health_endpoint_unreachable_reads_as_healthy_0(
    fake_server: FakeServer, idle_metrics: str, refused_url: str
) -> None:
    fake_server.metrics = [idle_metrics]
    probe = VllmProbe("replica-0", fake_server.metrics_url, f"{refused_url}/health")
    try:
        assert by_probe(await probe.read())["vllm.healthy"] == 0.0
    finally:
        await probe.aclose()


async def test_refused_connection_is_a_probe_error(refused_url: str) -> None:
    probe = VllmProbe("replica-1", f"{refused_url}/metrics", f"{refused_url}/health")
    try:
        with pytest.raises(ProbeError, match="replica-1.*ConnectError"):
            await probe.read()
    finally:
        await probe.aclose()


async def test_metrics_http_error_is_a_probe_error(
    fake_server: FakeServer, probe: VllmProbe, idle_metrics: str
) -> None:
    fake_server.metrics = [idle_metrics]
    fake_server.metrics_status = 500
    with pytest.raises(ProbeError, match="HTTP 500"):
        await probe.read()


def test_probe_is_named_after_its_replica() -> None:
    probe = VllmProbe("replica-3", "http://x/metrics", "http://x/health")
    assert probe.name == "vllm@replica-3"
    assert probe.layer == "vllm"


async def test_the_sampler_records_a_refused_replica_and_reads_the_others(
    fake_server: FakeServer, idle_metrics: str, refused_url: str
) -> None:
    fake_server.metrics = [idle_metrics]
    alive = VllmProbe("replica-0", fake_server.metrics_url, fake_server.health_url)
    dead = VllmProbe("replica-1", f"{refused_url}/metrics", f"{refused_url}/health")
    timeline = Timeline()
    try:
        await Sampler([alive, dead], timeline, interval_s=5.0, probe_timeout_s=5.0).run(max_ticks=1)
    finally:
        await alive.aclose()
        await dead.aclose()
    [error] = timeline.errors()
    assert error.probe == "vllm@replica-1" and error.error.startswith("ProbeError: replica-1: GET")
    assert math.isnan(error.value) and error.layer == "vllm"
    assert [r.value for r in timeline.select("vllm.healthy", {"replica": "replica-0"})] == [1.0]
