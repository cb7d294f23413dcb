"""Shared fixtures of the steady-state unit tests: recorded /metrics, an in-process fake
vLLM replica / front door (aiohttp on 127.0.0.1, never a real vLLM), and a builder of
synthetic timelines."""

from __future__ import annotations

import asyncio
import json
import math
import socket
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from inferchaos.steady_state.timeline import Row, Timeline

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "metrics"


@pytest.fixture(scope="session")
def idle_metrics() -> str:
    """/metrics of an idle local replica."""
    return (FIXTURES / "vllm_idle.txt").read_text()


@pytest.fixture(scope="session")
def flooded_metrics() -> str:
    """/metrics of the same replica under a long-context flood (KV 0.935, 2 running, 2 waiting)."""
    return (FIXTURES / "vllm_flooded.txt").read_text()


@dataclass
class FakeServer:
    """What the fake server answers; tests change it between requests."""

    metrics: list[str] = field(default_factory=list)
    metrics_status: int = 200
    health_status: int = 200
    completion_status: int = 200
    chunks: int = 3
    chunk_delay_s: float = 0.0
    hang: asyncio.Event | None = None
    # Waited on after the response headers went out, before the first chunk: a stalled stream.
    stall: asyncio.Event | None = None
    replica_header: str = "replica-0"
    # The server behind the replica (x-inferchaos-server); none when empty, as off the local front door.
    server_header: str = ""
    # Whether an error answer (completion_status other than 200) names the replica too.
    error_replica_header: bool = False
    # Sent as `data: {"error": ...}` after the first chunk, as vLLM reports a failure mid-stream.
    stream_error: str = ""
    metrics_served: int = 0
    completions_started: int = 0
    url: str = ""

    @property
    def metrics_url(self) -> str:
        return f"{self.url}/metrics"

    @property
    def health_url(self) -> str:
        return f"{self.url}/health"


def _app(state: FakeServer) -> web.Application:
    async def metrics(_: web.Request) -> web.Response:
        index = min(state.metrics_served, len(state.metrics) - 1)
        state.metrics_served += 1
        return web.Response(text=state.metrics[index], status=state.metrics_status)

    async def health(_: web.Request) -> web.Response:
        return web.Response(status=state.health_status)

    async def completions(request: web.Request) -> web.StreamResponse:
        state.completions_started += 1
        body = await request.json()
        if state.completion_status != 200:
            headers = {"x-inferchaos-replica": state.replica_header} if state.error_replica_header else {}
            return web.Response(status=state.completion_status, text="engine dead", headers=headers)
        if state.hang is not None:
            await state.hang.wait()
        headers = {"x-inferchaos-replica": state.replica_header}
        if state.server_header:
            headers["x-inferchaos-server"] = state.server_header
        response = web.StreamResponse(headers=headers)
        response.content_type = "text/event-stream"
        await response.prepare(request)
        if state.stall is not None:
            await state.stall.wait()
        for index in range(state.chunks):
            await asyncio.sleep(state.chunk_delay_s)
            chunk = {"choices": [{"text": f"t{index}"}], "model": body["model"]}
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
            if state.stream_error:
                await response.write(f"data: {json.dumps({'error': state.stream_error})}\n\n".encode())
                break
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/health", health)
    app.router.add_post("/v1/completions", completions)
    return app


@pytest.fixture
async def fake_server() -> AsyncIterator[FakeServer]:
    """A fake replica / front door on 127.0.0.1 with a free port."""
    state = FakeServer()
    server = TestServer(_app(state), host="127.0.0.1")
    await server.start_server()
    state.url = str(server.make_url("")).rstrip("/")
    try:
        yield state
    finally:
        for event in (state.hang, state.stall):
            if event is not None:
                event.set()
        await server.close()


@pytest.fixture
def refused_url() -> str:
    """A URL on 127.0.0.1 where nothing listens: connections are refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


class Synth:
    """Synthetic timelines, with times given as seconds after :attr:`t0`."""

    t0 = 1_800_000_000.0

    def rows(
        self,
        probe: str,
        values: Iterable[float],
        *,
        start: float = 0.0,
        step: float = 1.0,
        labels: Mapping[str, str] | None = None,
    ) -> list[Row]:
        """Rows of ``probe`` at ``t0 + start + k * step``; a NaN value becomes a failed read."""
        out = []
        for k, value in enumerate(values):
            t = self.t0 + start + k * step
            error = "ProbeError: refused" if math.isnan(value) else ""
            out.append(Row(t, probe, dict(labels or {}), float(value), error))
        return out

    def error_rows(
        self,
        probe_object: str,
        times: Iterable[float],
        error: str = "ProbeError: refused",
        labels: Mapping[str, str] | None = None,
    ) -> list[Row]:
        """Failed-read rows of a Probe object (e.g. ``vllm@replica-0``) at the given offsets,
        with the labels the sampler copies from that object (``{"replica": "replica-0"}``)."""
        return [Row(self.t0 + t, probe_object, dict(labels or {}), math.nan, error) for t in times]

    def timeline(self, *row_lists: list[Row], **marks: float) -> Timeline:
        """A Timeline of the rows (in time order) with marks at the given offsets."""
        timeline = Timeline()
        timeline.append_tick(sorted((r for rs in row_lists for r in rs), key=lambda r: r.t))
        for name, offset in marks.items():
            timeline.mark(name, self.t0 + offset)
        return timeline


@pytest.fixture
def synth() -> Synth:
    """Builder of synthetic timelines."""
    return Synth()
