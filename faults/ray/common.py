"""What every Ray-layer fault needs from an environment, and the checks they share."""

from __future__ import annotations

from typing import Any, Protocol

from inferchaos.errors import ConfigError, FaultError
from inferchaos.primitives.capabilities import RecordedLocalState
from inferchaos.primitives.env_status import NodeStatus
from inferchaos.primitives.ray_nodes import RayNodeRecord
from inferchaos.primitives.replica_slots import ReplicaRecord


class RayEnvironment(Protocol):
    """The part of an environment that Ray faults act through (the local environment has it)."""

    name: str

    def load_state(self) -> RecordedLocalState: ...
    def connect_ray(self) -> None: ...
    def ray_nodes(self) -> list[NodeStatus]: ...
    def replica_records(self) -> list[ReplicaRecord]: ...
    def add_worker(self) -> RayNodeRecord: ...
    def mark_node_lost(self, name: str) -> None: ...


def require_local(env: Any, fault: str) -> RayEnvironment:
    """Ray faults that kill processes need the embedded environment's process records."""
    if getattr(env, "name", None) != "local":
        raise ConfigError(
            f"{fault} acts on the embedded local environment only, not on {getattr(env, 'name', env)!r}"
        )
    return env


def free_gpus(env: RayEnvironment) -> float:
    """Logical GPUs free right now, per the GCS."""
    import ray

    env.connect_ray()
    return float(ray.available_resources().get("GPU", 0.0))


def require_fault_state(handle_state: dict[str, Any], key: str, fault: str) -> Any:
    if key not in handle_state:
        raise FaultError(f"{fault}: ledger entry lacks {key!r}; cannot revert it")
    return handle_state[key]
