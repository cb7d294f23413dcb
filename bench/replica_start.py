"""A replica's vLLM start-up: plain `python -m` against a fork of a node's preloaded launcher.

Prints, measured side by side in one run (``ROUNDS`` of each, alternating), the time from the
start to /health 200 of the environment's model served both ways, their medians and the ratio
fork / plain; and how long the launcher took to import vLLM once. Each server is started and
ended alone, as a replica Serve starts again is.

Run: .venv/bin/python bench/replica_start.py   (about 4 minutes on 2 cores)
"""

from __future__ import annotations

import logging
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_server import bench_server  # bench/, the folder of this script

from inferchaos.environments.local.config import LocalEnvConfig
from inferchaos.environments.local.model import ensure_model
from inferchaos.environments.local.vllm_launcher import MODULE, exits_dir, launcher_name, vllm_env
from inferchaos.primitives.processes import spawn_process_group

ROUNDS = 3
READY_LINE = "ready (pid"


def start_launcher(home: Path) -> tuple[str, int, float]:
    """A launcher of this process's own; its name, pid and seconds to its ready line."""
    name = launcher_name(f"bench{os.getpid()}", "replica-start")
    log = home / "launcher.log"
    argv = [sys.executable, "-m", MODULE, "--name", name, "--exits", str(exits_dir(home))]
    started = time.monotonic()
    pid = spawn_process_group([*argv, "--node-pid", str(os.getpid())], vllm_env(), log)
    while READY_LINE not in (log.read_text() if log.exists() else ""):
        if time.monotonic() - started > 300:
            raise SystemExit(f"the launcher was not ready in 300 s; see {log}")
        time.sleep(0.1)
    return name, pid, time.monotonic() - started


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    home = Path(tempfile.mkdtemp(prefix="inferchaos-bench-start-"))
    config = LocalEnvConfig()
    ensure_model(config.model)
    name, pid, import_s = start_launcher(home)
    plain: list[float] = []
    forked: list[float] = []
    try:
        for round_ in range(ROUNDS):
            for how, times in ((None, plain), (name, forked)):
                with bench_server(config.model, home, config.kv_cache_tokens, launcher=how) as server:
                    times.append(server.ready_after_s)
                print(f"round {round_ + 1}: {'fork' if how else 'plain'} {times[-1]:.1f} s", flush=True)
    finally:
        os.killpg(pid, signal.SIGKILL)
    print(f"launcher import of vLLM, once per node: {import_s:.1f} s")
    for label, times in (("plain", plain), ("forked", forked)):
        each = ", ".join(f"{t:.1f}" for t in times)
        print(f"{label} start to /health 200: median {statistics.median(times):.1f} s ({each})")
    print(f"ratio fork / plain: {statistics.median(forked) / statistics.median(plain):.2f}")


if __name__ == "__main__":
    main()
