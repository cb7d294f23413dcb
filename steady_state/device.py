"""Device probe: the memory on each device a replica needs (the design's device layer).

With an NVIDIA GPU it reads NVML per GPU (``device=cuda:<index>``); otherwise it reads the
local environment's replica memory budgets, the stand-in for GPU memory
(``device=host:<slot>``). ``device.available`` is 1 per device read; with no device at all it
is 0 with a ``reason`` label, so a run without devices records why rather than failing.

A budget's used bytes are its working set (usage minus inactive page cache), the measure the
kernel's reclaim leaves standing, so page cache a dead replica left behind does not read as taken.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from inferchaos.errors import EnvironmentNotUp, ProbeError
from inferchaos.layers import Layer
from inferchaos.primitives.capabilities import RecordedLocalState, ReplicaBudgetEnvironment
from inferchaos.primitives.memory_budget import (
    budget_memory,
    budget_name,
    budgets_available,
    find_budget,
)
from inferchaos.primitives.nvml import DeviceMemory, Nvml, NvmlUnavailable
from inferchaos.steady_state.probe_base import Sample

logger = logging.getLogger(__name__)


def device_samples(memory: DeviceMemory) -> list[Sample]:
    """The ``device.*`` readings of one device."""
    labels = {"device": memory.device}
    return [
        Sample("device.total_bytes", float(memory.total_bytes), dict(labels)),
        Sample("device.used_bytes", float(memory.used_bytes), dict(labels)),
        Sample("device.free_bytes", float(memory.free_bytes), dict(labels)),
        Sample("device.available", 1.0, dict(labels)),
    ]


def read_budget_memory(env_id: str, slots: Sequence[int]) -> list[DeviceMemory]:
    """Each existing replica budget of ``env_id`` among ``slots``, as ``host:<slot>``."""
    devices = []
    for slot in slots:
        try:
            budget = find_budget(budget_name(env_id, slot))
        except OSError as e:
            raise ProbeError(f"could not read memory budget of slot {slot}: {e}") from e
        if budget is not None:
            devices.append(budget_memory(budget, f"host:{slot}"))
    return devices


@dataclass(frozen=True)
class DeviceReading:
    """The devices read at one instant, or why there were none."""

    devices: list[DeviceMemory]
    reason: str = ""

    def samples(self) -> list[Sample]:
        """Every device's readings, or ``device.available 0`` with the reason."""
        if not self.devices:
            return [Sample("device.available", 0.0, {"reason": self.reason})]
        return [sample for device in self.devices for sample in device_samples(device)]


class DeviceProbe:
    """Reads GPU memory through NVML, or else the local environment's replica budgets."""

    name = "device"
    layer = Layer.DEVICE

    def __init__(self, env_id: str | None = None, slots: Sequence[int] = (), nvml_module: Any = None) -> None:
        self.env_id = env_id
        self.slots = tuple(slots)
        self._nvml_module = nvml_module
        self._nvml: Nvml | None = None
        # Set once NVML failed to load: a driver does not appear in the middle of a run.
        self._nvml_reason = ""

    @classmethod
    def for_local_state(cls, state: RecordedLocalState, nvml_module: Any = None) -> DeviceProbe:
        """A probe of the local environment recorded in ``state`` (one budget per replica slot)."""
        return cls(state.env_id, state.replica_slots, nvml_module)

    def _gpus(self) -> list[DeviceMemory]:
        if self._nvml is None and not self._nvml_reason:
            try:
                self._nvml = Nvml(self._nvml_module)
            except NvmlUnavailable as e:
                self._nvml_reason = str(e)
                logger.info("device probe: %s", e)
        if self._nvml is None:
            return []
        gpus = self._nvml.memory_all()
        if not gpus and not self._nvml_reason:
            self._nvml_reason = "NVML sees no GPU"
        return gpus

    def _budget_reason(self) -> str:
        if not self.env_id:
            return "no local environment attached for replica memory budgets"
        usable, why = budgets_available()
        if not usable:
            return f"no replica memory budgets: {why}"
        return f"no replica memory budget exists for environment {self.env_id} (replica_memory_mib 0?)"

    def snapshot(self) -> DeviceReading:
        """One blocking read of every device."""
        gpus = self._gpus()
        if gpus:
            return DeviceReading(gpus)
        budgets = read_budget_memory(self.env_id, self.slots) if self.env_id else []
        if budgets:
            return DeviceReading(budgets)
        return DeviceReading([], f"{self._nvml_reason or 'no GPU'}; {self._budget_reason()}")

    async def read(self) -> list[Sample]:
        """Samples named as in steady_state/catalog.py (``device.*``)."""
        return (await asyncio.to_thread(self.snapshot)).samples()

    def close(self) -> None:
        """Shut NVML down if this probe initialised it."""
        if self._nvml is not None:
            self._nvml.close()
            self._nvml = None


def device_probe_for(env: object) -> DeviceProbe:
    """The device probe of ``env``: NVML where there is a GPU, and the replicas' memory budgets where it has them."""
    if isinstance(env, ReplicaBudgetEnvironment):
        try:
            return DeviceProbe.for_local_state(env.budget_state())
        except EnvironmentNotUp as e:
            logger.info("device probe without replica budgets: %s", e)
    return DeviceProbe()
