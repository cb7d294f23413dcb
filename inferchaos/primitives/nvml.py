"""The one NVML reader: every GPU's memory, and the compute processes holding it.

The device probe reads memory through it at every tick; a GPU squat is judged by it (the
squatter's pid among the device's compute processes, the used memory risen by about what
it allocated). NVML comes from the optional ``gpu`` extra (nvidia-ml-py) and is loaded
lazily, because most machines that run the local environment have no GPU.
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass, field
from typing import Any

from inferchaos.errors import ProbeError

logger = logging.getLogger(__name__)

NVML_MODULE = "pynvml"


class NvmlError(ProbeError):
    """NVML is unavailable or a read failed; the message says which and why."""


class NvmlUnavailable(NvmlError):
    """NVML cannot be used here (no nvidia-ml-py, no driver); the message says why."""


@dataclass(frozen=True)
class DeviceMemory:
    """Memory of one device at one instant."""

    device: str
    total_bytes: int
    used_bytes: int
    free_bytes: int


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


def load_nvml(module: Any | None = None) -> Any:
    """pynvml, initialised; ``module`` replaces it (tests pass a fake)."""
    if module is None:
        try:
            module = importlib.import_module(NVML_MODULE)
        except ImportError as e:
            raise NvmlUnavailable(
                "NVML unavailable: the nvidia-ml-py package is not installed (install the project's `gpu` extra)"
            ) from e
    try:
        module.nvmlInit()
    except module.NVMLError as e:
        raise NvmlUnavailable(f"NVML unavailable: nvmlInit failed: {e}") from e
    return module


def nvml_available(module: Any | None = None) -> tuple[bool, str]:
    """Whether NVML can be used here; the reason when it cannot."""
    try:
        nvml = load_nvml(module)
    except NvmlUnavailable as e:
        return False, str(e)
    nvml.nvmlShutdown()
    return True, ""


class Nvml:
    """An initialised NVML session; ``module`` replaces pynvml (tests pass a fake).

    Raises :class:`NvmlUnavailable` when NVML cannot be used, :class:`NvmlError` when a read fails.
    """

    def __init__(self, module: Any | None = None) -> None:
        self._nvml = load_nvml(module)

    def device_count(self) -> int:
        """How many GPUs NVML sees."""
        try:
            return int(self._nvml.nvmlDeviceGetCount())
        except self._nvml.NVMLError as e:
            raise NvmlError(f"nvmlDeviceGetCount failed: {e}") from e

    def memory(self, index: int) -> DeviceMemory:
        """Total/used/free bytes of GPU ``index``."""
        nvml = self._nvml
        try:
            info = nvml.nvmlDeviceGetMemoryInfo(nvml.nvmlDeviceGetHandleByIndex(index))
        except nvml.NVMLError as e:
            raise NvmlError(f"NVML read of GPU {index} failed: {e}") from e
        return DeviceMemory(f"cuda:{index}", int(info.total), int(info.used), int(info.free))

    def memory_all(self) -> list[DeviceMemory]:
        """Total/used/free bytes of every GPU NVML sees."""
        return [self.memory(index) for index in range(self.device_count())]

    def observe(self, index: int) -> GpuObservation:
        """Memory and compute processes of GPU ``index``."""
        count = self.device_count()
        if not 0 <= index < count:
            raise NvmlError(f"GPU {index} does not exist; NVML sees {count} GPU(s)")
        nvml = self._nvml
        memory = self.memory(index)
        try:
            running = nvml.nvmlDeviceGetComputeRunningProcesses(nvml.nvmlDeviceGetHandleByIndex(index))
        except nvml.NVMLError as e:
            raise NvmlError(f"NVML read of GPU {index} failed: {e}") from e
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
