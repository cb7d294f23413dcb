"""A replica's teardown ends its vLLM process group the way vLLM shuts down: on SIGTERM, even when hung."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import psutil

from inferchaos.environments.local.serve_app import stop_process_group
from inferchaos.faults.base import wait_until
from inferchaos.primitives.processes import spawn_process_group

# A server and its child, each noting the SIGTERM it handled before exiting (as vLLM's
# API server and EngineCore shut down on it). A SIGKILL leaves no note.
SERVER = """
import os, signal, subprocess, sys, time
notes = sys.argv[1]
def on_term(signum, frame):
    with open(notes, "a") as f:
        f.write(f"{os.getpid()}\\n")
    os._exit(0)
signal.signal(signal.SIGTERM, on_term)
if len(sys.argv) == 2:
    subprocess.Popen([sys.executable, __file__, notes, "child"])
with open(notes + ".ready", "a") as f:
    f.write(f"{os.getpid()}\\n")
while True:
    time.sleep(0.1)
"""


def _server_group(tmp_path: Path) -> tuple[int, Path]:
    script, notes = tmp_path / "server.py", tmp_path / "terms"
    script.write_text(SERVER)
    pid = spawn_process_group([sys.executable, str(script), str(notes)], dict(os.environ), tmp_path / "log")
    ready = Path(f"{notes}.ready")
    assert wait_until(lambda: ready.exists() and len(ready.read_text().split()) == 2, 30.0, 0.1)
    return pid, notes


def test_a_hung_replica_is_ended_by_sigterm_not_by_waiting_out_the_grace(tmp_path: Path) -> None:
    pid, notes = _server_group(tmp_path)
    group = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    os.killpg(pid, signal.SIGSTOP)  # what vllm.hang_engine does to a whole replica
    assert wait_until(lambda: all(p.status() == psutil.STATUS_STOPPED for p in group), 10.0, 0.05)
    stop_process_group(pid, grace_s=30.0)
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in group)
    # Each process handled the SIGTERM itself: none was left stopped until the SIGKILL.
    assert sorted(int(n) for n in notes.read_text().split()) == sorted(p.pid for p in group)


def test_a_running_replica_is_ended_by_sigterm(tmp_path: Path) -> None:
    pid, notes = _server_group(tmp_path)
    group = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    stop_process_group(pid, grace_s=30.0)
    assert sorted(int(n) for n in notes.read_text().split()) == sorted(p.pid for p in group)
