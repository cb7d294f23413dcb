"""Keeping secrets out of run outputs: the Ray token, kube credentials, API keys."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

MASK = "***"
# Whole key names or their last part: `auth_token` and `api_key` are secrets, `prompt_tokens` is not.
SECRET_KEY = re.compile(
    r"(^|[_-])(token|password|passwd|secret|api[_-]?key|credentials?|authorization|bearer)$", re.I
)


def redact(value: Any, secrets: Iterable[str]) -> Any:
    """A copy of ``value`` with every known secret string, and every secret-named key's value, masked."""
    known = sorted({s for s in secrets if s and len(s) >= 6}, key=len, reverse=True)
    return _redact(value, known)


def _redact(value: Any, known: list[str]) -> Any:
    if isinstance(value, dict):
        return {
            k: (
                MASK
                if isinstance(k, str) and SECRET_KEY.search(k) and v not in (None, "")
                else _redact(v, known)
            )
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_redact(v, known) for v in value]
    if isinstance(value, str):
        for secret in known:
            value = value.replace(secret, MASK)
        return value
    return value


def secret_values(experiment: dict[str, Any]) -> list[str]:
    """Every string value under the experiment's ``secrets`` block."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
        elif isinstance(node, str):
            found.append(node)

    walk(experiment.get("secrets", {}))
    return found
