"""Every registered fault as a Chaos Toolkit action and its rollback: the one adapter.

For the fault ``<layer>.<verb>``, the provider module ``inferchaos.ctk.<layer>_actions``
holds ``<verb>`` and ``rollback_<verb>``, generated here from the registry. Their signatures
are the fault's parameter dataclass (plus ``configuration`` and ``secrets``), so chaoslib's own
check of a python activity, and every parameter, work from YAML.

- The action plans (refusing what it cannot do), writes the ledger entry, injects, and returns
  the handle; faults that wait for their effect in inject also return its evidence.
- The rollback reverts the live ledger entries of its fault whose parameters match its
  arguments (the fault's ``rollback_keys``; none: every entry), so it also works in a later
  process and after a crash, and returns the ids it reverted.

Kubernetes faults act on the cluster ``configuration`` describes (:mod:`faults.k8s.configuration`);
the others on the local environment under ``configuration['inferchaos_home']`` (or the
default). One fault object is kept per process, so a rollback in the same `chaos run` finds
the background work (a flood, a leak) its action started.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import MISSING, asdict, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_type_hints

from inferchaos.faults.base import Fault, JsonObject, TypedFault
from inferchaos.faults.k8s.configuration import Configuration, Secrets, env_from_configuration
from inferchaos.faults.ledger import Ledger
from inferchaos.faults.registry import actions_module, canonical_name, faults_of_layer, get_fault
from inferchaos.layers import Layer

if TYPE_CHECKING:
    from inferchaos.environments.local.env import LocalEnvironment

logger = logging.getLogger(__name__)

CTK_PARAMS = ("configuration", "secrets")

_FAULTS: dict[str, Fault] = {}


def shared_fault(name: str) -> Fault:
    """The process-wide instance of fault ``name`` (an old name is accepted)."""
    name = canonical_name(name)
    if name not in _FAULTS:
        _FAULTS[name] = get_fault(name)
    return _FAULTS[name]


def open_local_environment(configuration: Configuration) -> LocalEnvironment:
    """The local environment recorded under ``configuration['inferchaos_home']`` (or the default)."""
    from inferchaos.environments.local.env import LocalEnvironment

    home = (configuration or {}).get("inferchaos_home")
    return LocalEnvironment(state_dir=Path(home) / "env" / "local" if home else None)


@contextmanager
def open_environment(fault: Fault, configuration: Configuration, secrets: Secrets) -> Iterator[object]:
    """The environment ``fault`` acts on, as ``configuration`` names it; closed afterwards."""
    if fault.layer is not Layer.K8S:
        yield open_local_environment(configuration)
        return
    env = env_from_configuration(configuration, secrets)
    try:
        yield env
    finally:
        env.k8s.api_client.close()


def open_ledger(configuration: Configuration) -> Ledger:
    """The ledger ``inferchaos_ledger`` names, else the one under ``inferchaos_home``, else the default."""
    config = configuration or {}
    if config.get("inferchaos_ledger"):
        return Ledger(Path(config["inferchaos_ledger"]))
    home = config.get("inferchaos_home")
    return Ledger(Path(home) / "ledger" if home else None)


def inject_action(
    fault_name: str, params: JsonObject, configuration: Configuration, secrets: Secrets = None
) -> JsonObject:
    """Inject ``fault_name`` with ``params`` (None values dropped); return the handle (and evidence)."""
    fault = shared_fault(fault_name)
    params = {k: v for k, v in params.items() if v is not None}
    with open_environment(fault, configuration, secrets) as env:
        handle = fault.inject(env, params, open_ledger(configuration))
        result: JsonObject = {**asdict(handle), "handle": handle.id}
        if isinstance(fault, TypedFault) and fault.evidence_at_inject:
            evidence = fault.evidence(env, handle)
            if not evidence.bit:
                logger.warning("%s did not bite: %s", fault.name, evidence.reason)
            result.update(effect_observed=evidence.bit, evidence=asdict(evidence))
    return result


def rollback_action(
    fault_name: str,
    configuration: Configuration,
    secrets: Secrets = None,
    match: Mapping[str, object] | None = None,
) -> list[str]:
    """Revert every live ledger entry of ``fault_name`` whose parameters equal ``match``; the ids reverted."""
    fault = shared_fault(fault_name)
    reverted = []
    with open_environment(fault, configuration, secrets) as env:
        ledger = open_ledger(configuration)
        for handle in ledger.entries():
            if canonical_name(handle.fault) != fault.name:
                continue
            if match and isinstance(fault, TypedFault):
                recorded = fault.parse(handle.params)
                if any(getattr(recorded, key) != value for key, value in match.items()):
                    continue
            fault.revert(env, handle, ledger)
            reverted.append(handle.id)
    return reverted


def fault_effect(fault_name: str, configuration: Configuration, secrets: Secrets = None) -> JsonObject:
    """Evidence of every live ledger entry of ``fault_name``: did it bite, and how (for the journal)."""
    fault = shared_fault(fault_name)
    with open_environment(fault, configuration, secrets) as env:
        evidence = [
            fault.evidence(env, handle)
            for handle in open_ledger(configuration).entries()
            if canonical_name(handle.fault) == fault.name
        ]
    return {
        "effect_observed": bool(evidence) and all(e.bit for e in evidence),
        "evidence": [asdict(e) for e in evidence],
    }


# -- the generated provider functions ------------------------------------------------------------
def _signature(params_type: type, only: tuple[str, ...] | None, returns: object) -> inspect.Signature:
    """The fault's parameters (all, or ``only`` these) as a function signature, then configuration and secrets."""
    hints = get_type_hints(params_type)
    parameters = []
    for f in fields(params_type):
        if only is not None and f.name not in only:
            continue
        if f.default is not MISSING:
            default: object = f.default
        elif f.default_factory is not MISSING:
            default = f.default_factory()
        else:
            default = inspect.Parameter.empty
        parameters.append(
            inspect.Parameter(
                f.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default, annotation=hints[f.name]
            )
        )
    parameters += [
        inspect.Parameter(
            name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None, annotation=Configuration
        )
        for name in CTK_PARAMS
    ]
    return inspect.Signature(parameters, return_annotation=returns)


def _dress(
    function: Callable[..., object], name: str, module: str, doc: str, signature: inspect.Signature
) -> None:
    """Make ``function`` look to chaoslib (and to ``help()``) like a plain module function."""
    function.__name__ = function.__qualname__ = name
    function.__module__ = module
    function.__doc__ = doc
    function.__signature__ = signature  # type: ignore[attr-defined]
    function.__annotations__ = {
        **{p.name: p.annotation for p in signature.parameters.values()},
        "return": signature.return_annotation,
    }


def _split(
    signature: inspect.Signature, args: tuple[object, ...], kwargs: dict[str, object], defaults: bool
) -> tuple[JsonObject, Configuration, Secrets]:
    bound = signature.bind(*args, **kwargs)
    if defaults:
        bound.apply_defaults()
    arguments = dict(bound.arguments)
    return arguments, arguments.pop("configuration", None), arguments.pop("secrets", None)


def _action(cls: type[TypedFault[object, object]], module: str) -> Callable[..., JsonObject]:
    signature = _signature(cls.params_type, None, dict[str, Any])

    def action(*args: object, **kwargs: object) -> JsonObject:
        params, configuration, secrets = _split(signature, args, kwargs, defaults=False)
        return inject_action(cls.name, params, configuration, secrets)

    summary = (cls.__doc__ or cls.name).strip().splitlines()[0].rstrip(".")
    _dress(action, cls.name.split(".", 1)[1], module, f"{summary} (the {cls.name} fault).", signature)
    return action


def _rollback(cls: type[TypedFault[object, object]], module: str) -> Callable[..., list[str]]:
    signature = _signature(cls.params_type, cls.rollback_keys, list[str])

    def rollback(*args: object, **kwargs: object) -> list[str]:
        match, configuration, secrets = _split(signature, args, kwargs, defaults=True)
        return rollback_action(cls.name, configuration, secrets, match)

    which = f"whose {', '.join(cls.rollback_keys)} match" if cls.rollback_keys else "still live"
    doc = f"Revert every {cls.name} injection in the ledger {which}; the ids of the entries reverted."
    _dress(rollback, f"rollback_{cls.name.split('.', 1)[1]}", module, doc, signature)
    return rollback


def populate(namespace: dict[str, object], layer: Layer) -> list[str]:
    """Add the action and rollback of every fault of ``layer`` to a provider module's ``namespace``.

    Returns the names added (for the module's ``__all__``).
    """
    module = actions_module(layer)
    if namespace.get("__name__") != module:
        raise ValueError(f"the actions of layer {layer} belong in {module}, not {namespace.get('__name__')}")
    added = []
    for cls in faults_of_layer(layer):
        if not issubclass(cls, TypedFault) or not cls.name.startswith(f"{layer.value}."):
            continue  # a test's stand-in fault, with no parameter dataclass
        for function in (_action(cls, module), _rollback(cls, module)):
            namespace[function.__name__] = function
            added.append(function.__name__)
    return added
