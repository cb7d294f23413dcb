"""The one parser of OpenAI SSE lines, shared by the canary and the Locust users, and the check
that every replica answers through the front door."""

from __future__ import annotations

import json
import time

import pytest

from inferchaos.primitives.openai_stream import StreamEvent, parse_sse_line, replicas_served
from tests.fakes.openai_server import FAKE_MODEL, FakeBehaviour, FakeOpenAIServer


def _data(payload: object) -> str:
    return f"data: {json.dumps(payload)}"


@pytest.mark.parametrize(
    "line", ["", ": keep-alive", "event: ping", "data:", "data: [DONE]", b"data: [DONE]\n"]
)
def test_lines_without_an_event_are_skipped(line: str | bytes) -> None:
    assert parse_sse_line(line) is None


def test_a_token_chunk_carries_its_text() -> None:
    line = _data({"choices": [{"index": 0, "text": " t0"}, {"index": 1, "text": None}]})
    assert parse_sse_line(line) == StreamEvent(text=" t0", has_choices=True)
    # Locust reads raw bytes, line ending included.
    assert parse_sse_line(line.encode() + b"\n") == StreamEvent(text=" t0", has_choices=True)


def test_the_usage_event_counts_output_tokens() -> None:
    event = parse_sse_line(_data({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 7}}))
    assert event == StreamEvent(completion_tokens=7)


def test_an_error_inside_a_started_stream_is_an_error_event() -> None:
    event = parse_sse_line(_data({"error": {"message": "engine dead", "code": 500}}))
    assert event is not None and "engine dead" in event.error and not event.has_choices


@pytest.mark.parametrize("line", ["data: {not json", "data: [1, 2]"])
def test_a_payload_that_is_not_an_object_is_a_value_error(line: str) -> None:
    with pytest.raises(ValueError):
        parse_sse_line(line)


def test_the_front_door_check_waits_until_every_replica_answered_through_it() -> None:
    # The front door routes the first three requests to replica-1 only, as it does while a
    # replica Serve has just started is not in its routing table yet.
    behaviour = FakeBehaviour(chunks=1, first_delay_s=0.0, replicas=["replica-1"] * 3 + ["replica-0"])
    server = FakeOpenAIServer(behaviour).start()
    try:
        served = replicas_served(server.url, FAKE_MODEL, {"replica-0", "replica-1"}, time.monotonic() + 30)
    finally:
        server.stop()
    assert served == {"replica-0", "replica-1"}
    assert behaviour.completions == 4


def test_the_front_door_check_names_only_the_replicas_that_answered_by_the_deadline() -> None:
    behaviour = FakeBehaviour(chunks=1, first_delay_s=0.0, replicas=["replica-1"])
    server = FakeOpenAIServer(behaviour).start()
    try:
        served = replicas_served(server.url, FAKE_MODEL, {"replica-0", "replica-1"}, time.monotonic() + 1)
    finally:
        server.stop()
    assert served == {"replica-1"}
