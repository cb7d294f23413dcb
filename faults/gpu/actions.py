"""The device-memory squat as Chaos Toolkit actions (python providers of ``faults.gpu.actions``).

The action plans (refusing what it cannot do), writes the ledger entry, injects and returns the
handle id with the evidence; the rollback reverts every live ``squat_device_memory`` entry of
the ledger, so it works in a later process and after a crash, and returns the ids it reverted.
The environment and the ledger are the local ones (``LocalEnvironment()``, ``Ledger()``), or
those under ``configuration['inferchaos_home']`` (see :mod:`faults.actions`).
"""

from __future__ import annotations

from typing import Any

from inferchaos.faults.actions import Configuration, Secrets, inject_action, rollback_action
from inferchaos.faults.gpu.squat import NAME as SQUAT

# Chaos Toolkit function -> registered fault: how the inferchaos runner reads a `method`.
FAULT_OF = {"squat_device_memory": SQUAT}


def squat_device_memory(
    device: str,
    # Named as in experiments (shadowing the builtin here only); YAML may write 2e9.
    bytes: int | float | None = None,
    fraction: float | None = None,
    backend: str | None = None,
    replica_need_bytes: int | float | None = None,
    fail_within_s: float | None = None,
    restart_replica: bool | None = None,
    configuration: Configuration = None,
    secrets: Secrets = None,
) -> dict[str, Any]:
    """Hold ``bytes`` (or ``fraction`` of the total) of ``device`` (``host:<slot>`` or ``cuda:<index>``)."""
    params = {
        "device": device,
        "bytes": bytes,
        "fraction": fraction,
        "backend": backend,
        "replica_need_bytes": replica_need_bytes,
        "fail_within_s": fail_within_s,
        "restart_replica": restart_replica,
    }
    return inject_action(SQUAT, params, configuration)


def rollback_squat_device_memory(configuration: Configuration = None, secrets: Secrets = None) -> list[str]:
    """End every squatter the ledger still lists; the ids of the entries reverted."""
    return rollback_action(SQUAT, configuration)
