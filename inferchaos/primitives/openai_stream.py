"""One streaming completion against an OpenAI-compatible server, timed per chunk.

The canary probe, the game day and the tests all need the same thing: send a small
streaming request, note when the first SSE data chunk arrives (TTFT) and when the stream
ends (e2e). A refused or failed request is a result with ``ok=False``, never an exception,
because a failure is exactly what a chaos run wants to record.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

import httpx


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

    @property
    def inter_token_s(self) -> float | None:
        """Mean gap between data chunks after the first, or None with fewer than two."""
        if len(self.chunk_times_s) < 2:
            return None
        gaps = [b - a for a, b in zip(self.chunk_times_s, self.chunk_times_s[1:], strict=False)]
        return sum(gaps) / len(gaps)


def _parse_sse_data(line: str) -> dict | None:
    if not line.startswith("data:"):
        return None
    payload = line[len("data:") :].strip()
    if not payload or payload == "[DONE]":
        return None
    return json.loads(payload)


async def stream_completion_async(
    client: httpx.AsyncClient,
    base_url: str,
    model: str,
    prompt: str,
    max_tokens: int = 16,
    timeout_s: float = 30.0,
    extra: dict | None = None,
) -> StreamResult:
    """POST /v1/completions with ``stream: true`` and time it; never raises on HTTP failure."""
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "stream": True, **(extra or {})}
    start = time.perf_counter()
    times: list[float] = []
    text: list[str] = []
    try:
        async with client.stream(
            "POST", f"{base_url}/v1/completions", json=body, timeout=timeout_s
        ) as response:
            replica = response.headers.get("x-inferchaos-replica", "")
            if response.status_code != 200:
                detail = (await response.aread()).decode(errors="replace")[:200]
                return StreamResult(False, response.status_code, None, time.perf_counter() - start, 0, "",
                                    f"HTTP {response.status_code}: {detail}", replica)  # fmt: skip
            async for line in response.aiter_lines():
                data = _parse_sse_data(line)
                if data is None:
                    continue
                times.append(time.perf_counter() - start)
                for choice in data.get("choices", []):
                    text.append(choice.get("text") or "")
    except (httpx.HTTPError, json.JSONDecodeError) as e:
        return StreamResult(False, 0, times[0] if times else None, time.perf_counter() - start, len(times),
                            "".join(text), f"{type(e).__name__}: {e}", "", times)  # fmt: skip
    e2e = time.perf_counter() - start
    ok = bool(times)
    return StreamResult(ok, 200, times[0] if times else None, e2e, len(times), "".join(text),
                        "" if ok else "stream ended without a data chunk", replica, times)  # fmt: skip


def stream_completion(
    base_url: str, model: str, prompt: str, max_tokens: int = 16, timeout_s: float = 30.0
) -> StreamResult:
    """Blocking wrapper of :func:`stream_completion_async` for CLIs and tests."""
    import asyncio

    async def run() -> StreamResult:
        async with httpx.AsyncClient() as client:
            return await stream_completion_async(client, base_url, model, prompt, max_tokens, timeout_s)

    return asyncio.run(run())
