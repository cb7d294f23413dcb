"""Loading NVML (the optional `gpu` extra) and reading every GPU's memory."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from inferchaos.errors import ProbeError

NVML_MODULE = "pynvml"


class NvmlUnavailable(ProbeError):
    """NVML cannot be used here; the message says why."""


@dataclass(frozen=True)
class DeviceMemory:
    """Memory of one device at one instant."""

    device: str
    total_bytes: int
    used_bytes: int
    free_bytes: int


def load_nvml(module: Any | None = None) -> Any:
    """pynvml, initialised; ``module`` replaces it (tests pass a fake).

    Imported lazily: nvidia-ml-py is in the optional ``gpu`` extra, and most machines that
    run the local environment have no GPU.
    """
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


def read_nvml_memory(nvml: Any) -> list[DeviceMemory]:
    """Total/used/free bytes of every GPU NVML sees."""
    try:
        count = int(nvml.nvmlDeviceGetCount())
        devices = []
        for index in range(count):
            info = nvml.nvmlDeviceGetMemoryInfo(nvml.nvmlDeviceGetHandleByIndex(index))
            devices.append(DeviceMemory(f"cuda:{index}", int(info.total), int(info.used), int(info.free)))
    except nvml.NVMLError as e:
        raise ProbeError(f"NVML read failed: {e}") from e
    return devices
