"""Node loss: SIGKILL a worker node's whole process tree, as a machine loss looks to Ray.

The raylet, its worker processes and the vLLM replica they host all die in one sweep.
Revert starts a replacement worker with the same resources, as an autoscaler or Kubernetes
would; Serve's controller then re-places the lost replica on it.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass

import httpx

from inferchaos.errors import ConfigError
from inferchaos.faults.base import (
    NODE_DEAD_AT,
    Evidence,
    FaultHandle,
    JsonObject,
    Planned,
    replica_name,
    wait_until,
)
from inferchaos.faults.ledger import Ledger
from inferchaos.faults.local_process import LocalProcessFault
from inferchaos.faults.registry import register
from inferchaos.layers import Layer
from inferchaos.primitives import http
from inferchaos.primitives.capabilities import RayProcessEnvironment
from inferchaos.primitives.processes import kill_tree_now
from inferchaos.primitives.ray_nodes import RayNodeRecord

logger = logging.getLogger(__name__)

NAME = "ray.kill_node"


@dataclass
class KillNodeParams:
    """Which worker node (by Ray node id, by the replica it hosts, or at random with ``seed``), and the fences."""

    node_id: str | None = None
    replica: int | str | None = None
    seed: int | None = None
    allow_total_outage: bool = False
    max_nodes: int = 1
    wait_dead_s: float = 15.0

    def __post_init__(self) -> None:
        if self.max_nodes < 1:
            raise ConfigError(f"{NAME}: max_nodes {self.max_nodes} allows no node to be killed")


def _endpoint_answers(url: str) -> bool:
    try:
        http.get(f"{url}/health", timeout=1.0)
    except httpx.HTTPError:
        return False
    return True


def _wait_unreachable(url: str) -> float | None:
    """The time ``url`` stopped answering, or None if it still answers after a few seconds."""
    return wait_until(lambda: not _endpoint_answers(url), 5.0, 0.2)


@register
class KillNode(LocalProcessFault[KillNodeParams]):
    """SIGKILL every process of one Ray worker node."""

    name = NAME
    aliases = ("kill_node",)
    layer = Layer.RAY
    params_type = KillNodeParams

    def _resolve(self, env: RayProcessEnvironment, params: KillNodeParams) -> tuple[RayNodeRecord, str]:
        state = env.load_state()
        live = [n for n in state.nodes if not n.lost]
        ray_nodes = {n.name: n for n in env.ray_nodes() if n.alive}
        if params.node_id is not None:
            names = [name for name, n in ray_nodes.items() if n.node_id == params.node_id]
            if not names:
                raise ConfigError(f"{self.name}: no ALIVE Ray node has id {params.node_id!r}")
            target_name = names[0]
        elif params.replica is not None:
            wanted = replica_name(params.replica)
            records = [r for r in env.replica_records() if r.name == wanted]
            if not records:
                raise ConfigError(f"{self.name}: no replica named {wanted!r}")
            hosts = [name for name, n in ray_nodes.items() if n.node_id == records[0].node_id]
            if not hosts:
                raise ConfigError(f"{self.name}: the node hosting {wanted} is not ALIVE")
            target_name = hosts[0]
        else:
            workers = sorted(n.name for n in live if not n.is_head and n.name in ray_nodes)
            if not workers:
                raise ConfigError(f"{self.name}: no ALIVE worker node to choose from")
            target_name = random.Random(params.seed).choice(workers)
        record = next((n for n in live if n.name == target_name), None)
        if record is None:
            raise ConfigError(f"{self.name}: node {target_name!r} is not one this environment started")
        if record.is_head:
            raise ConfigError(
                f"{self.name}: refusing the head node: it runs the GCS, the driver's connection and the front door"
            )
        return record, ray_nodes[target_name].node_id

    def _plan(self, env: RayProcessEnvironment, params: KillNodeParams) -> Planned:
        record, node_id = self._resolve(env, params)
        replicas = env.replica_records()
        hit = [r for r in replicas if r.node_id == node_id]
        survivors = [r.name for r in replicas if r.node_id != node_id and r.state == "healthy"]
        if not survivors and not params.allow_total_outage:
            raise ConfigError(
                f"{self.name}: killing {record.name} would leave no healthy replica; set allow_total_outage to allow it"
            )
        description = (
            f"SIGKILL every process of Ray worker node {record.name} ({node_id[:12]}), "
            f"hosting {', '.join(r.name for r in hit) or 'no replica'}; revert starts a replacement worker"
        )
        targets = [
            f"ray-node:{record.name}:{node_id}",
            f"process-tree:{record.pid}",
            *[f"replica:{r.name}" for r in hit],
        ]
        state: JsonObject = {
            "node_name": record.name,
            "node_id": node_id,
            "pid": record.pid,
            "replicas": [r.name for r in hit],
            "replica_urls": {r.name: r.url for r in hit},
        }
        return Planned(description, targets, state)

    def _act(
        self, env: RayProcessEnvironment, params: KillNodeParams, handle: FaultHandle, ledger: Ledger
    ) -> None:
        killed = kill_tree_now(handle.state["pid"])
        handle.injected_at = time.time()
        handle.state["killed_pids"] = killed
        handle.state["killed_at"] = handle.injected_at
        env.mark_node_lost(handle.state["node_name"])
        ledger.record(handle)
        logger.info("killed node %s: %d processes", handle.state["node_name"], len(killed))
        node_id = handle.state["node_id"]
        handle.state["node_dead_at"] = wait_until(
            lambda: any(n.node_id == node_id and not n.alive for n in env.ray_nodes()),
            params.wait_dead_s,
            0.2,
        )
        urls: dict[str, str] = handle.state["replica_urls"]
        handle.state["replica_unreachable_at"] = {name: _wait_unreachable(url) for name, url in urls.items()}

    def _undo(
        self, env: RayProcessEnvironment, params: KillNodeParams, handle: FaultHandle, ledger: Ledger
    ) -> None:
        replacement = handle.state.get("replacement")
        alive = {n.name for n in env.ray_nodes() if n.alive} if replacement else set()
        if replacement is None or replacement not in alive:
            record = env.add_worker()
            handle.state["replacement"] = record.name
            handle.reverted_at = time.time()
            # Recorded before the entry goes, so a crash here never starts a second replacement.
            ledger.record(handle)
            logger.info("started replacement worker %s for %s", record.name, handle.state["node_name"])

    def _evidence(self, env: RayProcessEnvironment, params: KillNodeParams, handle: FaultHandle) -> Evidence:
        node_id = handle.state["node_id"]
        nodes = env.ray_nodes()
        marked_dead = any(n.node_id == node_id and not n.alive for n in nodes)
        records = {r.name: r for r in env.replica_records()}
        alive_ids = {n.node_id for n in nodes if n.alive}
        back = {
            name: bool(rec and rec.state == "healthy" and rec.node_id in alive_ids and rec.node_id != node_id)
            for name in handle.state["replicas"]
            for rec in [records.get(name)]
        }
        timestamps = {
            "killed_at": handle.state["killed_at"],
            **({NODE_DEAD_AT: handle.state["node_dead_at"]} if handle.state.get("node_dead_at") else {}),
        }
        for name in handle.state["replicas"]:
            rec = records.get(name)
            if back.get(name) and rec is not None and rec.ready_at:
                timestamps[f"{name}_healthy_at"] = rec.ready_at
        dead_at = handle.state.get("node_dead_at")
        unreachable = {k: v is not None for k, v in handle.state.get("replica_unreachable_at", {}).items()}
        bit = marked_dead and all(unreachable.values())
        symptoms = {
            "node": handle.state["node_name"],
            "node_marked_dead": marked_dead,
            "node_dead_after_s": round(dead_at - handle.state["killed_at"], 2) if dead_at else None,
            "replica_endpoint_unreachable": unreachable,
            "replica_back_on_live_node": back,
            "replacement_node": handle.state.get("replacement"),
        }
        reason = (
            f"Ray marked {handle.state['node_name']} DEAD and its replica stopped answering"
            if bit
            else f"node {handle.state['node_name']} was not marked DEAD or its replica kept answering"
        )
        return Evidence(bit=bit, reason=reason, symptoms=symptoms, timestamps=timestamps)
