"""OpenAI completion streams: the one parser of their SSE lines, and one timed streaming request.

:func:`parse_sse_line` turns a line of a ``stream: true`` response into a :class:`StreamEvent`
(the text of its choices, its usage, or the error vLLM reports inside a started stream). It
is pure, so both clients share it: :func:`stream_completion_async` here (httpx, used by the
canary probe, the faults and the tests) and the Locust users (geventhttpclient, in their own
process: this module imports neither asyncio nor Ray, so a locustfile may import it).

The canary, the game day and the tests all need the same thing: send a small streaming
request, note when the first SSE data chunk arrives (TTFT) and when the stream ends (e2e).
A refused or failed request is a result with ``ok=False``, never an exception, because a
failure is exactly what a chaos run wants to record.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from inferchaos.primitives import http


@dataclass
class StreamResult:
    """Timing and content of one streamed completion."""

    ok: bool
    status_code: int
    ttft_s: float | None
    e2e_s: float
    chunks: int
    text: str
    error: str = ""
    replica: str = ""
    chunk_times_s: list[float] = field(default_factory=list)
    # The server the replica's name stood for (x-inferchaos-server), where the front door says.
    server: str = ""

    @property
    def inter_token_s(self) -> float | None:
        """Mean gap between data chunks after the first, or None with fewer than two."""
        if len(self.chunk_times_s) < 2:
            return None
        gaps = [b - a for a, b in zip(self.chunk_times_s, self.chunk_times_s[1:], strict=False)]
        return sum(gaps) / len(gaps)


@dataclass(frozen=True)
class StreamEvent:
    """One ``data:`` event of an OpenAI completion stream."""

    # The choices' text, joined; empty for a usage-only or error event.
    text: str = ""
    # Whether the event carried choices (a token chunk): what TTFT and ITL are timed on.
    has_choices: bool = False
    # ``usage.completion_tokens`` of the final event with ``stream_options.include_usage``.
    completion_tokens: int | None = None
    # vLLM reports a failure inside an already started stream as ``data: {"error": ...}``.
    error: str = ""


def parse_sse_line(line: str | bytes) -> StreamEvent | None:
    """The event one SSE line carries; None for other lines (blank, comments, ``[DONE]``).

    Raises ValueError (json.JSONDecodeError) for a ``data:`` payload that is not JSON.
    """
    text = line.decode(errors="replace") if isinstance(line, bytes) else line
    if not text.startswith("data:"):
        return None
    payload = text[len("data:") :].strip()
    if not payload or payload == "[DONE]":
        return None
    data = json.loads(payload)
    if not isinstance(data, dict):
        raise ValueError(f"an SSE data event must be a JSON object, got {payload[:100]!r}")
    if data.get("error"):
        return StreamEvent(error=str(data["error"])[:200])
    choices = data.get("choices") or []
    usage = data.get("usage") or {}
    tokens = usage.get("completion_tokens")
    return StreamEvent(
        text="".join(choice.get("text") or "" for choice in choices),
        has_choices=bool(choices),
        completion_tokens=int(tokens) if tokens is not None else None,
    )


async def stream_completion_async(
    client: httpx.AsyncClient,
    base_url: str,
    model: str,
    prompt: str,
    max_tokens: int = 16,
    timeout_s: float = 30.0,
    extra: dict[str, Any] | None = None,
    on_first_token: Callable[[], None] | None = None,
) -> StreamResult:
    """POST /v1/completions with ``stream: true`` and time it; never raises on HTTP failure.

    ``on_first_token`` is called once, when the first data chunk arrives: a caller watching
    requests in flight can tell one that is waiting for its first token from one that streams.
    """
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "stream": True, **(extra or {})}
    start = time.perf_counter()
    times: list[float] = []
    text: list[str] = []
    # Read with the headers and kept through every later failure: a stream that stalls or
    # breaks after the front door named its replica is that replica's failure.
    replica = server = ""
    try:
        async with client.stream(
            "POST", f"{base_url}/v1/completions", json=body, timeout=timeout_s
        ) as response:
            replica = response.headers.get("x-inferchaos-replica", "")
            server = response.headers.get("x-inferchaos-server", "")
            if response.status_code != 200:
                detail = (await response.aread()).decode(errors="replace")[:200]
                return StreamResult(
                    False,
                    response.status_code,
                    None,
                    time.perf_counter() - start,
                    0,
                    "",
                    f"HTTP {response.status_code}: {detail}",
                    replica,
                    server=server,
                )
            async for line in response.aiter_lines():
                event = parse_sse_line(line)
                if event is None:
                    continue
                if event.error:
                    return StreamResult(
                        False,
                        200,
                        times[0] if times else None,
                        time.perf_counter() - start,
                        len(times),
                        "".join(text),
                        f"error event: {event.error}",
                        replica,
                        times,
                        server,
                    )
                if not event.has_choices:
                    continue
                times.append(time.perf_counter() - start)
                text.append(event.text)
                if on_first_token is not None and len(times) == 1:
                    on_first_token()
    except (httpx.HTTPError, ValueError) as e:
        return StreamResult(
            False,
            0,
            times[0] if times else None,
            time.perf_counter() - start,
            len(times),
            "".join(text),
            f"{type(e).__name__}: {e}",
            replica,
            times,
            server,
        )
    e2e = time.perf_counter() - start
    ok = bool(times)
    return StreamResult(
        ok,
        200,
        times[0] if times else None,
        e2e,
        len(times),
        "".join(text),
        "" if ok else "stream ended without a data chunk",
        replica,
        times,
        server,
    )


def stream_completion(
    base_url: str,
    model: str,
    prompt: str,
    max_tokens: int = 16,
    timeout_s: float = 30.0,
    extra: dict[str, Any] | None = None,
) -> StreamResult:
    """Blocking wrapper of :func:`stream_completion_async` for CLIs, faults and tests."""
    import asyncio

    async def run() -> StreamResult:
        async with http.async_client() as client:
            return await stream_completion_async(
                client, base_url, model, prompt, max_tokens, timeout_s, extra
            )

    return asyncio.run(run())


def replicas_served(base_url: str, model: str, expected: set[str], deadline: float) -> set[str]:
    """Send tiny completions through the front door at ``base_url`` until each of ``expected``
    answered one (the front door's replica header names it) or the monotonic ``deadline``
    passes; the replicas that answered.

    A replica that Serve has just started answers /health before the front door's router sends
    it anything: only a request it answered shows it is back in rotation.
    """
    served: set[str] = set()
    while not served >= expected and time.monotonic() < deadline:
        result = stream_completion(base_url, model, "whole", max_tokens=2, timeout_s=10)
        if result.ok and result.replica:
            served.add(result.replica)
        else:
            time.sleep(0.2)
    return served
