"""A vLLM server of the benches' own, on a generated model, started and ended by the bench.

The local environment's replicas serve a model whose TTFT is 6-8 ms on these machines: below
what any Python client on a shared 2-core box measures to 10% (a client adds 2-6 ms, and
Locust keeps times under 100 ms in whole milliseconds). A bench that compares clients needs a
server whose TTFT is in the range real deployments see (tens of milliseconds and up); a deeper
and wider generated model gives one, without a download.
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from inferchaos.environments.local.model import TinyModelSpec, ensure_model
from inferchaos.environments.local.serve_app import ReplicaLaunch, stop_process_group, vllm_args, vllm_argv
from inferchaos.environments.local.vllm_launcher import LaunchRequest, vllm_env
from inferchaos.environments.local.vllm_launcher import launch as vllm_launch
from inferchaos.errors import EnvironmentError_
from inferchaos.primitives.processes import free_port, pid_alive, spawn_process_group

logger = logging.getLogger(__name__)

# 8 layers of width 512 (~25 M parameters): TTFT 25-45 ms at concurrency 4 on 2 cores.
BENCH_MODEL = TinyModelSpec(layers=8, hidden_size=512, heads=8, kv_heads=8, intermediate_size=1024)
KV_CACHE_TOKENS = 4096
READY_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class BenchServer:
    """A running server: where it answers, what it serves, and how long it took to start."""

    url: str
    model: str
    model_dir: Path
    pid: int
    ready_after_s: float  # from the process start to the first /health 200


@contextmanager
def bench_server(
    spec: TinyModelSpec = BENCH_MODEL,
    log_dir: Path | None = None,
    kv_cache_tokens: int = KV_CACHE_TOKENS,
    launcher: str | None = None,
) -> Iterator[BenchServer]:
    """Generate ``spec`` (once, cached), serve it on a free loopback port, end it on exit.

    The server starts as a replica's does (same arguments and environment): as a fork of the
    running vLLM launcher ``launcher``, or with ``python -m`` without one. It is a process group
    of its own, ended by its pid, also when the bench fails or is interrupted. The model is
    generated before the clock of ``ready_after_s`` starts.
    """
    model_dir = ensure_model(spec)
    port = free_port()
    launch = ReplicaLaunch(
        model_dir=str(model_dir),
        served_model_name=spec.name,
        max_model_len=spec.max_model_len,
        kv_cache_bytes=kv_cache_tokens * spec.kv_bytes_per_token,
        base_port=port,
        state_dir="",
        max_slots=1,
    )
    log = (log_dir or Path(tempfile.mkdtemp(prefix="bench-server-"))) / "vllm-server.log"
    url = f"http://127.0.0.1:{port}"
    logger.info("starting a vLLM server for %s on %s (log %s)", spec.name, url, log)
    started = time.monotonic()
    if launcher is None:
        pid = spawn_process_group(vllm_argv(launch, port), vllm_env(), log)
    else:
        request = LaunchRequest(vllm_args(launch, port), vllm_env(), str(log), str(Path.cwd()))
        pid = vllm_launch(launcher, request, READY_TIMEOUT_S)
    try:
        _wait_ready(url, pid, log, started)
        yield BenchServer(url, spec.name, model_dir, pid, ready_after_s=time.monotonic() - started)
    finally:
        stop_process_group(pid)
        logger.info("bench server pid %d ended", pid)


def _wait_ready(url: str, pid: int, log: Path, started: float) -> None:
    last_note = started
    while time.monotonic() - started < READY_TIMEOUT_S:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                logger.info("server ready after %.1f s", time.monotonic() - started)
                return
        except httpx.HTTPError:
            pass  # not listening yet
        if not pid_alive(pid):
            raise EnvironmentError_(f"the bench's vLLM server exited while starting; see {log}")
        if time.monotonic() - last_note >= 15:
            logger.info("still waiting for the server (%.0f s)", time.monotonic() - started)
            last_note = time.monotonic()
        time.sleep(0.25)  # the poll interval bounds the error of ready_after_s
    raise EnvironmentError_(f"the bench's vLLM server was not ready in {READY_TIMEOUT_S:.0f} s; see {log}")
