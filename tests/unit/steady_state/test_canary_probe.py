"""CanaryProbe against an in-process fake front door: every request becomes data, bounded."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING

import pytest
import yaml

from inferchaos.errors import ConfigError
from inferchaos.primitives.openai_stream import StreamResult
from inferchaos.steady_state.aggregates import p95
from inferchaos.steady_state.canary import CanaryConfig, CanaryProbe, phase_between_ticks, result_samples
from inferchaos.steady_state.catalog import KNOWN_PROBES
from inferchaos.steady_state.evaluation import evaluate_slo
from inferchaos.steady_state.probe_base import Sample
from inferchaos.steady_state.slo import ensure_slos_are_valid
from inferchaos.steady_state.timeline import Row, Timeline
from tests.fakes.openai_server import FakeBehaviour, FakeOpenAIServer

if TYPE_CHECKING:
    from conftest import FakeServer

# Generous: the machine running these tests may be busy; nothing here asserts speed.
WAIT_S = 20.0
CENSORED = {"censored": "1"}
REPLICA_0 = {"replica": "replica-0"}


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


def latencies(samples: list[Sample], probe: str) -> list[tuple[float, dict[str, str]]]:
    """``(value, labels)`` of every sample of ``probe``, in the order read."""
    return [(s.value, s.labels) for s in samples if s.probe == probe]


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
    # A refusal measured no first token, and its near-zero e2e would flatter the percentiles:
    # both count at the timeout instead, marked censored, one of each per failed request.
    for probe in ("canary.ttft_s", "canary.e2e_s"):
        assert latencies(samples, probe) == [(10.0, CENSORED)] * len(successes(samples))


async def test_an_error_event_inside_a_started_stream_is_a_failure(
    fake_server: FakeServer, canary: CanaryProbe
) -> None:
    fake_server.stream_error = "engine core died"
    await canary.start()
    samples = await collect(canary, lambda s: len(successes(s)) >= 3)
    assert successes(samples) and set(successes(samples)) == {0.0}
    # The first token did arrive before the error: its TTFT is real, the e2e of a failure is
    # not, and counts at the timeout.
    ttft = [s for s in samples if s.probe == "canary.ttft_s"]
    assert len(ttft) == len(successes(samples)) and all(s.labels == REPLICA_0 and s.value < 10 for s in ttft)
    assert latencies(samples, "canary.e2e_s") == [(10.0, {**REPLICA_0, **CENSORED})] * len(successes(samples))


async def test_a_stream_that_stalls_after_its_headers_is_a_failure_of_the_replica_they_named(
    fake_server: FakeServer,
) -> None:
    # The front door named replica-0, then nothing came: the request timed out mid-stream.
    # Its failure is replica-0's, not an unattributed one.
    fake_server.stall = asyncio.Event()
    # 1 s is ample for the headers of a local server even on a busy machine (a timeout before
    # them would be an unattributed failure).
    failures = await timed_out_requests(fake_server, timeout_s=1.0)
    assert all(s.labels["replica"] == "replica-0" for s in failures)
    # Censored at the timeout with the replica kept: replica-0's latency SLOs count them.
    stalled = len(successes(failures))
    assert latencies(failures, "canary.ttft_s") == [(1.0, {**REPLICA_0, **CENSORED})] * stalled
    assert latencies(failures, "canary.e2e_s") == [(1.0, {**REPLICA_0, **CENSORED})] * stalled


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
    # It never started: it enters the TTFT percentiles at its timeout, censored.
    assert latencies(failures, "canary.ttft_s") == [(0.5, CENSORED)] * len(successes(failures))


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
    assert all(s.labels["replica"] == "replica-0" for s in per_request(samples))


async def test_refused_front_door_is_data_with_success_0(refused_url: str) -> None:
    probe = CanaryProbe(CanaryConfig(refused_url, "tiny-llama", rate_per_s=20.0))
    await probe.start()
    try:
        samples = await collect(probe, lambda s: len(successes(s)) >= 3)
    finally:
        await probe.stop()
    assert len(successes(samples)) >= 3 and set(successes(samples)) == {0.0}
    assert latencies(samples, "canary.ttft_s") == [(10.0, CENSORED)] * len(successes(samples))


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
    # A request never sent waited as long as the user would have: it counts at the timeout.
    assert latencies(samples, "canary.ttft_s") == [(10.0, CENSORED)] * len(successes(samples))


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


def routed(samples: list[Sample], probe: str = "canary.routed") -> dict[str, list[float]]:
    by_replica: dict[str, list[float]] = {}
    for s in samples:
        if s.probe == probe:
            by_replica.setdefault(s.labels["replica"], []).append(s.value)
    return by_replica


def routed_original(samples: list[Sample]) -> dict[str, list[float]]:
    return routed(samples, "canary.routed_original")


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
    # No front door named a server: each replica's original server is all it had.
    assert routed_original(samples) == shares


async def test_routed_original_stops_counting_a_replica_once_another_server_answers_for_it(
    fake_server: FakeServer, canary: CanaryProbe
) -> None:
    # replica-0's server 101 is replaced by 202 under the same name (Serve replaced the replica):
    # routed still gives replica-0 every request, routed_original none of the new server's.
    fake_server.server_header = "101"
    await canary.start()
    samples = await collect(canary, lambda s: len(successes(s)) >= 3)
    fake_server.server_header = "202"
    samples += await collect(canary, lambda s: len(successes(s)) >= 3)
    await canary.stop()
    original = routed_original(samples)["replica-0"]
    assert routed(samples)["replica-0"] == [1.0] * len(successes(samples))
    # Every request the first server took, then none: a request in flight at the switch may
    # still be the first server's.
    assert original == sorted(original, reverse=True) and original.count(1.0) >= 3 and original[-1] == 0.0


async def test_a_refused_request_is_routed_nowhere(refused_url: str) -> None:
    probe = CanaryProbe(CanaryConfig(refused_url, "tiny-llama", rate_per_s=20.0))
    await probe.start()
    samples = await collect(probe, lambda s: len(successes(s)) >= 2)
    await probe.stop()
    assert successes(samples) and routed(samples) == {}


# One finished request of each kind, as stream_completion_async reports it.
ANSWERED = StreamResult(True, 200, 0.1, 0.3, 3, "abc", "", "replica-1", [0.1, 0.2, 0.3])
REFUSED = StreamResult(False, 0, None, 0.002, 0, "", "ConnectError: refused")
NOT_SENT = StreamResult(False, 0, None, 0.0, 0, "", "not sent: 8 requests in flight")
TIMED_OUT_AFTER_HEADERS = StreamResult(False, 0, None, 7.0, 0, "", "ReadTimeout: ", "replica-1")
BROKE_OFF_AFTER_FIRST_TOKEN = StreamResult(
    False, 0, 0.2, 0.4, 1, "a", "RemoteProtocolError: ", "replica-1", [0.2]
)
R1 = {"replica": "replica-1"}


def latency_samples(result: StreamResult) -> set[tuple[str, float, str]]:
    return {
        (s.probe, s.value, s.label_text())
        for s in result_samples(result, timeout_s=7.0)
        if s.probe in ("canary.ttft_s", "canary.e2e_s")
    }


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        # An answered request is exactly as measured: no censored label.
        (ANSWERED, {("canary.ttft_s", 0.1, "replica=replica-1"), ("canary.e2e_s", 0.3, "replica=replica-1")}),
        # No first token: both latencies at the timeout, censored, with whatever replica was named.
        (REFUSED, {("canary.ttft_s", 7.0, "censored=1"), ("canary.e2e_s", 7.0, "censored=1")}),
        (NOT_SENT, {("canary.ttft_s", 7.0, "censored=1"), ("canary.e2e_s", 7.0, "censored=1")}),
        (
            TIMED_OUT_AFTER_HEADERS,
            {
                ("canary.ttft_s", 7.0, "censored=1;replica=replica-1"),
                ("canary.e2e_s", 7.0, "censored=1;replica=replica-1"),
            },
        ),
        # A first token came: its TTFT is real, only the e2e of the failure is censored.
        (
            BROKE_OFF_AFTER_FIRST_TOKEN,
            {
                ("canary.ttft_s", 0.2, "replica=replica-1"),
                ("canary.e2e_s", 7.0, "censored=1;replica=replica-1"),
            },
        ),
    ],
    ids=["answered", "refused", "not_sent", "timed_out_after_headers", "broke_off_after_first_token"],
)
def test_a_failed_request_counts_in_the_latencies_at_its_timeout(
    result: StreamResult, expected: set[tuple[str, float, str]]
) -> None:
    assert latency_samples(result) == expected


def test_a_replicas_latency_slo_counts_its_censored_failures() -> None:
    # replica-1 answered 18 requests in 0.1 s and left 2 to time out: its TTFT p95 is the
    # timeout, where counting the survivors alone read 0.1 s and held the SLO.
    t0 = 1_800_000_000.0
    results = [ANSWERED] * 18 + [TIMED_OUT_AFTER_HEADERS] * 2
    timeline = Timeline()
    timeline.append_tick(
        [Row.from_sample(t0 + 1 + k, s) for k, r in enumerate(results) for s in result_samples(r, 7.0)]
    )
    timeline.mark("baseline_start", t0)
    timeline.mark("end", t0 + 30)
    doc = {
        "slos": [
            yaml.safe_load(
                "{name: r1_ttft, probe: canary.ttft_s, labels: {replica: replica-1}, "
                'agg: p95, op: "<=", threshold: 1.0, phase: baseline}'
            )
        ]
    }
    (slo,) = ensure_slos_are_valid(doc).slos
    result = evaluate_slo(timeline, slo)
    assert (result.ok, result.observed, result.samples) == (False, 7.0, 20)


@pytest.fixture
def flaky_front_door() -> Iterator[FakeOpenAIServer]:
    """The SSE fake: every 2nd completion answers HTTP 500, every 3rd (not 2nd) breaks off after
    its first token."""
    server = FakeOpenAIServer(
        FakeBehaviour(chunks=3, first_delay_s=0.0, delay_s=0.0, fail_every=2, break_every=3)
    ).start()
    yield server
    server.stop()


def failure_kinds(samples: list[Sample]) -> tuple[int, int]:
    """Failed requests without a first token (censored TTFT), and failed requests after one
    (a censored e2e beside a measured TTFT)."""
    censored_ttft = len([s for s in samples if s.probe == "canary.ttft_s" and s.labels == CENSORED])
    censored_e2e = len([s for s in samples if s.probe == "canary.e2e_s" and s.labels == CENSORED])
    return censored_ttft, censored_e2e - censored_ttft


async def test_failures_through_the_front_door_enter_the_percentiles_censored(
    flaky_front_door: FakeOpenAIServer,
) -> None:
    config = CanaryConfig(flaky_front_door.url, "fake-tiny-llama", rate_per_s=20.0, request_timeout_s=7.0)
    probe = CanaryProbe(config)
    await probe.start()
    try:
        samples = await collect(
            probe,
            lambda s: (
                successes(s).count(1.0) >= 2 and min(failure_kinds(s)) >= 1 and sum(failure_kinds(s)) >= 4
            ),
        )
    finally:
        await probe.stop()
    failed, answered = successes(samples).count(0.0), successes(samples).count(1.0)
    ttft = latencies(samples, "canary.ttft_s")
    e2e = latencies(samples, "canary.e2e_s")
    # One TTFT and one e2e per request; every failure's e2e is censored at the timeout, and its
    # TTFT too unless a first token came before the connection broke.
    assert answered >= 2 and len(ttft) == len(e2e) == failed + answered
    assert [v for v, labels in e2e if labels == CENSORED] == [7.0] * failed
    without_token, after_token = failure_kinds(samples)
    assert without_token >= 1 and after_token >= 1 and without_token + after_token == failed
    assert {v for v, labels in ttft if labels == CENSORED} == {7.0}
    assert all(labels == {} and v < 7.0 for v, labels in ttft if labels != CENSORED)
    # More than a twentieth of the requests failed without a first token: the TTFT p95 is the
    # timeout, where the survivors' p95 was a fraction of it.
    assert without_token > len(ttft) / 20
    assert p95([(0.0, v) for v, _ in ttft]) == 7.0
