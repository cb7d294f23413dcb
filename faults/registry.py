"""Name -> fault class. Every fault registers itself with :func:`register`."""

from __future__ import annotations

from faults.base import Fault
from inferchaos.errors import ConfigError

_REGISTRY: dict[str, type[Fault]] = {}


def register(cls: type[Fault]) -> type[Fault]:
    """Class decorator: make ``cls`` available by its ``name``."""
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"fault name {cls.name!r} registered twice")
    _REGISTRY[cls.name] = cls
    return cls


def get_fault(name: str) -> Fault:
    """An instance of the fault called ``name``; ConfigError naming the known ones otherwise."""
    if name not in _REGISTRY:
        known = ", ".join(sorted(_REGISTRY)) or "none"
        raise ConfigError(f"unknown fault {name!r}; known faults: {known}")
    return _REGISTRY[name]()


def fault_names() -> list[str]:
    return sorted(_REGISTRY)
