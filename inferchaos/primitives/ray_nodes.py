"""The on-disk record of one local Ray node process: what a node-loss fault kills and the environment restarts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class NodePorts:
    """Every port one Ray node listens on, chosen up front so nodes on one host never collide."""

    node_manager: int
    object_manager: int
    metrics_export: int
    dashboard_agent_listen: int
    dashboard_agent_grpc: int
    runtime_env_agent: int
    min_worker: int
    max_worker: int
    gcs: int = 0
    dashboard: int = 0
    ray_client_server: int = 0


@dataclass
class RayNodeRecord:
    """One `ray start --block` process: the leader of the node's own process group."""

    name: str
    pid: int
    is_head: bool
    num_cpus: int
    num_gpus: int
    ports: NodePorts
    log_path: str
    # Set when a fault killed the node: its processes are gone and it must not be targeted again.
    lost: bool = False
    # Ray's address of the node, and the network namespace it runs in ("": the host's).
    address: str = ""
    namespace: str = ""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RayNodeRecord:
        return cls(**{**data, "ports": NodePorts(**data["ports"])})
