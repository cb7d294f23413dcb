"""Name -> fault class: the one list of faults. Every fault registers itself with :func:`register`.

A fault is named ``<layer>.<verb>``; its Chaos Toolkit action is ``<verb>`` in the provider
module ``inferchaos.ctk.<layer>_actions`` (and its rollback ``rollback_<verb>``), so the
name, the YAML and the module never drift apart. Names of older releases (``kill_node``)
stay accepted wherever a fault is looked up by name, each use logging one deprecation line.
"""

from __future__ import annotations

import importlib
import logging

from inferchaos.errors import ConfigError
from inferchaos.faults.base import Fault
from inferchaos.layers import Layer

logger = logging.getLogger(__name__)

_REGISTRY: dict[str, type[Fault]] = {}
_ALIASES: dict[str, str] = {}
# Every module that defines built-in faults; imported on first lookup so that a name is known
# however the caller reached the registry (CLI, Chaos Toolkit action, cleanup after a crash).
BUILTIN_FAULT_MODULES = (
    "inferchaos.faults.ray.kill_node",
    "inferchaos.faults.ray.actors",
    "inferchaos.faults.ray.placement",
    "inferchaos.faults.ray.serve_controller",
    "inferchaos.faults.ray.gcs",
    "inferchaos.faults.vllm.flood",
    "inferchaos.faults.vllm.engine",
    "inferchaos.faults.vllm.hang",
    "inferchaos.faults.vllm.slow",
    "inferchaos.faults.vllm.blind",
    "inferchaos.faults.network.partition",
    "inferchaos.faults.network.degrade",
    "inferchaos.faults.device.squat",
    "inferchaos.faults.k8s.node",
    "inferchaos.faults.k8s.pod",
    "inferchaos.faults.k8s.scheduler_ledger",
)
# The layers with a fault package under faults/, each of which held its own provider module
# (`inferchaos.faults.<layer>.actions`) before the Chaos Toolkit glue moved to inferchaos.ctk.
FAULT_PACKAGES = ("device", "k8s", "network", "ray", "vllm")
# Provider modules that moved, so an old experiment file is told where its fault went.
MOVED_ACTION_MODULES = {
    "inferchaos.faults.gpu.actions": "inferchaos.ctk.device_actions",
    **{f"inferchaos.faults.{layer}.actions": f"inferchaos.ctk.{layer}_actions" for layer in FAULT_PACKAGES},
    "inferchaos.faults.k8s.probes": "inferchaos.ctk.k8s_probes",
}
_loaded = False


def _load_builtin_faults() -> None:
    global _loaded
    if _loaded:
        return
    for module in BUILTIN_FAULT_MODULES:
        importlib.import_module(module)
    _loaded = True


def register(cls: type[Fault]) -> type[Fault]:
    """Class decorator: make ``cls`` available by its ``name`` (and its old ``aliases``)."""
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"fault name {cls.name!r} registered twice")
    _REGISTRY[cls.name] = cls
    for alias in cls.aliases:
        _ALIASES[alias] = cls.name
    return cls


def canonical_name(name: str) -> str:
    """``name`` as registered: an old name is mapped to its ``<layer>.<verb>`` with a deprecation line."""
    _load_builtin_faults()
    if name in _ALIASES:
        new = _ALIASES[name]
        logger.warning("fault name %r is deprecated: use %r", name, new)
        return new
    return name


def get_fault(name: str) -> Fault:
    """An instance of the fault called ``name`` (or an old name of it); ConfigError naming the known ones otherwise."""
    name = canonical_name(name)
    if name not in _REGISTRY:
        known = ", ".join(sorted(_REGISTRY)) or "none"
        raise ConfigError(f"unknown fault {name!r}; known faults: {known}")
    return _REGISTRY[name]()


def fault_names() -> list[str]:
    """Every registered fault name."""
    _load_builtin_faults()
    return sorted(_REGISTRY)


def faults_of_layer(layer: Layer) -> list[type[Fault]]:
    """The registered fault classes of ``layer``, by name."""
    _load_builtin_faults()
    return [cls for name, cls in sorted(_REGISTRY.items()) if cls.layer is layer]


def actions_module(layer: Layer) -> str:
    """The Chaos Toolkit provider module of ``layer``'s faults."""
    return f"inferchaos.ctk.{layer.value}_actions"


def action_modules() -> list[str]:
    """The provider modules that hold fault actions, one per layer that has faults."""
    _load_builtin_faults()
    return sorted({actions_module(cls.layer) for cls in _REGISTRY.values()})


def fault_of_action(module: str, func: str) -> str | None:
    """The fault that the action ``func`` of provider ``module`` injects, or None."""
    _load_builtin_faults()
    for cls in _REGISTRY.values():
        if actions_module(cls.layer) == module and cls.name == f"{cls.layer.value}.{func}":
            return cls.name
    return None


def actions_of(module: str) -> list[str]:
    """The fault actions ``module`` offers (rollbacks left out)."""
    _load_builtin_faults()
    return sorted(
        name.split(".", 1)[1]
        for name, cls in _REGISTRY.items()
        if actions_module(cls.layer) == module and name.startswith(f"{cls.layer.value}.")
    )
