"""Name -> fault class. Every fault registers itself with :func:`register`."""

from __future__ import annotations

import importlib

from inferchaos.errors import ConfigError
from inferchaos.faults.base import Fault

_REGISTRY: dict[str, type[Fault]] = {}
# Every module that defines built-in faults; imported on first lookup so that a name is known
# however the caller reached the registry (CLI, Chaos Toolkit action, cleanup after a crash).
BUILTIN_FAULT_MODULES = (
    "inferchaos.faults.ray.node",
    "inferchaos.faults.ray.actors",
    "inferchaos.faults.ray.placement",
    "inferchaos.faults.vllm.flood",
    "inferchaos.faults.vllm.engine",
    "inferchaos.faults.gpu.squat",
    "inferchaos.faults.k8s.node",
    "inferchaos.faults.k8s.pod",
    "inferchaos.faults.k8s.ledger",
)
_loaded = False


def _load_builtin_faults() -> None:
    global _loaded
    if _loaded:
        return
    for module in BUILTIN_FAULT_MODULES:
        importlib.import_module(module)
    _loaded = True


def register(cls: type[Fault]) -> type[Fault]:
    """Class decorator: make ``cls`` available by its ``name``."""
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"fault name {cls.name!r} registered twice")
    _REGISTRY[cls.name] = cls
    return cls


def get_fault(name: str) -> Fault:
    """An instance of the fault called ``name``; ConfigError naming the known ones otherwise."""
    _load_builtin_faults()
    if name not in _REGISTRY:
        known = ", ".join(sorted(_REGISTRY)) or "none"
        raise ConfigError(f"unknown fault {name!r}; known faults: {known}")
    return _REGISTRY[name]()


def fault_names() -> list[str]:
    """Every registered fault name."""
    _load_builtin_faults()
    return sorted(_REGISTRY)
