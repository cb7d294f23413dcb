"""Real chaoslib journals of a tiny experiment: what an inferchaos journal's shape is checked against.

The experiment's python providers are the functions below. chaoslib's own Runner writes the
journal (continuous strategy, so ``before``, ``during`` and ``after`` are all filled, rollbacks
always played); chaoslib's ``run_steady_state_hypothesis`` gives a hypothesis whose probe failed.
Nothing here is written by hand: every key and type comes from chaoslib.
"""

from __future__ import annotations

import logging
from typing import Any

from chaoslib.exceptions import ActivityFailed
from chaoslib.hypothesis import run_steady_state_hypothesis
from chaoslib.run import EventHandlerRegistry, Runner
from chaoslib.types import Schedule, Strategy

MODULE = __name__


def observed_value() -> float:
    """A probe that reads a number."""
    return 0.25


def no_value() -> float:
    """A probe that cannot read anything."""
    raise ActivityFailed("no data")


def act() -> dict[str, Any]:
    """An action (the method's and the rollback's)."""
    return {"ok": True}


def _activity(kind: str, name: str, func: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": kind,
        "name": name,
        "provider": {"type": "python", "module": MODULE, "func": func},
        **extra,
    }


def experiment(probe_func: str = "observed_value") -> dict[str, Any]:
    """A one-probe hypothesis, a one-action method (paused so the continuous hypothesis runs) and a rollback."""
    return {
        "title": "chaoslib reference",
        "description": "what chaoslib writes",
        "steady-state-hypothesis": {
            "title": "the value is small",
            "probes": [
                _activity("probe", "value", probe_func, tolerance={"type": "range", "range": [0, 0.5]})
            ],
        },
        "method": [_activity("action", "act", "act", pauses={"after": 0.3})],
        "rollbacks": [_activity("action", "undo", "act")],
    }


def reference_journal() -> dict[str, Any]:
    """The journal chaoslib's Runner writes for :func:`experiment`."""
    # chaoslib logs every step at INFO and warns about its own thread pools; not this test's news.
    logging.getLogger("chaostoolkit").setLevel(logging.ERROR)
    with Runner(Strategy.CONTINUOUS, Schedule(continuous_hypothesis_frequency=0.05)) as runner:
        journal: dict[str, Any] = runner.run(
            experiment(), settings={"runtime": {"rollbacks": {"strategy": "always"}}}
        )
    return journal


def failed_hypothesis() -> dict[str, Any]:
    """chaoslib's hypothesis result when its probe could not read a value."""
    state: dict[str, Any] = run_steady_state_hypothesis(
        experiment("no_value"), {}, {}, dry=None, event_registry=EventHandlerRegistry()
    )
    return state
