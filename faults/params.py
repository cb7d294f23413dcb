"""Parameter checks and polling shared by every fault."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from inferchaos.errors import ConfigError


def param(params: dict[str, Any], key: str, kind: type, default: Any, fault: str) -> Any:
    """Read one parameter, refusing a wrong type with a message naming it."""
    value = params.get(key, default)
    if value is None:
        return None
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise ConfigError(f"{fault}: parameter {key!r} must be {kind.__name__}, got {value!r}")
    return value


def reject_unknown(params: dict[str, Any], known: set[str], fault: str) -> None:
    """An unknown parameter is a typo that would silently do nothing: refuse it."""
    unknown = sorted(set(params) - known)
    if unknown:
        raise ConfigError(f"{fault}: unknown parameter(s) {unknown}; known: {sorted(known)}")


def wait_until(check: Callable[[], bool], timeout_s: float, interval_s: float = 0.25) -> float | None:
    """Poll ``check`` until true; return the epoch time it became true, or None on timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return time.time()
        time.sleep(interval_s)
    return None
