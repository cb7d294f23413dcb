"""How long the local environment takes to come up, and what it costs in memory.

Prints, measured side by side in one run:
- the cold start of one vLLM replica on its own (server start to /health 200);
- the time to ready of the whole environment (Ray head + workers + replicas + front door);
- their ratio: replicas start in parallel, so the target is at most 1.3;
- the total RSS of the running environment at rest (target at most 8 GiB);
- the time to ready with every worker in a network namespace of its own (`--network netns`)
  against loopback, alternating, ``ROUNDS`` of each: the target is at most 10 % more.

Run: .venv/bin/python bench/env_startup.py   (about 6-8 minutes on 2 cores; the netns rounds
need root, iproute2 and nftables, and are left out, saying why, elsewhere)
It uses a private state folder and port slot 1, so a running environment is not disturbed.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from bench_server import bench_server  # bench/, the folder of this script

from inferchaos.environments.local.config import LocalEnvConfig
from inferchaos.environments.local.env import LocalEnvironment
from inferchaos.environments.local.model import ensure_model
from inferchaos.environments.local.network import LOOPBACK, NETNS, netns_unavailable
from inferchaos.primitives.processes import free_port, processes_with_marker


def cold_start_one_replica(config: LocalEnvConfig, home: Path) -> float:
    """Start one vLLM server exactly as a replica does, alone, and time it to /health 200."""
    with bench_server(config.model, log_dir=home, kv_cache_tokens=config.kv_cache_tokens) as server:
        return server.ready_after_s


ROUNDS = 2


def time_to_ready(config: LocalEnvConfig, home: Path) -> float:
    """Bring the environment up from nothing and down again; seconds until it was ready."""
    environment = LocalEnvironment(config, state_dir=home / "env" / "local", progress=lambda m: None)
    started = time.monotonic()
    environment.up()
    ready = time.monotonic() - started
    environment.down()
    return ready


def main() -> None:
    home = Path(tempfile.mkdtemp(prefix="inferchaos-bench-"))
    os.environ["INFERCHAOS_HOME"] = str(home)
    config = LocalEnvConfig(
        port_slot=1, front_door_port=free_port(), replica_base_port=8400, network=LOOPBACK
    )
    ensure_model(config.model)  # generated once, outside both timings

    cold = cold_start_one_replica(config, home)
    environment = LocalEnvironment(config, state_dir=home / "env" / "local", progress=lambda m: None)
    started = time.monotonic()
    environment.up()
    ready = time.monotonic() - started
    try:
        time.sleep(5)  # let start-up work settle before reading memory at rest
        state = environment.load_state()
        procs = processes_with_marker(state.env_id)
        rss = sum(p.memory_info().rss for p in procs)
    finally:
        environment.down()

    print(f"replica cold start (alone)      : {cold:7.1f} s")
    print(f"environment ready (all parts)   : {ready:7.1f} s   (target <= 120 s)")
    print(f"ready / one replica cold start  : {ready / cold:7.2f}     (target <= 1.3)")
    print(
        f"environment RSS at rest         : {rss / 2**30:7.2f} GiB ({len(procs)} processes; target <= 8 GiB)"
    )
    if (why := netns_unavailable()) is not None:
        print(f"netns against loopback          : not measured ({why})")
        return
    netns_config = replace(config, network=NETNS)
    loopback, netns = [], []
    for _ in range(ROUNDS):
        loopback.append(time_to_ready(config, home))
        netns.append(time_to_ready(netns_config, home))
    ratio = statistics.median(netns) / statistics.median(loopback)
    print(f"ready, loopback ({ROUNDS} rounds)     : {', '.join(f'{t:.1f}' for t in loopback)} s")
    print(f"ready, netns ({ROUNDS} rounds)        : {', '.join(f'{t:.1f}' for t in netns)} s")
    print(f"netns / loopback (medians)      : {ratio:7.2f}     (target <= 1.10)")


if __name__ == "__main__":
    main()
