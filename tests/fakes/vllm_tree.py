"""The stand-in vLLM process group of tests/fakes/vllm_process_tree.py, started and ended around a test.

The tree is replica-0 of a :class:`FakeReplicaEnv`: an "API server" (the group's leader) with
an "EngineCore", its "worker", and a "helper". Every process is ended by pid afterwards,
stopped or not, so a failing test leaves nothing running.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil

from inferchaos.faults.base import wait_until
from inferchaos.primitives import http
from inferchaos.primitives.processes import descendants, free_port
from tests.fakes.replica_env import FakeReplicaEnv
from tests.fakes.vllm_process_tree import ENGINE_TITLE

TREE_SCRIPT = Path(__file__).with_name("vllm_process_tree.py")


@dataclass
class Tree:
    """The stand-in process group of replica-0, by role."""

    server: int
    engine: int
    worker: int
    helper: int
    url: str

    @property
    def pids(self) -> set[int]:
        return {self.server, self.engine, self.worker, self.helper}

    def env(self, others: tuple[str, ...] = ("healthy",)) -> FakeReplicaEnv:
        return FakeReplicaEnv.around(self.server, self.url, others)


def roles(server_pid: int) -> dict[str, int]:
    """The server's descendants by the role on their command line."""
    found = {}
    for proc in descendants(server_pid)[1:]:
        try:
            found[proc.cmdline()[-1]] = proc.pid
        except (psutil.NoSuchProcess, IndexError):
            continue
    return found


def answers(url: str) -> bool:
    """Whether the stand-in server answers /health with 200 within a second."""
    try:
        return http.get(f"{url}/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@contextmanager
def running_tree(metrics: Path) -> Iterator[Tree]:
    """Start the tree serving ``metrics`` at /metrics; end every process of it on exit."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [sys.executable, str(TREE_SCRIPT), "server", str(port), str(metrics)], start_new_session=True
    )
    started: list[psutil.Process] = []
    try:
        up = wait_until(lambda: len(roles(server.pid)) == 3 and answers(url), 30, 0.05)
        assert up is not None, f"the stand-in vLLM tree did not come up: {roles(server.pid)}"
        started = descendants(server.pid)
        found = roles(server.pid)
        yield Tree(server.pid, found[ENGINE_TITLE], found["worker"], found["helper"], url)
    finally:
        # By pid (psutil refuses a pid that was reused), stopped or not: SIGKILL ends both.
        for proc in started:
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                continue
        if not started:
            os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=10)
