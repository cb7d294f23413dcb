"""The life cycle every Kubernetes fault shares.

``plan`` checks the context and parameters against the allow-list and reads what the fault
would touch (read-only). ``inject`` re-plans, writes the ledger entry carrying that plan's
state, and only then acts. ``revert`` undoes from the handle alone, so ``inferchaos cleanup``
can revert an entry left by a crashed run, and removes the entry.
"""

from __future__ import annotations

import logging
import time
from abc import abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

from inferchaos.faults.base import Evidence, Fault, FaultHandle, FaultPlan
from inferchaos.faults.ledger import Ledger
from inferchaos.layers import Layer
from inferchaos.params import parse_params
from inferchaos.primitives.kube.client import K8sTarget, env_name, target_of

logger = logging.getLogger(__name__)

P = TypeVar("P")


@dataclass
class Planned:
    """What a plan found: a description, every object it would touch, and the state act/undo need."""

    description: str
    targets: list[str]
    state: dict[str, Any] = field(default_factory=dict)


class K8sFault(Fault, Generic[P]):
    """A fault of the Kubernetes layer; subclasses set ``params_type`` and the four steps."""

    layer: ClassVar[Layer] = Layer.K8S
    params_type: ClassVar[type]

    def parse(self, params: dict[str, Any]) -> P:
        """The typed parameters of this fault; ConfigError on bad input."""
        return parse_params(self.name, self.params_type, params)

    def plan(self, env: Any, params: dict[str, Any]) -> FaultPlan:
        planned = self._checked_plan(target_of(env), params)
        return FaultPlan(self.name, self.layer, planned.description, planned.targets, dict(params))

    def inject(self, env: Any, params: dict[str, Any], ledger: Ledger) -> FaultHandle:
        target = target_of(env)
        planned = self._checked_plan(target, params)
        handle = FaultHandle(self.name, self.layer, dict(params), env_name(env), state=planned.state)
        ledger.record(handle)
        logger.info("%s [%s]: %s", self.name, handle.id, planned.description)
        self._act(target, self.parse(params), handle)
        handle.injected_at = time.time()
        ledger.record(handle)
        return handle

    def revert(self, env: Any, handle: FaultHandle, ledger: Ledger) -> None:
        self._undo(target_of(env), self.parse(handle.params), handle)
        handle.reverted_at = time.time()
        ledger.remove(handle.id)
        logger.info("%s [%s]: reverted", self.name, handle.id)

    def evidence(self, env: Any, handle: FaultHandle) -> Evidence:
        return self._evidence(target_of(env), self.parse(handle.params), handle)

    def _checked_plan(self, target: K8sTarget, params: dict[str, Any]) -> Planned:
        target.allow.ensure_context(self.name, target.context)
        return self._plan(target, self.parse(params))

    @abstractmethod
    def _plan(self, target: K8sTarget, params: P) -> Planned:
        """Check ``params`` against ``target.allow`` and read what would be touched; act on nothing."""

    @abstractmethod
    def _act(self, target: K8sTarget, params: P, handle: FaultHandle) -> None:
        """Inject, using ``handle.state`` from the plan."""

    @abstractmethod
    def _undo(self, target: K8sTarget, params: P, handle: FaultHandle) -> None:
        """Restore what ``_act`` changed; a no-op when already restored."""

    @abstractmethod
    def _evidence(self, target: K8sTarget, params: P, handle: FaultHandle) -> Evidence:
        """Read the symptom that shows whether the fault bit."""


def timestamps(handle: FaultHandle) -> dict[str, float]:
    """The ground-truth times of ``handle`` that are set."""
    stamps = {
        "created_at": handle.created_at,
        "injected_at": handle.injected_at,
        "reverted_at": handle.reverted_at,
    }
    return {k: v for k, v in stamps.items() if v is not None}
