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
from typing import Any

from inferchaos.errors import ConfigError
from inferchaos.faults.base import Evidence, Fault, FaultHandle, FaultPlan
from inferchaos.faults.ledger import Ledger
from inferchaos.faults.params import param, reject_unknown, wait_until
from inferchaos.faults.ray.common import free_gpus, require_local
from inferchaos.faults.registry import register
from inferchaos.layers import Layer

logger = logging.getLogger(__name__)

MODES = ("strict_spread", "strict_pack", "hog")
PARAMS = {"mode", "pending_threshold_s", "max_gpus"}
PG_NAMESPACE = "inferchaos-pg"


def _free_gpus_per_node(env: Any) -> list[float]:
    """Free logical GPUs on each ALIVE node, from the GCS's per-node resource view."""
    import ray

    env.connect_ray()
    # Ray has no public per-node view of *available* resources; this is the one `ray status`
    # and the autoscaler read.
    per_node = ray._private.state.available_resources_per_node()
    return sorted((res.get("GPU", 0.0) for res in per_node.values()), reverse=True)


def _waiting_task() -> float:
    """Work that waits on the stalled group (or, for hog, on a GPU the group reserved)."""
    return time.time()


@register
class StallPlacementGroup(Fault):
    """Create a placement group that cannot be (or must not be) placed."""

    name = "stall_placement_group"
    layer = Layer.RAY

    def __init__(self) -> None:
        self._work_refs: dict[str, Any] = {}

    def _bundles(self, env: Any, params: dict[str, Any]) -> tuple[str, list[dict[str, float]], str]:
        reject_unknown(params, PARAMS, self.name)
        mode = param(params, "mode", str, "strict_spread", self.name)
        if mode not in MODES:
            raise ConfigError(f"stall_placement_group: mode {mode!r} is not one of {list(MODES)}")
        max_gpus = param(params, "max_gpus", int, 16, self.name)
        per_node = [g for g in _free_gpus_per_node(env) if g >= 1]
        total_free = int(sum(per_node))
        if total_free < 1:
            raise ConfigError(
                "stall_placement_group: no free logical GPU in the cluster; a stall needs idle GPUs"
            )
        if mode == "strict_spread":
            bundles, strategy = [{"GPU": 1.0}] * (len(per_node) + 1), "STRICT_SPREAD"
        elif mode == "strict_pack":
            need = int(per_node[0]) + 1
            if need > total_free:
                raise ConfigError(
                    "stall_placement_group: strict_pack needs free GPUs spread over several nodes; "
                    f"free per node: {per_node}"
                )
            bundles, strategy = [{"GPU": 1.0}] * need, "STRICT_PACK"
        else:
            bundles, strategy = [{"GPU": 1.0}] * total_free, "PACK"
        gpus = int(sum(b["GPU"] for b in bundles))
        if gpus > max_gpus:
            raise ConfigError(f"stall_placement_group: {gpus} GPUs in bundles exceed max_gpus {max_gpus}")
        return mode, bundles, strategy

    def plan(self, env: Any, params: dict[str, Any]) -> FaultPlan:
        env = require_local(env, self.name)
        mode, bundles, strategy = self._bundles(env, params)
        return FaultPlan(
            fault=self.name,
            layer=self.layer,
            description=f"create a detached {strategy} placement group of {len(bundles)} x 1 GPU ({mode}); revert removes it",
            targets=[f"ray-placement-group:{strategy}x{len(bundles)}"],
            params={**params, "mode": mode},
        )

    def inject(self, env: Any, params: dict[str, Any], ledger: Ledger) -> FaultHandle:
        env = require_local(env, self.name)
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        mode, bundles, strategy = self._bundles(env, params)
        threshold = param(params, "pending_threshold_s", float, 5.0, self.name)
        handle = FaultHandle(
            fault=self.name,
            layer=self.layer,
            params={**params, "mode": mode, "pending_threshold_s": threshold},
            env=env.name,
            state={
                "pg_name": "",
                "strategy": strategy,
                "bundles": len(bundles),
                "free_gpus_before": free_gpus(env),
            },
        )
        handle.state["pg_name"] = f"ic-pg-{handle.id}"
        ledger.record(handle)
        pg = placement_group(bundles, strategy=strategy, name=handle.state["pg_name"], lifetime="detached")
        handle.injected_at = time.time()
        handle.state["pg_id"] = pg.id.hex()
        ledger.record(handle)
        import ray

        # Work that needs the group (strict modes) or a GPU outside it (hog) must not start.
        if mode == "hog":
            wait_until(lambda: free_gpus(env) == 0, 15.0, 0.5)
            ref = ray.remote(num_gpus=1, num_cpus=0)(_waiting_task).remote()
        else:
            ref = ray.remote(
                num_gpus=1, num_cpus=0, scheduling_strategy=PlacementGroupSchedulingStrategy(pg, 0)
            )(_waiting_task).remote()
        self._work_refs[handle.id] = ref
        handle.state["work_submitted_at"] = time.time()
        ledger.record(handle)
        return handle

    def _pg_state(self, pg_id: str) -> str:
        import ray

        info = ray.util.placement_group_table().get(pg_id)
        return info["state"] if info else "REMOVED"

    def revert(self, env: Any, handle: FaultHandle, ledger: Ledger) -> None:
        env = require_local(env, self.name)
        env.connect_ray()
        import ray
        from ray.util.placement_group import PlacementGroup, remove_placement_group

        pg_id = handle.state.get("pg_id")
        if pg_id and self._pg_state(pg_id) != "REMOVED":
            remove_placement_group(PlacementGroup(ray.PlacementGroupID(bytes.fromhex(pg_id))))
            handle.reverted_at = time.time()
            ledger.record(handle)
        ref = self._work_refs.pop(handle.id, None)
        if ref is not None:
            ray.cancel(ref, force=True)
        ledger.remove(handle.id)

    def work_started(self, handle: FaultHandle) -> bool:
        """True once the work waiting on the group has run (it must not before revert)."""
        import ray

        ref = self._work_refs.get(handle.id)
        if ref is None:
            return False
        ready, _ = ray.wait([ref], timeout=0)
        return bool(ready)

    def evidence(self, env: Any, handle: FaultHandle) -> Evidence:
        env = require_local(env, self.name)
        env.connect_ray()
        pg_id = handle.state["pg_id"]
        state = self._pg_state(pg_id)
        free = free_gpus(env)
        pending_for = time.time() - (handle.injected_at or time.time())
        mode = handle.params["mode"]
        threshold = handle.params["pending_threshold_s"]
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
            timestamps={
                k: v
                for k, v in {"injected_at": handle.injected_at, "reverted_at": handle.reverted_at}.items()
                if v
            },
        )
