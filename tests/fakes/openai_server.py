"""A fake OpenAI-compatible server that streams completions, for the load tests and benches.

It serves ``GET /v1/models`` and ``POST /v1/completions`` with ``stream: true`` the way vLLM
does: one SSE ``data:`` event per token, an optional usage event, then ``data: [DONE]``. The
first token waits ``first_delay_s`` and every later one ``delay_s``, so a client's TTFT and
inter-token latency have known lower bounds. It runs on its own event loop in a thread,
because the tests block on Locust subprocesses while it serves.

Run it alone (``python -m tests.fakes.openai_server --port 8123``) to try Locust by hand.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import dataclass, field

from aiohttp import web

from tests.fakes.layer_servers import ThreadedServer

FAKE_MODEL = "fake-tiny-llama"


@dataclass
class FakeBehaviour:
    """What the fake server answers; tests read what it received."""

    chunks: int = 5
    first_delay_s: float = 0.05
    delay_s: float = 0.02
    fail_every: int = 0  # every n-th completion answers 500; 0 never
    break_every: int = 0  # every n-th completion drops the connection after its first chunk
    error_every: int = 0  # every n-th completion sends vLLM's in-stream error event after its first chunk
    # The replica a front door names (x-inferchaos-replica) on each completion, in turn; none if empty.
    replicas: list[str] = field(default_factory=list)
    completions: int = 0
    models_seen: list[str] = field(default_factory=list)
    prompt_chars: list[int] = field(default_factory=list)
    ignore_eos_seen: list[bool] = field(default_factory=list)
    max_tokens_seen: list[int] = field(default_factory=list)


def _event(payload: dict | str) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload)
    return f"data: {data}\n\n".encode()


def build_app(behaviour: FakeBehaviour) -> web.Application:
    """The aiohttp application of the fake server."""

    async def models(_request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": FAKE_MODEL, "object": "model"}]})

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        behaviour.completions += 1
        behaviour.models_seen.append(str(body.get("model")))
        behaviour.prompt_chars.append(len(str(body.get("prompt", ""))))
        behaviour.ignore_eos_seen.append(bool(body.get("ignore_eos")))
        behaviour.max_tokens_seen.append(int(body.get("max_tokens", 0)))
        if behaviour.fail_every and behaviour.completions % behaviour.fail_every == 0:
            return web.json_response({"error": "injected failure"}, status=500)
        if not body.get("stream"):
            usage = {"prompt_tokens": len(str(body.get("prompt", "")).split()), "completion_tokens": 1}
            return web.json_response(
                {"id": "cmpl-1", "choices": [{"index": 0, "text": " t0"}], "usage": usage}
            )
        headers = {"Content-Type": "text/event-stream"}
        if behaviour.replicas:
            headers["x-inferchaos-replica"] = behaviour.replicas[
                (behaviour.completions - 1) % len(behaviour.replicas)
            ]
        response = web.StreamResponse(headers=headers)
        await response.prepare(request)
        broken = behaviour.break_every and behaviour.completions % behaviour.break_every == 0
        errored = behaviour.error_every and behaviour.completions % behaviour.error_every == 0
        for index in range(behaviour.chunks):
            await asyncio.sleep(behaviour.first_delay_s if index == 0 else behaviour.delay_s)
            await response.write(_event({"id": "cmpl-1", "choices": [{"index": 0, "text": f" t{index}"}]}))
            if broken and request.transport is not None:
                request.transport.close()
                return response
            if errored:
                await response.write(
                    _event({"error": {"message": "injected mid-stream failure", "code": 500}})
                )
                break
        if not errored and (body.get("stream_options") or {}).get("include_usage"):
            usage = {
                "prompt_tokens": 3,
                "completion_tokens": behaviour.chunks,
                "total_tokens": 3 + behaviour.chunks,
            }
            await response.write(_event({"id": "cmpl-1", "choices": [], "usage": usage}))
        await response.write(_event("[DONE]"))
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/completions", completions)
    return app


class FakeOpenAIServer(ThreadedServer):
    """The fake server on 127.0.0.1 and a free port, served from a background thread."""

    def __init__(self, behaviour: FakeBehaviour | None = None, port: int | None = None) -> None:
        self.behaviour = behaviour or FakeBehaviour()
        super().__init__(build_app(self.behaviour), "fake-openai", port)


def main() -> None:
    """Serve the fake until Ctrl-C."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=8123)
    parser.add_argument("--chunks", type=int, default=5)
    parser.add_argument("--first-delay", type=float, default=0.05)
    parser.add_argument("--delay", type=float, default=0.02)
    args = parser.parse_args()
    behaviour = FakeBehaviour(chunks=args.chunks, first_delay_s=args.first_delay, delay_s=args.delay)
    web.run_app(build_app(behaviour), host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    main()
