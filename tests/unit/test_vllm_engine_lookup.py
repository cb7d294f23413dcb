"""vllm.kill_engine and the hang faults find a server's EngineCore, titled or not.

The server is a real process (tests/fixtures/spawning_server.py) that spawns its child as vLLM
spawns the EngineCore; only the title differs. An EngineCore whose setproctitle never took
kept multiprocessing's command line in a fresh-clone run, and every fault on it refused.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from inferchaos.faults.vllm.engine import find_engine_core

SERVER = Path(__file__).resolve().parents[1] / "fixtures" / "spawning_server.py"


@pytest.mark.parametrize("title", ["titled", "untitled"])
def test_the_engine_core_is_the_servers_spawned_child(title: str) -> None:
    server = subprocess.Popen(
        [sys.executable, str(SERVER), title], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert server.stdout is not None
        child = int(server.stdout.readline())
        assert find_engine_core(server.pid).pid == child
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=30)
