"""The fault contract (README "Architecture"): plan, inject, revert, evidence; and the one base that keeps it.

A fault is a named, layer-tagged injector. ``inject`` writes a ledger entry *before* it
acts and keeps what ``revert`` needs in the handle; ``revert`` is idempotent and removes
the entry; ``evidence`` says, with the symptom a user would see, whether the fault bit.

:class:`TypedFault` implements that sequence once: parameters are parsed into the fault's
own dataclass (``params_type``) by :func:`inferchaos.params.parse_params`, the environment is
narrowed to the capability the fault acts through, and the fault supplies only its steps
(``_plan``, ``_act``, ``_undo``, ``_evidence``).
"""

from __future__ import annotations

import logging
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeAlias, TypeVar

from inferchaos.errors import ConfigError
from inferchaos.layers import Layer
from inferchaos.params import parse_params
from inferchaos.primitives.capabilities import NamedEnvironment

if TYPE_CHECKING:
    from inferchaos.faults.ledger import Ledger

logger = logging.getLogger(__name__)

# What a ledger entry and a report can hold: parameters, state and evidence are written as JSON,
# so anything else put there would be lost (or refused) when `inferchaos cleanup` reads it back.
JsonValue: TypeAlias = str | int | float | bool | None | list["JsonValue"] | dict[str, "JsonValue"]
JsonObject: TypeAlias = dict[str, JsonValue]


@dataclass(frozen=True)
class RevertWait:
    """How long a fault's revert waits for the platform to come back before it raises
    :class:`~inferchaos.errors.PlatformDidNotRecover`.

    ``key``: the parameter that sets it. ``from_inject``: the wait is a deadline counted from
    the injection, not from the revert, so the time the fault is held uses part of it.
    """

    seconds: float
    key: str
    from_inject: bool = False

    def after_revert_s(self, held_s: float) -> float:
        """The wait counted from the revert, for a fault held ``held_s`` seconds before it."""
        return max(0.0, self.seconds - held_s) if self.from_inject else self.seconds


@dataclass
class FaultPlan:
    """What a fault would do, for --dry-run and blast-radius checks; touches nothing.

    ``revert_wait``: how long its revert waits for the platform (None: it does not wait).
    """

    fault: str
    layer: Layer
    description: str
    targets: list[str]
    params: JsonObject = field(default_factory=dict)
    revert_wait: RevertWait | None = None


@dataclass
class FaultHandle:
    """A live injection: everything revert needs, persisted in the ledger."""

    fault: str
    layer: Layer
    params: JsonObject
    env: str
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    created_at: float = field(default_factory=time.time)
    injected_at: float | None = None
    reverted_at: float | None = None
    # Written as JSON (see Planned.state), but each fault reads its own keys back as the types it
    # stored; a JsonValue here would need a check at every read in every fault.
    state: dict[str, Any] = field(default_factory=dict)


# The evidence timestamp of a fault that saw Ray mark the node it acted on DEAD: Ray's node
# counts are then the fault's own symptom (a partition that outlived the node-death budget).
NODE_DEAD_AT = "node_dead_at"


@dataclass
class Evidence:
    """Whether the fault bit, shown by user-visible symptoms, plus ground-truth timestamps."""

    bit: bool
    reason: str
    symptoms: JsonObject = field(default_factory=dict)
    timestamps: dict[str, float] = field(default_factory=dict)


class Fault(ABC):
    """What the runner, `inferchaos cleanup` and the Chaos Toolkit adapter call.

    ``name`` is ``<layer>.<verb>``; ``aliases`` are names older releases used, still accepted
    on lookup (see :mod:`faults.registry`).
    """

    name: ClassVar[str]
    layer: ClassVar[Layer]
    aliases: ClassVar[tuple[str, ...]] = ()

    @abstractmethod
    def plan(self, env: object, params: JsonObject) -> FaultPlan:
        """Validate ``params`` against ``env`` and list exactly what would be touched."""

    @abstractmethod
    def inject(self, env: object, params: JsonObject, ledger: Ledger) -> FaultHandle:
        """Record the handle in ``ledger`` first, then act; return the handle."""

    @abstractmethod
    def revert(self, env: object, handle: FaultHandle, ledger: Ledger) -> None:
        """Undo the injection; safe to call twice and after a crash; removes the ledger entry."""

    @abstractmethod
    def evidence(self, env: object, handle: FaultHandle) -> Evidence:
        """Read the symptoms that show whether the fault bit."""


@dataclass
class Planned:
    """What a plan found: a description, every object it would touch, and the state act/undo need.

    ``params``: the parameters to record, when planning resolved some (a count sized from the
    cluster); None records them as given.
    """

    description: str
    targets: list[str]
    state: JsonObject = field(default_factory=dict)
    params: JsonObject | None = None


P = TypeVar("P")
E = TypeVar("E")


class TypedFault(Fault, Generic[P, E]):
    """A fault whose parameters are one dataclass and whose environment is one capability.

    Subclasses set ``name``, ``layer``, ``params_type`` and implement :meth:`_open` (narrow the
    environment, refusing the wrong one) and the four steps. ``rollback_keys``: the parameters
    a Chaos Toolkit rollback names to pick which of this fault's ledger entries it reverts
    (none: every entry). ``evidence_at_inject``: whether inject waits for the effect, so the
    Chaos Toolkit action can report the evidence at once.
    """

    params_type: ClassVar[type]
    rollback_keys: ClassVar[tuple[str, ...]] = ()
    evidence_at_inject: ClassVar[bool] = True

    def parse(self, params: JsonObject) -> P:
        """The typed parameters of this fault; ConfigError on bad input."""
        parsed: P = parse_params(self.name, self.params_type, params)
        return parsed

    def revert_wait(self, params: P) -> RevertWait | None:
        """How long the revert waits for the platform to come back; None where it does not wait.

        The one place that says it: validation reads it to keep every recovery window shorter
        (a platform back after the window must fail the window, not time out the revert).
        """
        return None

    def plan(self, env: object, params: JsonObject) -> FaultPlan:
        opened = self._open(env)
        planned = self._checked_plan(opened, params)
        recorded = dict(params) if planned.params is None else planned.params
        wait = self.revert_wait(self.parse(recorded))
        return FaultPlan(self.name, self.layer, planned.description, planned.targets, recorded, wait)

    def inject(self, env: object, params: JsonObject, ledger: Ledger) -> FaultHandle:
        opened = self._open(env)
        planned = self._checked_plan(opened, params)
        recorded = dict(params) if planned.params is None else planned.params
        handle = FaultHandle(self.name, self.layer, recorded, env_name(env), state=planned.state)
        ledger.record(handle)
        logger.info("%s [%s]: %s", self.name, handle.id, planned.description)
        self._act(opened, self.parse(recorded), handle, ledger)
        handle.injected_at = handle.injected_at or time.time()
        ledger.record(handle)
        return handle

    def revert(self, env: object, handle: FaultHandle, ledger: Ledger) -> None:
        self._undo(self._open(env), self.parse(handle.params), handle, ledger)
        handle.reverted_at = handle.reverted_at or time.time()
        ledger.remove(handle.id)
        logger.info("%s [%s]: reverted", self.name, handle.id)

    def evidence(self, env: object, handle: FaultHandle) -> Evidence:
        return self._evidence(self._open(env), self.parse(handle.params), handle)

    def _checked_plan(self, opened: E, params: JsonObject) -> Planned:
        return self._plan(opened, self.parse(params))

    @abstractmethod
    def _open(self, env: object) -> E:
        """The capability of ``env`` this fault acts through; ConfigError when it has none."""

    @abstractmethod
    def _plan(self, env: E, params: P) -> Planned:
        """Check ``params`` against the environment and read what would be touched; act on nothing."""

    @abstractmethod
    def _act(self, env: E, params: P, handle: FaultHandle, ledger: Ledger) -> None:
        """Inject, using ``handle.state`` from the plan; record the ledger again as state grows."""

    @abstractmethod
    def _undo(self, env: E, params: P, handle: FaultHandle, ledger: Ledger) -> None:
        """Restore what ``_act`` changed, from the handle alone; a no-op when already restored."""

    @abstractmethod
    def _evidence(self, env: E, params: P, handle: FaultHandle) -> Evidence:
        """Read the symptom that shows whether the fault bit."""


def capability_error(fault: str, env: object, where: str) -> ConfigError:
    """The refusal of an ``env`` that lacks the capability ``fault`` acts through: callers narrow
    with ``isinstance`` themselves (a runtime-checkable Protocol cannot be a type parameter), and
    raise this: "<fault> acts on <where>, not on '<env>'"."""
    return ConfigError(f"{fault} acts on {where}, not on {env_name(env)!r}")


def env_name(env: object) -> str:
    """The name an environment gives itself, for ledger entries and messages."""
    return env.name if isinstance(env, NamedEnvironment) else type(env).__name__


def timestamps(handle: FaultHandle) -> dict[str, float]:
    """The ground-truth times of ``handle`` that are set."""
    stamps = {
        "created_at": handle.created_at,
        "injected_at": handle.injected_at,
        "reverted_at": handle.reverted_at,
    }
    return {k: v for k, v in stamps.items() if v is not None}


def set_times(times: dict[str, float | None]) -> dict[str, float]:
    """The times of ``times`` that are set (evidence leaves out what never happened)."""
    return {k: float(v) for k, v in times.items() if v}


def byte_count(fault: str, key: str, value: int | float | None) -> int | None:
    """A positive whole number of bytes (YAML may spell it 1.9e9), for a params ``__post_init__``."""
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ConfigError(f"{fault}: parameter {key!r} must be a positive number of bytes, got {value!r}")
    return value


def replica_name(replica: int | str) -> str:
    """A replica by number (``1``) or by name (``replica-1``) -> its name."""
    if isinstance(replica, int) and not isinstance(replica, bool):
        return f"replica-{replica}"
    return str(replica)


def wait_until(check: Callable[[], bool], timeout_s: float, interval_s: float = 0.25) -> float | None:
    """Poll ``check`` until true; return the epoch time it became true, or None on timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return time.time()
        time.sleep(interval_s)
    return None
