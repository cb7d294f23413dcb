"""The environment config file: what a run may touch (the allow-list)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inferchaos.config_files import read_config_mapping
from inferchaos.errors import ConfigError
from inferchaos.layers import K8S_ENVS
from inferchaos.params import parse_params
from inferchaos.primitives.kube.allowlist import AllowList, with_current_keys

__all__ = ["AllowList", "EnvConfig", "ensure_plan_is_allowed", "load_env_config"]


@dataclass(frozen=True)
class EnvConfig:
    """An environment config file of the local environment: its allow-list and free settings."""

    env: str
    allow: AllowList
    settings: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class _EnvConfigFile:
    """The keys the file may hold."""

    allow: AllowList = field(default_factory=AllowList)
    settings: dict[str, Any] = field(default_factory=dict)


def load_env_config(path: Path, env_name: str) -> EnvConfig:
    """Read and validate an environment config; kind and cluster need an explicit allow-list."""
    data = read_config_mapping(path)
    if data.get("allow") is None:
        if env_name in K8S_ENVS:
            raise ConfigError(f"{path}: allow: required for the {env_name} environment; there is no default")
        data.pop("allow", None)
    elif isinstance(data["allow"], dict):
        data["allow"] = with_current_keys(data["allow"], f"{path}: allow")
    parsed = parse_params(str(path), _EnvConfigFile, data, noun="key")
    return EnvConfig(env=env_name, allow=parsed.allow, settings=parsed.settings)


# Plan targets that name a thing a fault acts on (the rest describe how, e.g. a pid).
PRIMARY_TARGETS = ("ray-node:", "device:", "vllm:", "replica:", "k8s-node:", "pod:")


def ensure_plan_is_allowed(targets: list[str], allow: AllowList, ray_address: str = "") -> None:
    """Refuse, before injection, a plan that touches anything the allow-list does not name."""
    if allow.ray_addresses and ray_address and ray_address not in allow.ray_addresses:
        raise ConfigError(f"allow.ray_addresses: {ray_address} is not allowed ({list(allow.ray_addresses)})")
    for target in targets:
        if target.startswith("device:") and allow.devices:
            device = target.split(":", 1)[1]
            if device not in allow.devices:
                raise ConfigError(f"allow.devices: device {device} is not allowed ({list(allow.devices)})")
    primary = {t for t in targets if t.startswith(PRIMARY_TARGETS) and not t.startswith("replica:")}
    if len(primary) > allow.max_targets:
        raise ConfigError(
            f"allow.max_targets: the plan touches {len(primary)} targets ({sorted(primary)}), "
            f"more than {allow.max_targets} at once"
        )
