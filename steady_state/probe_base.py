"""The probe contract (README "Architecture"): a layer-tagged read returning plain numbers."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from inferchaos.layers import Layer


@dataclass(frozen=True)
class Sample:
    """One number read from the system, e.g. ``vllm.kv_cache_usage{replica=replica-0} 0.93``."""

    probe: str
    value: float
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def layer(self) -> Layer:
        return Layer(self.probe.split(".", 1)[0])

    def label_text(self) -> str:
        """Labels as ``k=v;k=v`` in key order: the form timeline.csv stores."""
        return format_labels(self.labels)


# A label value is any text (a reason label quotes an error message, semicolons and all), so
# the two characters the ``k=v;k=v`` form gives a meaning are written as %3B and %25.
_ESCAPED = re.compile(r"%(25|3B)")


def format_labels(labels: Mapping[str, str]) -> str:
    """``{"b": "2", "a": "x;y"}`` -> ``a=x%3By;b=2``: sorted by key, ``;`` and ``%`` escaped."""
    return ";".join(f"{k}={_escape(v)}" for k, v in sorted(labels.items()))


def parse_labels(text: str) -> dict[str, str]:
    """Inverse of :func:`format_labels`; a value may itself contain ``=``."""
    labels: dict[str, str] = {}
    for part in text.split(";") if text else ():
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise ValueError(f"label {part!r} is not k=v")
        labels[key] = _ESCAPED.sub(lambda m: "%" if m[1] == "25" else ";", value)
    return labels


def _escape(value: str) -> str:
    return value.replace("%", "%25").replace(";", "%3B")


class Probe(Protocol):
    """A group of readings from one layer, read together once per sampler tick."""

    name: str
    layer: Layer

    async def read(self) -> list[Sample]:
        """Read the layer now. Raise ProbeError on failure; the sampler records it and goes on."""
        ...


@runtime_checkable
class ClosableProbe(Protocol):
    """A probe that holds connections, to be released once its run ends."""

    async def aclose(self) -> None: ...


class Canary(Protocol):
    """What a run starts just before the baseline and stops at its end: the canary, or it with load."""

    async def start(self, phase_s: float = 0.0) -> None: ...

    async def stop(self) -> None: ...
