"""Naming a device to squat (``cuda:<index>`` or ``host:<slot>``) and sizing a GPU without touching it."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from inferchaos.errors import ConfigError
from inferchaos.faults.device.cuda import CudaDriver, CudaError, CudaUnavailable
from inferchaos.primitives.nvml import Nvml, NvmlError

logger = logging.getLogger(__name__)

HOST = "host"
CUDA = "cuda"
DEVICE_PATTERN = re.compile(r"^(host|cuda):(\d+)$")


@dataclass(frozen=True)
class DeviceRef:
    """A device by backend and index: ``host:1`` is replica slot 1's memory budget."""

    backend: str
    index: int

    @property
    def name(self) -> str:
        """The device as users write it, e.g. ``host:1``."""
        return f"{self.backend}:{self.index}"


def parse_device(text: str, fault: str) -> DeviceRef:
    """``host:<slot>`` or ``cuda:<index>``; ConfigError naming both forms otherwise."""
    match = DEVICE_PATTERN.match(text.strip())
    if match is None:
        raise ConfigError(
            f"{fault}: device {text!r} is neither host:<slot> (a local replica's memory budget) nor cuda:<index>"
        )
    return DeviceRef(match.group(1), int(match.group(2)))


@dataclass(frozen=True)
class GpuSize:
    """How big a GPU is, and how much is free when NVML can say."""

    index: int
    count: int
    total_bytes: int
    free_bytes: int | None
    source: str


def gpu_size(index: int, fault: str) -> GpuSize:
    """Size GPU ``index`` through NVML, else through the CUDA driver (which cannot say what is free).

    ConfigError when the device does not exist or no driver can be asked.
    """
    try:
        with Nvml() as nvml:
            count = nvml.device_count()
            if not 0 <= index < count:
                raise ConfigError(f"{fault}: device cuda:{index} does not exist; NVML sees {count} GPU(s)")
            memory = nvml.observe(index).memory
            return GpuSize(index, count, memory.total_bytes, memory.free_bytes, "nvml")
    except NvmlError as e:
        logger.info("sizing cuda:%d without NVML: %s", index, e)
    try:
        driver = CudaDriver()
        driver.init()
        count = driver.device_count()
        if not 0 <= index < count:
            raise ConfigError(
                f"{fault}: device cuda:{index} does not exist; the CUDA driver sees {count} GPU(s)"
            )
        total = driver.total_mem(driver.device(index))
    except CudaUnavailable as e:
        raise ConfigError(f"{fault}: cuda:{index} cannot be squatted: {e}") from e
    except CudaError as e:
        raise ConfigError(f"{fault}: the CUDA driver could not size cuda:{index}: {e}") from e
    return GpuSize(index, count, total, None, "cuda")
