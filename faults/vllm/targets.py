"""Finding the vLLM endpoints a vLLM-layer fault aims at, through the Environment contract."""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from inferchaos.errors import ConfigError, FaultError
from inferchaos.primitives.capabilities import StatusEnvironment

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


def served_max_model_len(url: str, model: str) -> int:
    """The context length the server really serves, from its /v1/models."""
    try:
        data = httpx.get(f"{url}/v1/models", timeout=10).json()
    except (httpx.HTTPError, ValueError) as e:
        raise FaultError(f"could not read {url}/v1/models: {e}") from e
    for entry in data.get("data", []):
        if entry.get("id") == model and entry.get("max_model_len"):
            return int(entry["max_model_len"])
    raise FaultError(f"{url}/v1/models does not list {model!r} with a max_model_len")
