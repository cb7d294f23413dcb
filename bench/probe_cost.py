"""What sampling costs, and how fast a breach shows up in the timeline.

Prints, measured side by side in one run against the local environment:
- one full sampling tick (every probe: vLLM per replica, canary, Ray, device) in ms at rest;
- the sampler's CPU share of one core at 1 Hz (this process's CPU time / wall time);
- the same two with N idle actors and 50 pending placement groups in the Ray cluster;
- the detection latency: from killing a replica's engine (a known injection time) to the end
  of the first tick whose rows show it (vllm.healthy 0 or the replica's probe failing).

Targets: a tick at most 50 ms at rest and at most 250 ms with 1,000 actors and 50 pending
groups; at most 5% of one core at 1 Hz; detection within one interval plus 0.5 s.
Each idle actor is a Ray worker process (about 60 MB): 1,000 of them do not fit beside the
environment in 24 GiB. So by default 100 are live idle actors and 900 are actors waiting for a
resource no node has: each is an actor record the state API lists and counts like any other
(which is what the Ray probe pays for), without a process. This process does not report task
events, so their creation tasks, which would stay pending where an idle actor's is finished,
are not listed either. --actors and --idle-actors change the numbers.

Run: .venv/bin/python bench/probe_cost.py [--actors N] [--ticks N]
It attaches to the running local environment (`inferchaos env up` first).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import resource
import statistics
import time
from typing import Any

from inferchaos.environments.local.env import LocalEnvironment
from inferchaos.faults.base import wait_until
from inferchaos.faults.ledger import Ledger
from inferchaos.faults.vllm.engine import KillEngine
from inferchaos.run.probe_set import build_probes
from inferchaos.steady_state.canary import phase_between_ticks
from inferchaos.steady_state.sampler import Sampler, Tick
from inferchaos.steady_state.timeline import Timeline


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

    sampler = Sampler(
        probes,
        Timeline(),
        interval_s,
        on_tick=record,
        timeouts={p.name: interval_s for p in probes if p.name == "ray"},
    )
    await canary.start(phase_between_ticks(canary.config.rate_per_s, interval_s))
    cpu0, wall0 = _cpu_s(), time.monotonic()
    await sampler.run(max_ticks=ticks)
    cpu_share = (_cpu_s() - cpu0) / (time.monotonic() - wall0)
    await canary.stop()
    for probe in probes:
        closer = getattr(probe, "aclose", None)
        if closer is not None:
            await closer()
    return durations, cpu_share


def _load_ray(env: LocalEnvironment, actors: int, idle: int, groups: int) -> tuple[list[Any], list[Any]]:
    """``actors`` actor records: ``idle`` idle actors (a worker process each), the rest waiting for
    a resource no node has (a record in the GCS and the state API, but no process)."""
    import ray
    from ray.util.placement_group import placement_group

    env.connect_ray()

    @ray.remote(num_cpus=0)
    class Idle:
        def ping(self) -> int:
            return 1

    @ray.remote(num_cpus=0, resources={"inferchaos-bench-nowhere": 1})
    class Unplaceable:
        pass

    idle = min(idle, actors)
    handles = [
        Idle.options(name=f"bench-idle-{i}", namespace="inferchaos-bench").remote() for i in range(idle)
    ]
    deadline = time.monotonic() + 600
    ready: list[Any] = []
    while time.monotonic() < deadline and len(ready) < idle:
        ready, _ = ray.wait([h.ping.remote() for h in handles], num_returns=idle, timeout=30)
    handles += [
        Unplaceable.options(name=f"bench-unplaceable-{i}", namespace="inferchaos-bench").remote()
        for i in range(actors - idle)
    ]
    # Infeasible on purpose: they stay PENDING, as stalled groups do.
    pgs = [placement_group([{"GPU": 1000.0}], strategy="PACK") for _ in range(groups)]
    _wait_registered(actors, groups)
    return handles, pgs


def _wait_registered(actors: int, groups: int, timeout_s: float = 120.0) -> None:
    """Until the state API lists every bench actor and pending group, so sampling sees the full load."""
    from ray.util.state import list_actors, list_placement_groups

    def registered() -> bool:
        listed = len(
            list_actors(
                filters=[("ray_namespace", "=", "inferchaos-bench")],
                limit=actors + 100,
                raise_on_missing_output=False,
            )
        )
        pending = len(
            list_placement_groups(
                filters=[("state", "=", "PENDING")], limit=groups + 100, raise_on_missing_output=False
            )
        )
        print(f"  GCS lists {listed}/{actors} bench actors, {pending}/{groups} pending groups", flush=True)
        return listed >= actors and pending >= groups

    if wait_until(registered, timeout_s, interval_s=1.0) is None:
        raise SystemExit(
            f"probe_cost: the GCS did not list the bench's actors and groups within {timeout_s:.0f} s"
        )


def _unload_ray(handles: list[Any], pgs: list[Any]) -> None:
    import ray
    from ray.util.placement_group import remove_placement_group

    for pg in pgs:
        remove_placement_group(pg)
    for handle in handles:
        ray.kill(handle)


def _detection_latency(env: LocalEnvironment, interval_s: float) -> float | None:
    """Seconds from the engine's kill to the end of the first tick whose rows show it."""
    fault, ledger = KillEngine(), Ledger()
    showing: list[float] = []  # end times of the ticks that show replica-0 down

    def on_tick(tick: Tick) -> None:
        # Judged after the run: the kill happens inside inject(), which returns only once the
        # server has exited, and the ticks in between are the ones that count.
        for row in tick.rows:
            if (
                row.probe == "vllm.healthy" and row.labels.get("replica") == "replica-0" and row.value == 0
            ) or (row.probe == "vllm@replica-0" and row.error):
                showing.append(tick.t + tick.duration_s)
                return

    injected: dict[str, float] = {}
    before = {r.name: r.started_at for r in env.replica_records()}

    async def run() -> None:
        task = asyncio.create_task(_sample(env, 12, interval_s, on_tick))
        await asyncio.sleep(4 + random.random() * interval_s)  # the kill at a random point of a tick
        handle = await asyncio.to_thread(fault.inject, env, {"replica": 0}, ledger)
        injected["t"] = handle.injected_at or time.time()
        await task
        await asyncio.to_thread(fault.revert, env, handle, ledger)

    asyncio.run(run())
    # Until the replacement of replica-0 (a record started after the kill) serves again.
    wait_until(
        lambda: any(
            r.name == "replica-0" and r.started_at > before["replica-0"] and r.state == "healthy"
            for r in env.replica_records()
        ),
        240,
        1.0,
    )
    after = [end for end in showing if end >= injected["t"]]
    return min(after) - injected["t"] if after else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actors", type=int, default=1000, help="actor records in the cluster while loaded")
    parser.add_argument(
        "--idle-actors",
        type=int,
        default=100,
        help="how many of them are live idle actors (a ~60 MB worker process each)",
    )
    parser.add_argument("--groups", type=int, default=50)
    parser.add_argument("--ticks", type=int, default=20)
    parser.add_argument(
        "--detections", type=int, default=3, help="engine kills, each at a random point of a tick"
    )
    args = parser.parse_args()
    # An idle actor's creation task is FINISHED, which the Ray probe filters out at the GCS;
    # an unplaceable actor's would stay PENDING_NODE_ASSIGNMENT and add a second record per
    # stand-in actor that 1,000 idle actors would not have. This driver owns those tasks, so
    # it does not report task events (read by Ray when the driver connects, just below).
    os.environ["RAY_task_events_report_interval_ms"] = "0"
    env = LocalEnvironment()
    env.connect_ray()

    rest, rest_cpu = asyncio.run(_sample(env, args.ticks, 1.0))
    handles, pgs = _load_ray(env, args.actors, args.idle_actors, args.groups)
    try:
        loaded, loaded_cpu = asyncio.run(_sample(env, args.ticks, 1.0))
    finally:
        _unload_ray(handles, pgs)
    latencies = [_detection_latency(env, 1.0) for _ in range(args.detections)]

    def ms(values: list[float]) -> str:
        return f"median {statistics.median(values) * 1000:6.1f} ms, max {max(values) * 1000:6.1f} ms"

    print(f"tick at rest                          : {ms(rest)}   (target <= 50 ms)")
    print(f"sampler CPU at 1 Hz, at rest          : {rest_cpu:6.1%} of one core (target <= 5%)")
    idle = min(args.idle_actors, args.actors)
    print(
        f"tick, {args.actors} actors ({idle} idle, {args.actors - idle} unplaceable) + {args.groups} pending groups : "
        f"{ms(loaded)}   (target <= 250 ms at 1,000 actors)"
    )
    print(f"sampler CPU at 1 Hz, loaded           : {loaded_cpu:6.1%} of one core")
    shown = ", ".join(f"{x:.2f} s" if x is not None else "not detected" for x in latencies)
    print(f"detection latency (engine kill), {args.detections} runs : {shown}   (target <= 1.5 s each)")


if __name__ == "__main__":
    main()
