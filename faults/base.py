"""The fault contract (design.md "Fault"): plan, inject, revert, evidence.

A fault is a named, layer-tagged injector. ``inject`` writes a ledger entry *before* it
acts and keeps what ``revert`` needs in the handle; ``revert`` is idempotent and removes
the entry; ``evidence`` says, with the symptom a user would see, whether the fault bit.
"""

from __future__ import annotations

import time
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from inferchaos.layers import Layer


@dataclass
class FaultPlan:
    """What a fault would do, for --dry-run and blast-radius checks; touches nothing."""

    fault: str
    layer: Layer
    description: str
    targets: list[str]
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class FaultHandle:
    """A live injection: everything revert needs, persisted in the ledger."""

    fault: str
    layer: Layer
    params: dict[str, Any]
    env: str
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    created_at: float = field(default_factory=time.time)
    injected_at: float | None = None
    reverted_at: float | None = None
    state: dict[str, Any] = field(default_factory=dict)


@dataclass
class Evidence:
    """Whether the fault bit, shown by user-visible symptoms, plus ground-truth timestamps."""

    bit: bool
    reason: str
    symptoms: dict[str, Any] = field(default_factory=dict)
    timestamps: dict[str, float] = field(default_factory=dict)


class Fault(ABC):
    """Base of every injector. Subclasses set ``name`` and ``layer``."""

    name: ClassVar[str]
    layer: ClassVar[Layer]

    @abstractmethod
    def plan(self, env: Any, params: dict[str, Any]) -> FaultPlan:
        """Validate ``params`` against ``env`` and list exactly what would be touched."""

    @abstractmethod
    def inject(self, env: Any, params: dict[str, Any], ledger: Any) -> FaultHandle:
        """Record the handle in ``ledger`` first, then act; return the handle."""

    @abstractmethod
    def revert(self, env: Any, handle: FaultHandle, ledger: Any) -> None:
        """Undo the injection; safe to call twice and after a crash; removes the ledger entry."""

    @abstractmethod
    def evidence(self, env: Any, handle: FaultHandle) -> Evidence:
        """Read the symptoms that show whether the fault bit."""
