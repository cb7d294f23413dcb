"""The one parser of user input: a mapping into its typed dataclass, refusing bad input early.

Fault parameters, experiment arguments and the environment config files all go through
:func:`parse_params`. The target is a plain dataclass; its type hints say what each key takes
(``int``, ``float``, ``str``, ``bool``, ``Literal``, a ``StrEnum``, ``list``/``tuple``/``dict``
of those, unions, and nested dataclasses for nested blocks), and its ``__post_init__`` checks
what types cannot say, raising :class:`InvalidValue` (a key and its problem) or ConfigError.

Every problem is one line naming where it is: ``{name}: unknown parameter(s) x; known: a, b``,
``{name}: parameter 'x' must be float, got 'a'``, ``{name}: missing required parameter(s) x``,
and ``{name}: allow.max_targets: must be at least 1, got 0`` for a check of a nested block.
A float is finite: ``.nan`` and ``.inf`` are refused wherever a number is read.

:func:`number` and :func:`seconds` read one number or duration for a parser that walks a
document itself (the SLOs, an experiment's pauses), with the same rules and messages.
"""

from __future__ import annotations

import enum
import math
import types
import typing
from dataclasses import MISSING, fields, is_dataclass
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

from inferchaos.errors import ConfigError

P = TypeVar("P")


class InvalidValue(ConfigError):
    """A value the types admit but a dataclass's own check refuses; ``key`` is dotted from the top."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem


def parse_params(name: str, cls: type[P], params: dict[str, Any], *, noun: str = "parameter") -> P:
    """Build ``cls`` from ``params``; ConfigError names unknown, missing or mistyped keys.

    ``name`` starts every message (a fault's name, a config file's path); ``noun`` is what its
    keys are called in them (``parameter``, or ``key`` for a config file). Each dataclass checks
    its own semantics in ``__post_init__``.
    """
    if not is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    try:
        return _build(_Where(name, noun), cls, params, prefix="")
    except InvalidValue as e:
        raise ConfigError(f"{name}: {e.key}: {e.problem}") from e


class _Where:
    """Where a problem is, for its message."""

    def __init__(self, name: str, noun: str) -> None:
        self.name = name
        self.noun = noun


class _Mismatch(Exception):
    """A value does not have the type its hint asks for (turned into a ConfigError by the caller)."""


class _NotFinite(_Mismatch):
    """A float that is NaN or infinite: YAML's ``.nan`` and ``.inf`` are floats, never a usable value."""


def _problem(value: Any, hint: Any, mismatch: _Mismatch) -> str:
    if isinstance(mismatch, _NotFinite):
        return f"must be a finite number, got {value!r}"
    return f"must be {_describe(hint)}, got {value!r}"


def convert(value: Any, hint: Any, key: str) -> Any:
    """One value as the type hint ``hint`` wants it, as :func:`parse_params` reads each key.

    Raises :class:`InvalidValue` naming ``key`` (``concurrency: must be int or null, got '4'``),
    so a caller that knows where the value sits can name that place in its own message.
    """
    try:
        return _convert(_Where(key, "key"), value, hint, key)
    except _Mismatch as e:
        raise InvalidValue(key, _problem(value, hint, e)) from e


def number(value: object, key: str) -> float:
    """A finite int or float as a float; InvalidValue naming ``key`` for anything else."""
    # bool is an int to Python but never a number here; "1.5" is a string a YAML author quoted
    # by mistake, and silently coercing it would hide that.
    if isinstance(value, bool) or not isinstance(value, int | float):
        kind = "null" if value is None else type(value).__name__
        raise InvalidValue(key, f"must be a number, got {kind} {value!r}")
    if not math.isfinite(value):
        raise InvalidValue(key, f"must be a finite number, got {value!r}")
    return float(value)


def seconds(value: object, key: str, *, allow_zero: bool = False) -> float:
    """A finite duration in seconds, more than 0 (or 0 too with ``allow_zero``); InvalidValue naming ``key``."""
    duration = number(value, key)
    if duration < 0 or (duration == 0 and not allow_zero):
        bound = "0 or more" if allow_zero else "more than 0"
        raise InvalidValue(key, f"must be {bound} seconds, got {value!r}")
    return duration


def _build(where: _Where, cls: type[P], params: Any, prefix: str) -> P:
    if not isinstance(params, dict):
        raise ConfigError(f"{where.name}: {prefix.rstrip('.')} must be a mapping, got {params!r}")
    known = {f.name: f for f in fields(cls) if f.init}  # type: ignore[arg-type]
    unknown = sorted(str(k) for k in set(params) - set(known))
    if unknown:
        raise ConfigError(
            f"{where.name}: unknown {where.noun}(s) {', '.join(prefix + k for k in unknown)}; "
            f"known: {', '.join(prefix + k for k in known)}"
        )
    missing = [
        prefix + key
        for key, f in known.items()
        if key not in params and f.default is MISSING and f.default_factory is MISSING
    ]
    if missing:
        raise ConfigError(f"{where.name}: missing required {where.noun}(s) {', '.join(missing)}")
    hints = get_type_hints(cls)
    values = {}
    for key, value in params.items():
        try:
            values[key] = _convert(where, value, hints[key], prefix + key)
        except _Mismatch as e:
            raise ConfigError(
                f"{where.name}: {where.noun} {prefix + key!r} {_problem(value, hints[key], e)}"
            ) from e
    try:
        return cls(**values)
    except InvalidValue as e:
        if not prefix:
            raise
        # A nested block's own check names its key relative to the block: make it dotted from the top.
        raise InvalidValue(prefix + e.key, e.problem) from e


def _convert(where: _Where, value: Any, hint: Any, key: str) -> Any:
    """``value`` as ``hint`` wants it (a nested dataclass built, a list made a tuple), or _Mismatch."""
    origin = get_origin(hint)
    if hint is Any:
        return value
    if origin in (Union, types.UnionType):
        for arg in get_args(hint):
            try:
                return _convert(where, value, arg, key)
            except _NotFinite:
                raise  # a NaN is a float, so it is this arm's value, not another arm's
            except _Mismatch:
                continue
        raise _Mismatch
    if hint is type(None):
        if value is None:
            return None
        raise _Mismatch
    if isinstance(hint, type) and is_dataclass(hint):
        if not isinstance(value, dict):
            raise _Mismatch
        return _build(where, hint, value, prefix=key + ".")
    if origin in (list, tuple):
        args = get_args(hint)
        if not isinstance(value, list | tuple):
            raise _Mismatch
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            raise TypeError(f"{key}: only tuple[X, ...] is supported, not {hint}")
        items = [_convert(where, v, args[0], key) for v in value] if args else list(value)
        return tuple(items) if origin is tuple else items
    if origin is dict:
        key_hint, value_hint = get_args(hint) or (Any, Any)
        if not isinstance(value, dict):
            raise _Mismatch
        return {
            _convert(where, k, key_hint, key): _convert(where, v, value_hint, key) for k, v in value.items()
        }
    if origin is typing.Literal:
        if value in get_args(hint):
            return value
        raise _Mismatch
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        try:
            return hint(value)
        except ValueError as e:
            raise _Mismatch from e
    if hint is float:
        # JSON and YAML give 50 for 50.0; a bool is an int in Python but never a number here.
        if isinstance(value, int | float) and not isinstance(value, bool):
            if not math.isfinite(value):
                raise _NotFinite
            return value
        raise _Mismatch
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise _Mismatch
    if isinstance(value, origin or hint):
        return value
    raise _Mismatch


def _describe(hint: Any) -> str:
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(arg) for arg in get_args(hint))
    if hint is type(None):
        return "null"
    if origin in (list, tuple):
        return f"a list of {_describe(get_args(hint)[0])}"
    if origin is dict:
        return "a mapping"
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(hint))
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return "one of " + ", ".join(repr(m.value) for m in hint)
    if isinstance(hint, type) and is_dataclass(hint):
        return "a mapping"
    return getattr(hint, "__name__", str(hint))
