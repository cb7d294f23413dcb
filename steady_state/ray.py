"""Ray-layer probe: nodes, resources, actors, tasks and placement groups.

Nodes, actors and tasks come from Ray's state API (the dashboard of ``ray[default]``);
available resources and the placement-group table (which carries each group's strategy)
come from the GCS through this process's driver connection.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from inferchaos.errors import ProbeError
from inferchaos.layers import Layer
from inferchaos.steady_state.probe_base import Sample

logger = logging.getLogger(__name__)

STATE_API_LIMIT = 10_000
PENDING_TASK_STATES = ("PENDING_NODE_ASSIGNMENT", "PENDING_ARGS_AVAIL", "PENDING_ACTOR_TASK_ARGS_AVAILABLE")
# Dead actors and finished or failed tasks are history, and Ray keeps it for the cluster's
# life (up to 100,000 of each): listing it made every tick slower the older the cluster was
# (measured: 349 ms at rest once 1,000 actors had died). The GCS filters tasks by state
# itself, and actors only by equality, so live actors are asked for one state at a time.
LIVE_ACTOR_STATES = ("DEPENDENCIES_UNREADY", "PENDING_CREATION", "ALIVE", "RESTARTING")
HISTORY_TASK_STATES = ("FINISHED", "FAILED")


@dataclass
class RaySnapshot:
    """Plain numbers read from one Ray cluster at one instant."""

    nodes_alive: int
    nodes_dead: int
    resources_total: dict[str, float]
    resources_available: dict[str, float]
    actors: Counter[tuple[str, str]]  # (state, class) -> count
    tasks: Counter[str]  # state -> count
    pgs: Counter[tuple[str, str]]  # (state, strategy) -> count
    pending_pgs: dict[str, tuple[str, float]] = field(default_factory=dict)  # pg id -> (strategy, age s)


class RayProbe:
    """Reads a Ray cluster through its state API and the driver connection ``connect`` makes."""

    name = "ray"
    layer = Layer.RAY

    def __init__(self, dashboard_url: str, connect: Callable[[], None]) -> None:
        self._dashboard_url = dashboard_url
        self._connect = connect
        # When each group was first seen PENDING: Ray keeps no such timestamp we can read.
        self._pending_since: dict[str, float] = {}
        self._pool = ThreadPoolExecutor(
            max_workers=2 + len(LIVE_ACTOR_STATES), thread_name_prefix="ray-probe"
        )
        # Snapshots run on a thread of their own, one at a time. A busy dashboard can take
        # longer than the sampler waits; a new snapshot per tick would then pile up blocked
        # threads, and in asyncio's default executor they starved everything else that needs
        # it (httpx resolves every new connection's address there): a kv_flood run saw its
        # canary and vLLM reads stall for 5 s.
        self._snapshotter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ray-snapshot")
        self._in_flight: asyncio.Future[RaySnapshot] | None = None

    def snapshot(self) -> RaySnapshot:
        """One blocking read of every Ray fact this probe reports."""
        from ray.exceptions import RaySystemError
        from ray.util.state import list_actors, list_nodes, list_tasks
        from ray.util.state.exception import RayStateApiException

        self._connect()
        import ray

        # The state-API calls are HTTP round trips to the dashboard: made one after the other
        # they set the tick's length, so they run side by side (measured: median tick 91 ->
        # 60 ms). The GCS calls below are quick and stay on this thread.
        def listed(call: Callable[..., list[Any]], filters: list[tuple[str, str, str]]) -> Future[list[Any]]:
            return self._pool.submit(
                call,
                address=self._dashboard_url,
                filters=filters,
                limit=STATE_API_LIMIT,
                raise_on_missing_output=False,
            )

        nodes_read = listed(list_nodes, [])
        tasks_read = listed(list_tasks, [("state", "!=", state) for state in HISTORY_TASK_STATES])
        actor_reads = [listed(list_actors, [("state", "=", state)]) for state in LIVE_ACTOR_STATES]
        try:
            total = ray.cluster_resources()
            available = ray.available_resources()
            pg_table = ray.util.placement_group_table()
            nodes, tasks = nodes_read.result(), tasks_read.result()
            actors = [actor for read in actor_reads for actor in read.result()]
        except (RayStateApiException, RaySystemError, ConnectionError, OSError) as e:
            raise ProbeError(f"Ray at {self._dashboard_url} did not answer: {e}") from e

        now = time.monotonic()
        pgs: Counter[tuple[str, str]] = Counter()
        pending: dict[str, tuple[str, float]] = {}
        for pg_id, info in pg_table.items():
            state, strategy = info["state"], info["strategy"]
            if state == "REMOVED":
                self._pending_since.pop(pg_id, None)
                continue
            pgs[(state, strategy)] += 1
            if state in ("PENDING", "RESCHEDULING"):
                since = self._pending_since.setdefault(pg_id, now)
                pending[pg_id] = (strategy, now - since)
            else:
                self._pending_since.pop(pg_id, None)
        return RaySnapshot(
            nodes_alive=sum(1 for n in nodes if n.state == "ALIVE"),
            nodes_dead=sum(1 for n in nodes if n.state == "DEAD"),
            resources_total=dict(total),
            resources_available=dict(available),
            actors=Counter((a.state, a.class_name) for a in actors),
            tasks=Counter(t.state for t in tasks),
            pgs=pgs,
            pending_pgs=pending,
        )

    async def read(self) -> list[Sample]:
        """Samples named as in steady_state/catalog.py (``ray.*``).

        If the previous read is still running (the sampler stopped waiting for it), this
        read waits for that snapshot instead of starting another one.
        """
        previous = self._in_flight
        if previous is not None and previous.done():
            if not previous.cancelled():
                previous.exception()  # reported by the read that awaited it, or superseded
            previous = None
        if previous is None:
            previous = self._in_flight = asyncio.get_running_loop().run_in_executor(
                self._snapshotter, self.snapshot
            )
            # A snapshot still running when the run ends has no reader: its failure is retrieved
            # here, so that asyncio does not print it as a "never retrieved" traceback.
            previous.add_done_callback(lambda done: done.cancelled() or done.exception())
        # Shielded: the sampler's timeout must not cancel the snapshot the next read will use.
        return snapshot_samples(await asyncio.shield(previous))


def snapshot_samples(snap: RaySnapshot) -> list[Sample]:
    """Turn a snapshot into timeline samples."""
    samples = [
        Sample("ray.nodes_alive", snap.nodes_alive),
        Sample("ray.nodes_dead", snap.nodes_dead),
        Sample("ray.gpus_total", snap.resources_total.get("GPU", 0.0)),
        Sample("ray.gpus_available", snap.resources_available.get("GPU", 0.0)),
        Sample("ray.cpus_total", snap.resources_total.get("CPU", 0.0)),
        Sample("ray.cpus_available", snap.resources_available.get("CPU", 0.0)),
        Sample("ray.tasks_pending_node_assignment", snap.tasks.get("PENDING_NODE_ASSIGNMENT", 0)),
        Sample("ray.pending_pgs", len(snap.pending_pgs)),
    ]
    alive_by_class: Counter[str] = Counter()
    for (state, cls), count in sorted(snap.actors.items()):
        samples.append(Sample("ray.actors", count, {"state": state, "class": cls}))
        if state == "ALIVE":
            alive_by_class[cls] += count
    samples += [Sample("ray.actors_alive", n, {"class": cls}) for cls, n in sorted(alive_by_class.items())]
    samples += [Sample("ray.tasks", n, {"state": state}) for state, n in sorted(snap.tasks.items())]
    samples += [
        Sample("ray.pgs", n, {"state": st, "strategy": sg}) for (st, sg), n in sorted(snap.pgs.items())
    ]
    samples += [
        Sample("ray.pg_pending_age_s", round(age, 3), {"pg": pg, "strategy": strategy})
        for pg, (strategy, age) in sorted(snap.pending_pgs.items())
    ]
    return samples
