"""What every Ray-layer fault needs from an environment, and the checks they share."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from environments.base import NodeStatus
from environments.local.replica_slots import ReplicaRecord
from environments.local.state import LocalEnvState, RayNodeRecord
from inferchaos.errors import ConfigError, FaultError


class RayEnvironment(Protocol):
    """The part of an environment that Ray faults act through (the local environment has it)."""

    name: str

    def load_state(self) -> LocalEnvState: ...
    def connect_ray(self) -> None: ...
    def ray_nodes(self) -> list[NodeStatus]: ...
    def replica_records(self) -> list[ReplicaRecord]: ...
    def add_worker(self) -> RayNodeRecord: ...
    def mark_node_lost(self, name: str) -> None: ...


def require_local(env: Any, fault: str) -> RayEnvironment:
    """Ray faults that kill processes need the embedded environment's process records."""
    if getattr(env, "name", None) != "local":
        raise ConfigError(f"{fault} acts on the embedded local environment only, not on {getattr(env, 'name', env)!r}")
    return env


def param(params: dict[str, Any], key: str, kind: type, default: Any, fault: str) -> Any:
    """Read one parameter, refusing a wrong type with a message naming it."""
    value = params.get(key, default)
    if value is None:
        return None
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise ConfigError(f"{fault}: parameter {key!r} must be {kind.__name__}, got {value!r}")
    return value


def reject_unknown(params: dict[str, Any], known: set[str], fault: str) -> None:
    """An unknown parameter is a typo that would silently do nothing: refuse it."""
    unknown = sorted(set(params) - known)
    if unknown:
        raise ConfigError(f"{fault}: unknown parameter(s) {unknown}; known: {sorted(known)}")


def wait_until(check: Callable[[], bool], timeout_s: float, interval_s: float = 0.25) -> float | None:
    """Poll ``check`` until true; return the epoch time it became true, or None on timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return time.time()
        time.sleep(interval_s)
    return None


def free_gpus(env: RayEnvironment) -> float:
    """Logical GPUs free right now, per the GCS."""
    import ray

    env.connect_ray()
    return float(ray.available_resources().get("GPU", 0.0))


def require_fault_state(handle_state: dict[str, Any], key: str, fault: str) -> Any:
    if key not in handle_state:
        raise FaultError(f"{fault}: ledger entry lacks {key!r}; cannot revert it")
    return handle_state[key]
