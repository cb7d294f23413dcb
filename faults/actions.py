"""Running a registered fault as a Chaos Toolkit action, and its rollback, on the local environment.

Chaos Toolkit calls module functions with ``configuration``/``secrets``; these helpers open
the environment and the ledger named there and keep one fault object per process, so a
rollback in the same `chaos run` finds the background work (a flood, a leak) its action
started. A rollback reverts every live ledger entry of its fault, so it also works in a later
process, after a crash.
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from pathlib import Path
from typing import Any

from inferchaos.faults.base import Fault
from inferchaos.faults.ledger import Ledger
from inferchaos.faults.registry import get_fault

logger = logging.getLogger(__name__)

Configuration = dict[str, Any] | None
Secrets = dict[str, Any] | None

_FAULTS: dict[str, Fault] = {}


def shared_fault(name: str) -> Fault:
    """The process-wide instance of fault ``name``."""
    if name not in _FAULTS:
        _FAULTS[name] = get_fault(name)
    return _FAULTS[name]


def open_environment(configuration: Configuration) -> Any:
    """The local environment recorded under ``configuration['inferchaos_home']`` (or the default)."""
    from inferchaos.environments.local.env import LocalEnvironment

    home = (configuration or {}).get("inferchaos_home")
    state_dir = Path(home) / "env" / "local" if home else None
    return LocalEnvironment(state_dir=state_dir)


def open_ledger(configuration: Configuration) -> Ledger:
    home = (configuration or {}).get("inferchaos_home")
    return Ledger(Path(home) / "ledger" if home else None)


def inject_action(fault_name: str, params: dict[str, Any], configuration: Configuration) -> dict[str, Any]:
    """Inject ``fault_name`` with ``params`` (None values dropped); return handle id and evidence."""
    params = {k: v for k, v in params.items() if v is not None}
    env = open_environment(configuration)
    fault = shared_fault(fault_name)
    handle = fault.inject(env, params, open_ledger(configuration))
    evidence = fault.evidence(env, handle)
    if not evidence.bit:
        logger.warning("%s did not bite: %s", fault_name, evidence.reason)
    return {"handle": handle.id, "effect_observed": evidence.bit, "evidence": asdict(evidence)}


def rollback_action(fault_name: str, configuration: Configuration) -> list[str]:
    """Revert every live ledger entry of ``fault_name``; return the ids reverted."""
    env = open_environment(configuration)
    ledger = open_ledger(configuration)
    fault = shared_fault(fault_name)
    reverted = []
    for handle in ledger.entries():
        if handle.fault == fault_name:
            fault.revert(env, handle, ledger)
            reverted.append(handle.id)
    return reverted
