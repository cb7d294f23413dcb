"""The contract every environment (local, kind, cluster) fulfils, and its status shape."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Protocol


@dataclass
class NodeStatus:
    node_id: str
    alive: bool
    is_head: bool
    gpus: float
    cpus: float
    name: str = ""


@dataclass
class RayStatus:
    address: str
    dashboard_url: str
    nodes: list[NodeStatus] = field(default_factory=list)

    @property
    def alive_nodes(self) -> list[NodeStatus]:
        return [n for n in self.nodes if n.alive]


@dataclass
class ReplicaStatus:
    name: str
    url: str
    metrics_url: str
    node_id: str
    healthy: bool
    state: str = ""
    pid: int = 0


@dataclass
class VllmStatus:
    replicas: list[ReplicaStatus] = field(default_factory=list)


@dataclass
class FrontDoorStatus:
    url: str
    healthy: bool


@dataclass
class ModelStatus:
    name: str
    max_model_len: int
    path: str = ""


@dataclass
class EnvStatus:
    """What `inferchaos env status --json` prints; the keys are a contract for users' scripts."""

    env: str
    up: bool
    ray: RayStatus
    vllm: VllmStatus
    front_door: FrontDoorStatus
    model: ModelStatus

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Environment(Protocol):
    """Knows the endpoints of its layers and builds their clients."""

    name: str

    def up(self) -> EnvStatus:
        """Bring the environment up and return its status once every replica is healthy."""
        ...

    def down(self) -> list[int]:
        """Stop every process the environment started; return the pids that were ended."""
        ...

    def status(self) -> EnvStatus:
        """Read the live status of every layer."""
        ...
