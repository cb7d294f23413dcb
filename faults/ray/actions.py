"""Ray-layer faults as Chaos Toolkit actions (python providers of ``faults.ray.actions``)."""

from __future__ import annotations

from typing import Any

from inferchaos.faults.actions import Configuration, Secrets, inject_action, rollback_action

# Chaos Toolkit function -> registered fault: how the inferchaos runner reads a `method`.
FAULT_OF = {
    "kill_node": "kill_node",
    "leak_actors": "leak_actors",
    "stall_placement_group": "stall_placement_group",
}


def kill_node(
    node_id: str | None = None,
    replica: str | int | None = None,
    seed: int | None = None,
    allow_total_outage: bool = False,
    max_nodes: int = 1,
    wait_dead_s: float = 15.0,
    configuration: Configuration = None,
    secrets: Secrets = None,
) -> dict[str, Any]:
    """SIGKILL every process of one worker node (by id, by the replica it hosts, or at random)."""
    params = {"node_id": node_id, "replica": replica, "seed": seed, "allow_total_outage": allow_total_outage,
              "max_nodes": max_nodes, "wait_dead_s": wait_dead_s}  # fmt: skip
    return inject_action("kill_node", params, configuration)


def rollback_kill_node(configuration: Configuration = None, secrets: Secrets = None) -> list[str]:
    """Start a replacement worker for every node loss still in the ledger."""
    return rollback_action("kill_node", configuration)


def leak_actors(
    class_name: str = "LeakyWorker",
    num_gpus: float = 1.0,
    num_cpus: float = 0.0,
    rate_per_s: float = 2.0,
    count: int | None = None,
    max_actors: int = 16,
    configuration: Configuration = None,
    secrets: Secrets = None,
) -> dict[str, Any]:
    """Keep creating resource-holding actors of ``class_name`` and never kill them."""
    params = {"class_name": class_name, "num_gpus": num_gpus, "num_cpus": num_cpus, "rate_per_s": rate_per_s,
              "count": count, "max_actors": max_actors}  # fmt: skip
    return inject_action("leak_actors", params, configuration)


def rollback_leak_actors(configuration: Configuration = None, secrets: Secrets = None) -> list[str]:
    """Kill exactly the actors every leak in the ledger created."""
    return rollback_action("leak_actors", configuration)


def stall_placement_group(
    mode: str = "strict_spread",
    pending_threshold_s: float = 5.0,
    max_gpus: int = 16,
    configuration: Configuration = None,
    secrets: Secrets = None,
) -> dict[str, Any]:
    """Create a placement group that stays PENDING while GPUs idle (or, ``hog``, reserves them all)."""
    params = {"mode": mode, "pending_threshold_s": pending_threshold_s, "max_gpus": max_gpus}
    return inject_action("stall_placement_group", params, configuration)


def rollback_stall_placement_group(configuration: Configuration = None, secrets: Secrets = None) -> list[str]:
    """Remove every stalled placement group in the ledger."""
    return rollback_action("stall_placement_group", configuration)
