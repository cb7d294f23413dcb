"""The probe contract (README "Architecture"): a layer-tagged read returning plain numbers."""

from __future__ import annotations

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
        return ";".join(f"{k}={v}" for k, v in sorted(self.labels.items()))


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
