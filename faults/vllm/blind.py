"""A blind health check: the replicas answer Serve with vLLM's /health alone, as most platforms do.

vLLM's ``/health`` only checks an ``errored`` flag, so a check that forwards it keeps a hung
engine in rotation. The embedded environment's replicas also ask that their requests make
progress (environments/local/progress_check.py); this fault switches every replica to the
plain check for as long as it holds, which is how a negative control shows what a platform
with a blind health check would let through. It targets the platform's own machinery, not a
replica's processes: nothing is killed or stopped, and revert restores the check the
environment was started with.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from inferchaos.errors import ConfigError
from inferchaos.faults.base import (
    Evidence,
    FaultHandle,
    Planned,
    TypedFault,
    capability_error,
    timestamps,
)
from inferchaos.faults.ledger import Ledger
from inferchaos.faults.registry import register
from inferchaos.layers import Layer
from inferchaos.primitives.capabilities import HealthCheckEnvironment

logger = logging.getLogger(__name__)

NAME = "vllm.blind_health_check"
PLAIN = "plain"


@dataclass
class BlindHealthCheckParams:
    """No parameters: every replica of the environment is switched to the plain check."""


@register
class BlindHealthCheck(TypedFault[BlindHealthCheckParams, HealthCheckEnvironment]):
    """Switch every replica's health check to vLLM's /health alone until revert."""

    name = NAME
    layer = Layer.VLLM
    params_type = BlindHealthCheckParams

    def _open(self, env: object) -> HealthCheckEnvironment:
        if not isinstance(env, HealthCheckEnvironment):
            raise capability_error(
                self.name,
                env,
                "an environment whose replicas' health check inferchaos sets (the embedded local one)",
            )
        return env

    def _plan(self, env: HealthCheckEnvironment, params: BlindHealthCheckParams) -> Planned:
        before = env.health_check_in_force()
        if before == PLAIN:
            raise ConfigError(
                f"{self.name}: the replicas' health check is plain already; there is nothing to blind"
            )
        return Planned(
            f"switch every replica's health check from {before} to plain (vLLM's /health alone, "
            "blind to a hung engine) until revert",
            ["health-check:replicas"],
            {"before": before},
        )

    def _act(
        self, env: HealthCheckEnvironment, params: BlindHealthCheckParams, handle: FaultHandle, ledger: Ledger
    ) -> None:
        env.override_health_check(PLAIN)

    def _undo(
        self, env: HealthCheckEnvironment, params: BlindHealthCheckParams, handle: FaultHandle, ledger: Ledger
    ) -> None:
        env.override_health_check(None)

    def _evidence(
        self, env: HealthCheckEnvironment, params: BlindHealthCheckParams, handle: FaultHandle
    ) -> Evidence:
        in_force, before = env.health_check_in_force(), handle.state.get("before")
        # Once reverted, the check is meant to be back: the override held while the entry did.
        bit = in_force == PLAIN or handle.reverted_at is not None
        return Evidence(
            bit,
            f"the replicas' health check is {in_force} (was {before})",
            {"health_check": in_force, "before": before},
            timestamps(handle),
        )
