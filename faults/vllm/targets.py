"""Finding the vLLM endpoints a vLLM-layer fault aims at, through the Environment contract."""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from inferchaos.errors import ConfigError, FaultError
from inferchaos.primitives import http
from inferchaos.primitives.capabilities import RayProcessEnvironment, StatusEnvironment
from inferchaos.primitives.replica_slots import ReplicaRecord

FRONT_DOOR = "front_door"


@dataclass(frozen=True)
class VllmTarget:
    """Where requests go (``url``) and which replicas' /metrics show the effect."""

    name: str
    url: str
    metrics_urls: dict[str, str]
    model: str


def resolve_target(env: StatusEnvironment, target: str) -> VllmTarget:
    """``front_door`` or a replica name (``replica-0``) -> its URLs, from ``env.status()``."""
    status = env.status()
    replicas = {r.name: r for r in status.vllm.replicas}
    if target == FRONT_DOOR:
        healthy = {name: r.metrics_url for name, r in replicas.items() if r.healthy}
        if not healthy:
            raise ConfigError("no healthy replica behind the front door to aim at")
        return VllmTarget(FRONT_DOOR, status.front_door.url, healthy, status.model.name)
    if target not in replicas:
        raise ConfigError(f"unknown target {target!r}; use {FRONT_DOOR!r} or one of {sorted(replicas)}")
    replica = replicas[target]
    return VllmTarget(target, replica.url, {target: replica.metrics_url}, status.model.name)


def healthy_replica(
    env: RayProcessEnvironment, fault: str, wanted: str, allow_total_outage: bool, act: str
) -> tuple[ReplicaRecord, list[ReplicaRecord]]:
    """The healthy replica named ``wanted`` and the other healthy ones; ConfigError otherwise.

    The one replica left serving is refused unless ``allow_total_outage``: a fault that takes
    it down takes the whole front door with it. ``act`` says what the fault would do to it.
    """
    records = env.replica_records()
    target = next((r for r in records if r.name == wanted), None)
    if target is None:
        raise ConfigError(f"{fault}: no replica named {wanted!r}; known: {[r.name for r in records]}")
    if target.state != "healthy":
        raise ConfigError(f"{fault}: {wanted} is {target.state}, not healthy; nothing to {act}")
    others = [r for r in records if r.name != wanted and r.state == "healthy"]
    if not others and not allow_total_outage:
        raise ConfigError(
            f"{fault}: {wanted} is the only healthy replica; set allow_total_outage to allow it"
        )
    return target, others


def served_max_model_len(url: str, model: str) -> int:
    """The context length the server really serves, from its /v1/models."""
    try:
        data = http.get(f"{url}/v1/models", timeout=10).json()
    except (httpx.HTTPError, ValueError) as e:
        raise FaultError(f"could not read {url}/v1/models: {e}") from e
    for entry in data.get("data", []):
        if entry.get("id") == model and entry.get("max_model_len"):
            return int(entry["max_model_len"])
    raise FaultError(f"{url}/v1/models does not list {model!r} with a max_model_len")
