"""The environment config file: what a run may touch (the allow-list)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inferchaos.config_files import read_config_mapping
from inferchaos.errors import ConfigError


@dataclass(frozen=True)
class AllowList:
    """What may be touched; anything else is refused before injection."""

    ray_addresses: tuple[str, ...] = ()
    kube_contexts: tuple[str, ...] = ()
    namespaces: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()
    max_targets: int = 1


@dataclass(frozen=True)
class EnvConfig:
    env: str
    allow: AllowList
    settings: dict[str, Any] = field(default_factory=dict)


def load_env_config(path: Path, env_name: str) -> EnvConfig:
    """Read and validate an environment config; kind and cluster need an explicit allow-list."""
    data = read_config_mapping(path)
    allow = data.get("allow")
    if allow is None:
        if env_name in ("kind", "cluster"):
            raise ConfigError(f"{path}: allow: required for the {env_name} environment; there is no default")
        allow = {}
    if not isinstance(allow, dict):
        raise ConfigError(f"{path}: allow: must be a mapping")
    known = {"ray_addresses", "kube_contexts", "namespaces", "devices", "max_targets"}
    unknown = sorted(set(allow) - known)
    if unknown:
        raise ConfigError(f"{path}: allow.{unknown[0]}: unknown key; known: {sorted(known)}")
    max_targets = allow.get("max_targets", 1)
    if isinstance(max_targets, bool) or not isinstance(max_targets, int) or max_targets < 1:
        raise ConfigError(f"{path}: allow.max_targets: must be a positive integer, got {max_targets!r}")
    lists = {}
    for key in known - {"max_targets"}:
        value = allow.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{path}: allow.{key}: must be a list of strings")
        lists[key] = tuple(value)
    return EnvConfig(
        env=env_name, allow=AllowList(max_targets=max_targets, **lists), settings=data.get("settings", {})
    )


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
