"""The one parser of user input: a mapping (fault parameters, experiment arguments, config files) into its typed dataclass, refusing bad input early."""

from __future__ import annotations

import types
import typing
from dataclasses import MISSING, fields, is_dataclass
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

from inferchaos.errors import ConfigError

P = TypeVar("P")


def parse_params(fault: str, cls: type[P], params: dict[str, Any]) -> P:
    """Build ``cls`` from ``params``; ConfigError names unknown, missing or mistyped keys.

    Each parameter dataclass checks its own semantics in ``__post_init__`` (raising ConfigError).
    """
    if not is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise ConfigError(f"{fault}: unknown parameter(s) {', '.join(unknown)}; known: {', '.join(known)}")
    missing = [
        name
        for name, f in known.items()
        if name not in params and f.default is MISSING and f.default_factory is MISSING
    ]
    if missing:
        raise ConfigError(f"{fault}: missing required parameter(s) {', '.join(missing)}")
    hints = get_type_hints(cls)
    for name, value in params.items():
        if not _matches(value, hints[name]):
            raise ConfigError(f"{fault}: parameter {name!r} must be {_describe(hints[name])}, got {value!r}")
    return cls(**params)


def _matches(value: Any, hint: Any) -> bool:
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        return any(_matches(value, arg) for arg in get_args(hint))
    if hint is type(None):
        return value is None
    if origin is list:
        (item,) = get_args(hint)
        return isinstance(value, list) and all(_matches(v, item) for v in value)
    if origin is typing.Literal:
        return value in get_args(hint)
    if hint is float:
        # JSON and YAML give 50 for 50.0; a bool is an int in Python but never a number here.
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


def _describe(hint: Any) -> str:
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(arg) for arg in get_args(hint))
    if hint is type(None):
        return "null"
    if origin is list:
        return f"a list of {_describe(get_args(hint)[0])}"
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(hint))
    return getattr(hint, "__name__", str(hint))
