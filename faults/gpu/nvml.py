"""What NVML shows about a GPU: memory, and the compute processes holding it.

This is the ground truth a squat is judged by: the squatter's pid among the device's compute
processes and the used memory risen by about what it allocated. NVML comes from the optional
``gpu`` extra (nvidia-ml-py) and is loaded lazily (see :func:`steady_state.device.load_nvml`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from inferchaos.errors import FaultError
from inferchaos.primitives.nvml import DeviceMemory, NvmlUnavailable, load_nvml

logger = logging.getLogger(__name__)


class NvmlError(FaultError):
    """NVML is unavailable or a read failed; the message says which and why."""


@dataclass(frozen=True)
class GpuProcess:
    """A compute process on a GPU; ``used_bytes`` is None where the driver does not say."""

    pid: int
    used_bytes: int | None


@dataclass(frozen=True)
class GpuObservation:
    """One GPU at one instant."""

    index: int
    memory: DeviceMemory
    processes: list[GpuProcess] = field(default_factory=list)

    @property
    def pids(self) -> list[int]:
        """Pids of the compute processes, as NVML numbers them (the host's PID namespace)."""
        return [p.pid for p in self.processes]


def nvml_available(module: Any | None = None) -> tuple[bool, str]:
    """Whether NVML can be used here; the reason when it cannot."""
    try:
        nvml = load_nvml(module)
    except NvmlUnavailable as e:
        return False, str(e)
    nvml.nvmlShutdown()
    return True, ""


class Nvml:
    """An initialised NVML session; ``module`` replaces pynvml (tests pass a fake)."""

    def __init__(self, module: Any | None = None) -> None:
        try:
            self._nvml = load_nvml(module)
        except NvmlUnavailable as e:
            raise NvmlError(str(e)) from e

    def device_count(self) -> int:
        """How many GPUs NVML sees."""
        try:
            return int(self._nvml.nvmlDeviceGetCount())
        except self._nvml.NVMLError as e:
            raise NvmlError(f"nvmlDeviceGetCount failed: {e}") from e

    def observe(self, index: int) -> GpuObservation:
        """Memory and compute processes of GPU ``index``."""
        count = self.device_count()
        if not 0 <= index < count:
            raise NvmlError(f"GPU {index} does not exist; NVML sees {count} GPU(s)")
        nvml = self._nvml
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            info = nvml.nvmlDeviceGetMemoryInfo(handle)
            running = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
        except nvml.NVMLError as e:
            raise NvmlError(f"NVML read of GPU {index} failed: {e}") from e
        memory = DeviceMemory(f"cuda:{index}", int(info.total), int(info.used), int(info.free))
        processes = [GpuProcess(int(p.pid), _used_bytes(p)) for p in running]
        return GpuObservation(index, memory, processes)

    def observe_all(self) -> list[GpuObservation]:
        """Every GPU NVML sees."""
        return [self.observe(index) for index in range(self.device_count())]

    def close(self) -> None:
        """End the NVML session."""
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError as e:
            logger.info("nvmlShutdown failed: %s", e)

    def __enter__(self) -> Nvml:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _used_bytes(process: Any) -> int | None:
    # NVML reports NVML_VALUE_NOT_AVAILABLE (None in pynvml) where it cannot attribute memory,
    # for instance for processes in another PID namespace.
    value = getattr(process, "usedGpuMemory", None)
    return int(value) if value is not None else None


def observe_gpu(index: int, module: Any | None = None) -> GpuObservation:
    """One NVML read of GPU ``index`` in a session of its own."""
    with Nvml(module) as nvml:
        return nvml.observe(index)
