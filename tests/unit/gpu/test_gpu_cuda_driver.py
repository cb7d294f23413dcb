"""The CUDA driver wrapper against a fake libcuda at the ctypes boundary: call order, cleanup, errors."""

from __future__ import annotations

import ctypes

import pytest

from inferchaos.errors import FaultError
from inferchaos.faults.device import cuda
from inferchaos.faults.device.cuda import (
    TOUCH_BYTE,
    CudaDriver,
    CudaError,
    CudaUnavailable,
    hold_device_memory,
    release_device_memory,
)
from tests.fakes.gpu import GIB, FakeLibcuda


def _in_order(calls: list[str], expected: list[str]) -> bool:
    """``expected`` appears in ``calls`` in this order (other calls may sit between)."""
    remaining = iter(calls)
    return all(name in remaining for name in expected)


def test_squat_retains_allocates_touches_then_frees_and_releases_in_order() -> None:
    lib = FakeLibcuda(total=80 * GIB, used=1 * GIB)
    driver = CudaDriver(lib)
    allocation = hold_device_memory(driver, 0, 20 * GIB, max_fraction=0.95)
    release_device_memory(driver, allocation)

    assert _in_order(
        lib.names,
        [
            "cuInit",
            "cuDeviceGet",
            "cuDevicePrimaryCtxRetain",
            "cuCtxSetCurrent",
            "cuMemAlloc_v2",
            "cuMemsetD8_v2",
            "cuCtxSynchronize",
            "cuMemFree_v2",
            "cuDevicePrimaryCtxRelease",
        ],
    ), lib.names
    assert lib.names[-2:] == ["cuMemFree_v2", "cuDevicePrimaryCtxRelease"]
    calls = dict(lib.calls)
    assert calls["cuCtxSetCurrent"] == (FakeLibcuda.CONTEXT,)
    # Every byte is written, so the driver backs the whole allocation.
    assert calls["cuMemsetD8_v2"] == (FakeLibcuda.POINTER, TOUCH_BYTE, 20 * GIB)
    assert calls["cuMemFree_v2"] == (FakeLibcuda.POINTER,)
    assert allocation.nbytes == 20 * GIB
    assert allocation.free_before_bytes - allocation.free_after_bytes == 20 * GIB


def test_out_of_memory_is_a_clear_error_and_gives_the_context_back() -> None:
    lib = FakeLibcuda(fail={"cuMemAlloc_v2": 2})
    with pytest.raises(CudaError) as caught:
        hold_device_memory(CudaDriver(lib), 0, 10 * GIB, max_fraction=0.95)

    assert str(caught.value).startswith("cuMemAlloc_v2 failed: CUDA_ERROR_OUT_OF_MEMORY (2)")
    assert "out of memory" in str(caught.value)
    assert (caught.value.call, caught.value.code, caught.value.error_name) == (
        "cuMemAlloc_v2",
        2,
        "CUDA_ERROR_OUT_OF_MEMORY",
    )
    assert isinstance(caught.value, FaultError)
    assert "cuMemFree_v2" not in lib.names, "nothing was allocated, so nothing may be freed"
    assert lib.names[-1] == "cuDevicePrimaryCtxRelease"


def test_failed_touch_frees_the_allocation_before_releasing_the_context() -> None:
    lib = FakeLibcuda(fail={"cuMemsetD8_v2": 1})
    with pytest.raises(CudaError, match=r"cuMemsetD8_v2 failed: CUDA_ERROR_INVALID_VALUE \(1\)"):
        hold_device_memory(CudaDriver(lib), 0, GIB, max_fraction=0.95)
    assert lib.names[-2:] == ["cuMemFree_v2", "cuDevicePrimaryCtxRelease"]


def test_missing_device_names_the_call_and_retains_nothing() -> None:
    lib = FakeLibcuda(devices=1)
    with pytest.raises(CudaError, match=r"cuDeviceGet failed: CUDA_ERROR_INVALID_DEVICE \(101\)"):
        hold_device_memory(CudaDriver(lib), 3, GIB, max_fraction=0.95)
    assert "cuDevicePrimaryCtxRetain" not in lib.names


def test_more_than_the_allowed_fraction_is_refused_before_any_context() -> None:
    lib = FakeLibcuda(total=80 * GIB)
    with pytest.raises(FaultError, match="more than 25%"):
        hold_device_memory(CudaDriver(lib), 0, 21 * GIB, max_fraction=0.25)
    assert "cuDevicePrimaryCtxRetain" not in lib.names
    assert "cuMemAlloc_v2" not in lib.names


def test_an_error_code_the_driver_cannot_name_still_reads_clearly() -> None:
    lib = FakeLibcuda(fail={"cuInit": 999})
    with pytest.raises(CudaError) as caught:
        CudaDriver(lib).init()
    assert str(caught.value) == "cuInit failed: CUresult 999 (999)"


def test_driver_queries_read_the_out_parameters() -> None:
    lib = FakeLibcuda(total=141 * GIB, used=3 * GIB, devices=2)
    driver = CudaDriver(lib)
    driver.init()
    assert driver.device_count() == 2
    device = driver.device(1)
    assert driver.total_mem(device) == 141 * GIB
    driver.set_current(driver.retain_primary_context(device))
    assert driver.mem_get_info() == (138 * GIB, 141 * GIB)


def test_no_driver_library_is_a_clear_unavailable_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_library(name: str) -> ctypes.CDLL:
        raise OSError(f"{name}: cannot open shared object file: No such file or directory")

    monkeypatch.setattr(cuda.ctypes, "CDLL", no_library)
    with pytest.raises(CudaUnavailable, match=r"no CUDA driver \(libcuda.so.1\) on this machine"):
        CudaDriver()
    assert cuda.cuda_available() == (
        False,
        "no CUDA driver (libcuda.so.1) on this machine: libcuda.so.1: cannot open shared object file: "
        "No such file or directory",
    )
