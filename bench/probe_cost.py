"""What sampling costs, and how fast a breach shows up in the timeline.

Prints, measured side by side in one run against the local environment:
- one full sampling tick (every probe: vLLM per replica, canary, Ray, device) in ms at rest;
- the sampler's CPU share of one core at 1 Hz (this process's CPU time / wall time);
- the same two with N idle actors and 50 pending placement groups in the Ray cluster;
- the detection latency: from killing a replica's engine (a known injection time) to the end
  of the first tick whose rows show it (vllm.healthy 0 or the replica's probe failing).

Targets: a tick at most 50 ms at rest and at most 250 ms with 1,000 actors and 50 pending
groups; at most 5% of one core at 1 Hz; detection within one interval plus 0.5 s.
Each idle actor is a Ray worker process (about 60 MB), so on a 24 GiB, 2-core machine the
default is 100 actors; pass --actors to change it.

Run: .venv/bin/python bench/probe_cost.py [--actors N] [--ticks N]
It attaches to the running local environment (`inferchaos env up` first).
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import time
from typing import Any

from environments.local.env import LocalEnvironment
from experiments.probes import build_probes
from faults.ledger import Ledger
from faults.vllm.engine import KillEngine
from steady_state.sampler import Sampler, Tick
from steady_state.timeline import Timeline


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _sample(env: Any, ticks: int, interval_s: float, on_tick: Any = None) -> tuple[list[float], float]:
    probes, canary = build_probes(env)
    durations: list[float] = []

    def record(tick: Tick) -> None:
        durations.append(tick.duration_s)
        if on_tick is not None:
            on_tick(tick)

    sampler = Sampler(probes, Timeline(), interval_s, on_tick=record,
                      timeouts={p.name: interval_s for p in probes if p.name == "ray"})  # fmt: skip
    await canary.start()
    cpu0, wall0 = _cpu_s(), time.monotonic()
    await sampler.run(max_ticks=ticks)
    cpu_share = (_cpu_s() - cpu0) / (time.monotonic() - wall0)
    await canary.stop()
    for probe in probes:
        closer = getattr(probe, "aclose", None)
        if closer is not None:
            await closer()
    return durations, cpu_share


def _load_ray(env: LocalEnvironment, actors: int, groups: int) -> tuple[list[Any], list[Any]]:
    import ray
    from ray.util.placement_group import placement_group

    env.connect_ray()

    @ray.remote(num_cpus=0)
    class Idle:
        def ping(self) -> int:
            return 1

    handles = [Idle.options(name=f"bench-idle-{i}", namespace="inferchaos-bench").remote() for i in range(actors)]
    deadline = time.monotonic() + 600
    ready: list[Any] = []
    while time.monotonic() < deadline and len(ready) < actors:
        ready, _ = ray.wait([h.ping.remote() for h in handles], num_returns=actors, timeout=30)
    # Infeasible on purpose: they stay PENDING, as stalled groups do.
    pgs = [placement_group([{"GPU": 1000.0}], strategy="PACK") for _ in range(groups)]
    return handles, pgs


def _unload_ray(handles: list[Any], pgs: list[Any]) -> None:
    import ray
    from ray.util.placement_group import remove_placement_group

    for pg in pgs:
        remove_placement_group(pg)
    for handle in handles:
        ray.kill(handle)


def _detection_latency(env: LocalEnvironment, interval_s: float) -> float | None:
    fault, ledger = KillEngine(), Ledger()
    seen: dict[str, float] = {}
    injected: dict[str, float] = {}

    def on_tick(tick: Tick) -> None:
        if "at" in seen or "t" not in injected:
            return
        for row in tick.rows:
            shows = (row.probe == "vllm.healthy" and row.labels.get("replica") == "replica-0" and row.value == 0) or (
                row.probe == "vllm@replica-0" and row.error
            )
            if shows and row.t + tick.duration_s >= injected["t"]:
                seen["at"] = time.time()

    async def run() -> None:
        task = asyncio.create_task(_sample(env, 20, interval_s, on_tick))
        await asyncio.sleep(4)
        handle = await asyncio.to_thread(fault.inject, env, {"replica": 0}, ledger)
        injected["t"] = handle.injected_at or time.time()
        await task
        await asyncio.to_thread(fault.revert, env, handle, ledger)

    asyncio.run(run())
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not all(r.state == "healthy" for r in env.replica_records()):
        time.sleep(1)
    return seen["at"] - injected["t"] if "at" in seen else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actors", type=int, default=100)
    parser.add_argument("--groups", type=int, default=50)
    parser.add_argument("--ticks", type=int, default=20)
    args = parser.parse_args()
    env = LocalEnvironment()
    env.connect_ray()

    rest, rest_cpu = asyncio.run(_sample(env, args.ticks, 1.0))
    handles, pgs = _load_ray(env, args.actors, args.groups)
    try:
        loaded, loaded_cpu = asyncio.run(_sample(env, args.ticks, 1.0))
    finally:
        _unload_ray(handles, pgs)
    latency = _detection_latency(env, 1.0)

    def ms(values: list[float]) -> str:
        return f"median {statistics.median(values) * 1000:6.1f} ms, max {max(values) * 1000:6.1f} ms"

    print(f"tick at rest                          : {ms(rest)}   (target <= 50 ms)")
    print(f"sampler CPU at 1 Hz, at rest          : {rest_cpu:6.1%} of one core (target <= 5%)")
    print(f"tick, {args.actors} actors + {args.groups} pending groups : {ms(loaded)}   (target <= 250 ms at 1,000 actors)")
    print(f"sampler CPU at 1 Hz, loaded           : {loaded_cpu:6.1%} of one core")
    print(f"detection latency (engine kill)       : {latency:.2f} s (target <= 1.5 s)" if latency is not None
          else "detection latency (engine kill)       : not detected within 16 ticks")  # fmt: skip


if __name__ == "__main__":
    main()
