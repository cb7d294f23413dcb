"""CanaryProbe against an in-process fake front door: every request becomes data, bounded."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

import pytest

from inferchaos.errors import ConfigError
from inferchaos.steady_state.base import Sample
from inferchaos.steady_state.canary import CanaryConfig, CanaryProbe, phase_between_ticks
from inferchaos.steady_state.catalog import KNOWN_PROBES

if TYPE_CHECKING:
    from conftest import FakeServer

# Generous: the machine running these tests may be busy; nothing here asserts speed.
WAIT_S = 20.0


async def collect(probe: CanaryProbe, enough: Callable[[list[Sample]], bool]) -> list[Sample]:
    """Read the canary until ``enough`` of its samples have arrived (or WAIT_S passed)."""
    samples: list[Sample] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while not enough(samples) and loop.time() < deadline:
        await asyncio.sleep(0.05)
        samples.extend(await probe.read())
    return samples


def successes(samples: list[Sample]) -> list[float]:
    return [s.value for s in samples if s.probe == "canary.success"]


def per_request(samples: list[Sample]) -> list[Sample]:
    """The samples of finished requests, without the reading of how long requests wait."""
    return [s for s in samples if s.probe != "canary.oldest_wait_s"]


def waits(samples: list[Sample]) -> list[float]:
    return [s.value for s in samples if s.probe == "canary.oldest_wait_s"]


async def timed_out_requests(fake_server: FakeServer, timeout_s: float) -> list[Sample]:
    """Per-request samples of a canary whose requests to ``fake_server`` (hung or stalled)
    time out after ``timeout_s``; at least two requests, every one a failure. The cap on
    requests in flight is never reached at 5 requests/s."""
    config = CanaryConfig(
        fake_server.url, "tiny-llama", rate_per_s=5.0, max_in_flight=32, request_timeout_s=timeout_s
    )
    probe = CanaryProbe(config)
    await probe.start()
    try:
        samples = await collect(probe, lambda s: len(successes(s)) >= 2)
    finally:
        await probe.stop()
    assert len(successes(samples)) >= 2 and set(successes(samples)) == {0.0}
    return per_request(samples)


@pytest.fixture
async def canary(fake_server: FakeServer) -> AsyncIterator[CanaryProbe]:
    probe = CanaryProbe(CanaryConfig(fake_server.url, "tiny-llama", rate_per_s=20.0, max_in_flight=4))
    yield probe
    await probe.stop()


async def test_successful_requests_report_latencies_labelled_by_replica(
    fake_server: FakeServer, canary: CanaryProbe
) -> None:
    fake_server.chunks = 3
    await canary.start()
    samples = await collect(canary, lambda s: len(successes(s)) >= 3)
    await canary.stop()
    assert successes(samples)[:3] == [1.0, 1.0, 1.0]
    names = {s.probe for s in samples}
    assert {"canary.success", "canary.ttft_s", "canary.itl_s", "canary.e2e_s"} <= names
    assert names <= KNOWN_PROBES
    assert all(s.labels == {"replica": "replica-0"} for s in per_request(samples))
    by_name: dict[str, list[float]] = {}
    for s in samples:
        by_name.setdefault(s.probe, []).append(s.value)
    assert all(0 <= t <= e for t, e in zip(by_name["canary.ttft_s"], by_name["canary.e2e_s"], strict=False))


async def test_read_drains_what_finished_since_the_last_read(
    fake_server: FakeServer, canary: CanaryProbe
) -> None:
    await canary.start()
    samples = await collect(canary, lambda s: len(successes(s)) >= 5)
    await canary.stop()
    samples += await canary.read()
    assert await canary.read() == []
    # Each request is reported exactly once: repeated reads would count some twice.
    assert 5 <= len(successes(samples)) <= canary.sent


async def test_http_errors_are_failures_not_crashes(fake_server: FakeServer, canary: CanaryProbe) -> None:
    fake_server.completion_status = 503
    await canary.start()
    samples = await collect(canary, lambda s: len(successes(s)) >= 3)
    assert successes(samples) and set(successes(samples)) == {0.0}
    # A failed request measured no first token and its e2e would flatter the percentiles.
    assert not any(s.probe in ("canary.ttft_s", "canary.e2e_s") for s in samples)


async def test_an_error_event_inside_a_started_stream_is_a_failure(
    fake_server: FakeServer, canary: CanaryProbe
) -> None:
    fake_server.stream_error = "engine core died"
    await canary.start()
    samples = await collect(canary, lambda s: len(successes(s)) >= 3)
    assert successes(samples) and set(successes(samples)) == {0.0}
    # The first token did arrive before the error: its TTFT is real, the e2e of a failure is not.
    assert any(s.probe == "canary.ttft_s" for s in samples)
    assert not any(s.probe == "canary.e2e_s" for s in samples)


async def test_a_stream_that_stalls_after_its_headers_is_a_failure_of_the_replica_they_named(
    fake_server: FakeServer,
) -> None:
    # The front door named replica-0, then nothing came: the request timed out mid-stream.
    # Its failure is replica-0's, not an unattributed one.
    fake_server.stall = asyncio.Event()
    # 1 s is ample for the headers of a local server even on a busy machine (a timeout before
    # them would be an unattributed failure).
    failures = await timed_out_requests(fake_server, timeout_s=1.0)
    assert all(s.labels == {"replica": "replica-0"} for s in failures)


async def test_oldest_wait_shows_a_request_waiting_for_its_first_token(fake_server: FakeServer) -> None:
    # The replica named itself and then produced nothing (a hung engine behind a live API
    # server): the request waits, and each read says for how long, long before it times out.
    fake_server.stall = asyncio.Event()
    probe = CanaryProbe(CanaryConfig(fake_server.url, "tiny-llama", rate_per_s=2.0, request_timeout_s=30.0))
    await probe.start()
    try:
        samples = await collect(probe, lambda s: max(waits(s), default=0.0) >= 1.0)
        assert not successes(samples), "no request has finished: they all wait"
        fake_server.stall.set()  # tokens flow again: nothing waits for a first token
        samples = await collect(probe, lambda s: len(successes(s)) >= 2 and waits(s)[-1] < 0.5)
    finally:
        await probe.stop()
    assert successes(samples) and set(successes(samples)) == {1.0}
    assert waits(samples)[-1] < 0.5
    assert all(s.labels == {} for s in samples if s.probe == "canary.oldest_wait_s")


async def test_oldest_wait_is_zero_while_requests_stream(
    fake_server: FakeServer, canary: CanaryProbe
) -> None:
    # Streaming requests got their first token at once: none waits, even while the stream goes on.
    fake_server.chunks, fake_server.chunk_delay_s = 20, 0.05
    await canary.start()
    samples = await collect(canary, lambda s: len(successes(s)) >= 3)
    # Generous for a busy machine: a hung stream would wait for ever, not 2 s.
    assert waits(samples) and max(waits(samples)) < 2.0


async def test_a_request_that_times_out_before_any_header_is_an_unattributed_failure(
    fake_server: FakeServer,
) -> None:
    # A frozen replica (or front door) accepts the connection and answers nothing at all: the
    # request times out with no replica named, so its failure is nobody's in particular and
    # counts against every replica-scoped SLO (steady_state.evaluation.counts_toward).
    fake_server.hang = asyncio.Event()
    failures = await timed_out_requests(fake_server, timeout_s=0.5)
    assert all("replica" not in s.labels for s in failures)
    assert not [s for s in failures if s.probe == "canary.ttft_s"], "a request that never started has no TTFT"


async def test_an_http_error_that_names_its_replica_is_that_replicas_failure(
    fake_server: FakeServer, canary: CanaryProbe
) -> None:
    # Serve's proxy answers 500 for a replica whose vLLM refused the request, with the header.
    fake_server.completion_status = 500
    fake_server.error_replica_header = True
    await canary.start()
    samples = await collect(canary, lambda s: len(successes(s)) >= 2)
    failures = [s for s in samples if s.probe == "canary.success"]
    assert failures and {s.value for s in failures} == {0.0}
    assert all(s.labels == {"replica": "replica-0"} for s in failures)


async def test_an_error_event_keeps_the_replica_that_served_it(
    fake_server: FakeServer, canary: CanaryProbe
) -> None:
    fake_server.stream_error = "engine core died"
    await canary.start()
    samples = await collect(canary, lambda s: len(successes(s)) >= 2)
    assert {s.value for s in samples if s.probe == "canary.success"} == {0.0}
    assert all(s.labels == {"replica": "replica-0"} for s in per_request(samples))


async def test_refused_front_door_is_data_with_success_0(refused_url: str) -> None:
    probe = CanaryProbe(CanaryConfig(refused_url, "tiny-llama", rate_per_s=20.0))
    await probe.start()
    try:
        samples = await collect(probe, lambda s: len(successes(s)) >= 3)
    finally:
        await probe.stop()
    assert len(successes(samples)) >= 3 and set(successes(samples)) == {0.0}


async def test_never_more_than_max_in_flight_and_excess_counts_as_failure(
    fake_server: FakeServer, canary: CanaryProbe
) -> None:
    fake_server.hang = asyncio.Event()  # the front door accepts and never answers
    await canary.start()
    samples = await collect(canary, lambda s: len(successes(s)) >= 5)
    assert canary.in_flight <= 4
    assert canary.sent == 4
    assert fake_server.completions_started <= 4
    assert canary.dropped >= 5
    assert successes(samples) and set(successes(samples)) == {0.0}


async def test_stop_abandons_requests_in_flight(fake_server: FakeServer, canary: CanaryProbe) -> None:
    fake_server.hang = asyncio.Event()
    await canary.start()
    await collect(canary, lambda s: canary.in_flight >= 1)
    await canary.stop()
    assert canary.in_flight == 0
    sent = canary.sent
    await asyncio.sleep(0.2)
    assert canary.sent == sent  # nothing is sent after stop


async def test_the_first_request_waits_for_its_phase(fake_server: FakeServer, canary: CanaryProbe) -> None:
    await canary.start(phase_s=0.4)
    await asyncio.sleep(0.2)
    assert canary.sent == 0  # requests go between sampling ticks, not on them
    await collect(canary, lambda s: canary.sent >= 1)
    assert canary.sent >= 1


@pytest.mark.parametrize(
    ("rate", "interval", "phase"),
    [(2.0, 1.0, 0.25), (1.0, 1.0, 0.5), (2.0, 0.25, 0.125), (0.5, 1.0, 0.5)],
)
def test_phase_is_half_the_shorter_period(rate: float, interval: float, phase: float) -> None:
    assert phase_between_ticks(rate, interval) == pytest.approx(phase)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("rate_per_s", 0.0, "canary.rate_per_s"),
        ("rate_per_s", float("inf"), "canary.rate_per_s"),
        ("max_in_flight", 0, "canary.max_in_flight"),
        ("request_timeout_s", 0.0, "canary.request_timeout_s"),
        ("max_tokens", 0, "canary.max_tokens"),
    ],
)
def test_invalid_config_is_rejected(field: str, value: float, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        CanaryConfig("http://127.0.0.1:1", "m", **{field: value})


def test_default_rate_is_two_per_second() -> None:
    assert CanaryConfig("http://x", "m").rate_per_s == 2.0


def routed(samples: list[Sample]) -> dict[str, list[float]]:
    by_replica: dict[str, list[float]] = {}
    for s in samples:
        if s.probe == "canary.routed":
            by_replica.setdefault(s.labels["replica"], []).append(s.value)
    return by_replica


async def test_routed_gives_each_replica_its_share_of_the_requests(
    fake_server: FakeServer, canary: CanaryProbe
) -> None:
    await canary.start()
    samples = await collect(canary, lambda s: len(successes(s)) >= 3)
    fake_server.replica_header = "replica-1"
    samples += await collect(canary, lambda s: len(routed(s).get("replica-1", [])) >= 3)
    await canary.stop()
    shares = routed(samples)
    # Before replica-1 answered, every request went to replica-0; after, each request counts
    # 1 for the replica that took it and 0 for the other.
    assert set(shares) == {"replica-0", "replica-1"}
    assert len(shares["replica-0"]) == len(successes(samples))
    assert sum(shares["replica-0"]) + sum(shares["replica-1"]) == len(successes(samples))
    assert sum(shares["replica-1"]) >= 3 and 0.0 in shares["replica-0"]


async def test_a_refused_request_is_routed_nowhere(refused_url: str) -> None:
    probe = CanaryProbe(CanaryConfig(refused_url, "tiny-llama", rate_per_s=20.0))
    await probe.start()
    samples = await collect(probe, lambda s: len(successes(s)) >= 2)
    await probe.stop()
    assert successes(samples) and routed(samples) == {}
