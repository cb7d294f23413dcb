"""Placement-group stall: a group that stays PENDING while GPUs sit idle, and Ray says nothing.

- ``strict_spread``: one {GPU: 1} bundle more than there are nodes with a free GPU;
- ``strict_pack``: bundles that fit in the cluster's free GPUs but on no single node;
- ``hog``: a feasible PACK group that reserves every free GPU, starving everything else.

The group is detached and named ``ic-pg-<handle>``, so it outlives a crashed runner and
revert (or `inferchaos cleanup`) removes exactly it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from typing import Any

from inferchaos.errors import ConfigError
from inferchaos.faults.base import Evidence, FaultHandle, JsonObject, Planned, set_times, wait_until
from inferchaos.faults.ledger import Ledger
from inferchaos.faults.local_process import LocalProcessFault, free_gpus
from inferchaos.faults.registry import register
from inferchaos.layers import Layer
from inferchaos.primitives.capabilities import RayProcessEnvironment

logger = logging.getLogger(__name__)

NAME = "ray.stall_placement_group"
MODES = ("strict_spread", "strict_pack", "hog")
PG_NAMESPACE = "inferchaos-pg"


@dataclass
class StallParams:
    """How the group stalls (``mode``), how long PENDING counts as a stall, and the GPU fence."""

    mode: str = "strict_spread"
    pending_threshold_s: float = 5.0
    max_gpus: int = 16

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"{NAME}: mode {self.mode!r} is not one of {list(MODES)}")


def _free_gpus_per_node(env: RayProcessEnvironment) -> list[float]:
    """Free logical GPUs on each ALIVE node, from the GCS's per-node resource view."""
    import ray

    env.connect_ray()
    # Ray has no public per-node view of *available* resources; this is the one `ray status`
    # and the autoscaler read.
    per_node = ray._private.state.available_resources_per_node()
    return sorted((res.get("GPU", 0.0) for res in per_node.values()), reverse=True)


class _WaitingWork:
    """Work that waits on the stalled group (or, for hog, on a GPU the group reserved).

    An actor, not a task: submitting a task makes the driver's raylet start a worker process
    at once (measured: a new ``ray::IDLE`` beside the pending task), which on a shared 2-core
    host stalled canary requests for up to 1 s right after injection. An actor waits in
    PENDING_CREATION with no process until the GCS can place it.
    """

    def started_at(self) -> float:
        return time.time()


@register
class StallPlacementGroup(LocalProcessFault[StallParams]):
    """Create a placement group that cannot be (or must not be) placed."""

    name = NAME
    aliases = ("stall_placement_group",)
    layer = Layer.RAY
    params_type = StallParams

    def __init__(self) -> None:
        # handle id -> (the waiting actor, the ref of its first call)
        self._work_refs: dict[str, tuple[Any, Any]] = {}

    def _plan(self, env: RayProcessEnvironment, params: StallParams) -> Planned:
        per_node = [g for g in _free_gpus_per_node(env) if g >= 1]
        total_free = int(sum(per_node))
        if total_free < 1:
            raise ConfigError(f"{self.name}: no free logical GPU in the cluster; a stall needs idle GPUs")
        if params.mode == "strict_spread":
            bundles, strategy = len(per_node) + 1, "STRICT_SPREAD"
        elif params.mode == "strict_pack":
            bundles, strategy = int(per_node[0]) + 1, "STRICT_PACK"
            if bundles > total_free:
                raise ConfigError(
                    f"{self.name}: strict_pack needs free GPUs spread over several nodes; free per node: {per_node}"
                )
        else:
            bundles, strategy = total_free, "PACK"
        if bundles > params.max_gpus:
            raise ConfigError(f"{self.name}: {bundles} GPUs in bundles exceed max_gpus {params.max_gpus}")
        description = f"create a detached {strategy} placement group of {bundles} x 1 GPU ({params.mode}); revert removes it"
        state: JsonObject = {
            "pg_name": "",
            "strategy": strategy,
            "bundles": bundles,
            "free_gpus_before": free_gpus(env),
        }
        return Planned(description, [f"ray-placement-group:{strategy}x{bundles}"], state, asdict(params))

    def _act(
        self, env: RayProcessEnvironment, params: StallParams, handle: FaultHandle, ledger: Ledger
    ) -> None:
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        handle.state["pg_name"] = f"ic-pg-{handle.id}"
        ledger.record(handle)
        bundles = [{"GPU": 1.0}] * handle.state["bundles"]
        pg = placement_group(
            bundles, strategy=handle.state["strategy"], name=handle.state["pg_name"], lifetime="detached"
        )
        handle.injected_at = time.time()
        handle.state["pg_id"] = pg.id.hex()
        ledger.record(handle)
        # Work that needs the group (strict modes) or a GPU outside it (hog) must not start.
        # (An actor handle: Ray's stubs type its methods as plain callables, without .remote.)
        waiting: Any
        if params.mode == "hog":
            wait_until(lambda: free_gpus(env) == 0, 15.0, 0.5)
            waiting = ray.remote(num_gpus=1, num_cpus=0)(_WaitingWork).remote()
        else:
            waiting = ray.remote(
                num_gpus=1, num_cpus=0, scheduling_strategy=PlacementGroupSchedulingStrategy(pg, 0)
            )(_WaitingWork).remote()
        self._work_refs[handle.id] = (waiting, waiting.started_at.remote())
        handle.state["work_submitted_at"] = time.time()

    def _pg_state(self, pg_id: str) -> str:
        import ray

        info = ray.util.placement_group_table().get(pg_id)
        return info["state"] if info else "REMOVED"

    def _undo(
        self, env: RayProcessEnvironment, params: StallParams, handle: FaultHandle, ledger: Ledger
    ) -> None:
        env.connect_ray()
        import ray
        from ray.util.placement_group import PlacementGroup, remove_placement_group

        # The waiting work goes first: once the group is gone, it could be placed and start.
        work = self._work_refs.pop(handle.id, None)
        if work is not None:
            ray.kill(work[0])
        pg_id = handle.state.get("pg_id")
        if pg_id and self._pg_state(pg_id) != "REMOVED":
            remove_placement_group(PlacementGroup(ray.PlacementGroupID(bytes.fromhex(pg_id))))
            handle.reverted_at = time.time()
            ledger.record(handle)

    def work_started(self, handle: FaultHandle) -> bool:
        """True once the work waiting on the group has run (it must not before revert)."""
        import ray

        work = self._work_refs.get(handle.id)
        if work is None:
            return False
        ready, _ = ray.wait([work[1]], timeout=0)
        return bool(ready)

    def _evidence(self, env: RayProcessEnvironment, params: StallParams, handle: FaultHandle) -> Evidence:
        env.connect_ray()
        pg_id = handle.state["pg_id"]
        state = self._pg_state(pg_id)
        free = free_gpus(env)
        pending_for = time.time() - (handle.injected_at or time.time())
        mode = params.mode
        threshold = params.pending_threshold_s
        started = self.work_started(handle)
        if mode == "hog":
            bit = state == "CREATED" and free == 0 and not started
            reason = f"the group reserved every free GPU (free now {free:g}); waiting GPU work did not start"
        else:
            bit = state == "PENDING" and pending_for >= threshold and free > 0 and not started
            reason = f"{handle.state['strategy']} group PENDING for {pending_for:.1f} s while {free:g} GPUs are free"
        if not bit:
            reason = f"no stall observed: group {state}, {free:g} GPUs free, pending {pending_for:.1f} s, work started={started}"
        return Evidence(
            bit=bit,
            reason=reason,
            symptoms={
                "mode": mode,
                "strategy": handle.state["strategy"],
                "bundles": handle.state["bundles"],
                "group_state": state,
                "pending_for_s": round(pending_for, 2),
                "gpus_free": free,
                "waiting_work_started": started,
            },
            timestamps=set_times({"injected_at": handle.injected_at, "reverted_at": handle.reverted_at}),
        )
