"""A thin ctypes wrapper over the CUDA driver API (libcuda.so.1): just what a squatter needs.

The driver API rather than the runtime, because libcuda.so.1 ships with the NVIDIA driver
itself: squatting needs no CUDA toolkit and no torch. The library object is a constructor
argument, so tests hand in a fake at the ctypes boundary; every out-parameter is passed as a
``ctypes.pointer`` whose ``contents`` the fake (or the driver) fills in.
"""

from __future__ import annotations

import ctypes
import logging
from dataclasses import dataclass

from inferchaos.errors import FaultError

logger = logging.getLogger(__name__)

LIBCUDA = "libcuda.so.1"
CUDA_SUCCESS = 0
# The byte written over the allocation: any value makes the driver back every page.
TOUCH_BYTE = 0xA5

CUdevice = ctypes.c_int
CUdeviceptr = ctypes.c_uint64
CUcontext = ctypes.c_void_p

# Name -> argument types; every call returns a CUresult (an int).
PROTOTYPES: dict[str, tuple[type, ...]] = {
    "cuInit": (ctypes.c_uint,),
    "cuDeviceGetCount": (ctypes.POINTER(ctypes.c_int),),
    "cuDeviceGet": (ctypes.POINTER(CUdevice), ctypes.c_int),
    "cuDeviceTotalMem_v2": (ctypes.POINTER(ctypes.c_size_t), CUdevice),
    "cuDevicePrimaryCtxRetain": (ctypes.POINTER(CUcontext), CUdevice),
    "cuCtxSetCurrent": (CUcontext,),
    "cuMemGetInfo_v2": (ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)),
    "cuMemAlloc_v2": (ctypes.POINTER(CUdeviceptr), ctypes.c_size_t),
    "cuMemsetD8_v2": (CUdeviceptr, ctypes.c_ubyte, ctypes.c_size_t),
    "cuCtxSynchronize": (),
    "cuMemFree_v2": (CUdeviceptr,),
    "cuDevicePrimaryCtxRelease": (CUdevice,),
    "cuGetErrorName": (ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)),
    "cuGetErrorString": (ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)),
}


class CudaUnavailable(FaultError):
    """This machine has no usable CUDA driver."""


class CudaError(FaultError):
    """A CUDA driver call returned a non-zero CUresult."""

    def __init__(self, call: str, code: int, error_name: str, description: str = "") -> None:
        self.call = call
        self.code = code
        self.error_name = error_name
        self.description = description
        message = f"{call} failed: {error_name} ({code})"
        if description and description != error_name:
            message += f": {description}"
        super().__init__(message)


def load_libcuda() -> ctypes.CDLL:
    """Open the driver library and declare the prototypes this module calls."""
    try:
        lib = ctypes.CDLL(LIBCUDA)
    except OSError as e:
        raise CudaUnavailable(f"no CUDA driver ({LIBCUDA}) on this machine: {e}") from e
    for name, argtypes in PROTOTYPES.items():
        try:
            function = getattr(lib, name)
        except AttributeError as e:
            raise CudaUnavailable(f"{LIBCUDA} lacks {name}: the NVIDIA driver is too old") from e
        function.argtypes = list(argtypes)
        function.restype = ctypes.c_int
    return lib


def cuda_available() -> tuple[bool, str]:
    """Whether the CUDA driver library loads here; the reason when it does not."""
    try:
        load_libcuda()
    except CudaUnavailable as e:
        return False, str(e)
    return True, ""


class CudaDriver:
    """The driver calls a squatter makes, each turning a failure into a :class:`CudaError`."""

    def __init__(self, lib: ctypes.CDLL | None = None) -> None:
        self._lib = lib if lib is not None else load_libcuda()

    def _call(self, name: str, *args: object) -> None:
        result = int(getattr(self._lib, name)(*args))
        if result != CUDA_SUCCESS:
            raise self._error(name, result)

    def _error(self, call: str, code: int) -> CudaError:
        return CudaError(
            call,
            code,
            self._describe("cuGetErrorName", code) or f"CUresult {code}",
            self._describe("cuGetErrorString", code),
        )

    def _describe(self, function: str, code: int) -> str:
        text = ctypes.c_char_p()
        if int(getattr(self._lib, function)(code, ctypes.pointer(text))) != CUDA_SUCCESS or not text.value:
            return ""
        return text.value.decode(errors="replace")

    def init(self) -> None:
        """cuInit(0): required once per process before any other call."""
        self._call("cuInit", 0)

    def device_count(self) -> int:
        """How many CUDA devices the driver sees."""
        count = ctypes.c_int()
        self._call("cuDeviceGetCount", ctypes.pointer(count))
        return count.value

    def device(self, ordinal: int) -> int:
        """The CUdevice of ``ordinal``; CUDA_ERROR_INVALID_DEVICE when there is no such device."""
        device = CUdevice()
        self._call("cuDeviceGet", ctypes.pointer(device), ordinal)
        return device.value

    def total_mem(self, device: int) -> int:
        """Total bytes of memory on ``device``."""
        total = ctypes.c_size_t()
        self._call("cuDeviceTotalMem_v2", ctypes.pointer(total), device)
        return total.value

    def retain_primary_context(self, device: int) -> int:
        """Retain the device's primary context (the one the runtime and torch share)."""
        context = CUcontext()
        self._call("cuDevicePrimaryCtxRetain", ctypes.pointer(context), device)
        return context.value or 0

    def set_current(self, context: int) -> None:
        """Make ``context`` current on this thread; allocations then land on its device."""
        self._call("cuCtxSetCurrent", CUcontext(context))

    def mem_get_info(self) -> tuple[int, int]:
        """(free, total) bytes of the current context's device."""
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self._call("cuMemGetInfo_v2", ctypes.pointer(free), ctypes.pointer(total))
        return free.value, total.value

    def alloc(self, nbytes: int) -> int:
        """Allocate ``nbytes`` of device memory; its device pointer."""
        pointer = CUdeviceptr()
        self._call("cuMemAlloc_v2", ctypes.pointer(pointer), nbytes)
        return pointer.value

    def memset_d8(self, pointer: int, value: int, nbytes: int) -> None:
        """Write ``value`` over ``nbytes`` bytes at ``pointer`` (asynchronously; see synchronize)."""
        self._call("cuMemsetD8_v2", CUdeviceptr(pointer), value, nbytes)

    def synchronize(self) -> None:
        """Wait until the current context has finished its work."""
        self._call("cuCtxSynchronize")

    def free(self, pointer: int) -> None:
        """Free an allocation made by :meth:`alloc`."""
        self._call("cuMemFree_v2", CUdeviceptr(pointer))

    def release_primary_context(self, device: int) -> None:
        """Release the retain made by :meth:`retain_primary_context`."""
        self._call("cuDevicePrimaryCtxRelease", device)


@dataclass(frozen=True)
class DeviceAllocation:
    """Device memory a squatter holds, with the driver's view of free memory around it."""

    ordinal: int
    device: int
    pointer: int
    nbytes: int
    total_bytes: int
    free_before_bytes: int
    free_after_bytes: int


def hold_device_memory(
    driver: CudaDriver, ordinal: int, nbytes: int, max_fraction: float
) -> DeviceAllocation:
    """Allocate ``nbytes`` on device ``ordinal`` and write every byte, so the memory is really taken.

    Refuses more than ``max_fraction`` of the device before touching it. On any failure after
    the context was retained, what was taken is given back before the error propagates.
    """
    driver.init()
    device = driver.device(ordinal)
    total = driver.total_mem(device)
    if nbytes <= 0:
        raise FaultError(f"cuda:{ordinal}: cannot squat {nbytes} bytes")
    if nbytes > max_fraction * total:
        raise FaultError(
            f"cuda:{ordinal}: refusing to squat {nbytes} bytes, more than {max_fraction:.0%} of the device's {total} bytes"
        )
    context = driver.retain_primary_context(device)
    try:
        driver.set_current(context)
        free_before, _ = driver.mem_get_info()
        pointer = driver.alloc(nbytes)
        try:
            driver.memset_d8(pointer, TOUCH_BYTE, nbytes)
            driver.synchronize()
            free_after, _ = driver.mem_get_info()
        except CudaError:
            driver.free(pointer)
            raise
    except CudaError:
        driver.release_primary_context(device)
        raise
    logger.info("holding %d bytes on cuda:%d (free %d -> %d)", nbytes, ordinal, free_before, free_after)
    return DeviceAllocation(ordinal, device, pointer, nbytes, total, free_before, free_after)


def release_device_memory(driver: CudaDriver, allocation: DeviceAllocation) -> None:
    """Free the allocation and release the primary context retained for it."""
    try:
        driver.free(allocation.pointer)
    finally:
        driver.release_primary_context(allocation.device)
