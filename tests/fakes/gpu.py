"""Fakes at the device layer's own boundaries: the CUDA driver library (ctypes), the pynvml
module, cgroup trees and memory budgets shaped like cgroup v1 or v2, and a recorded local
environment."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from inferchaos.environments.local.state import LocalEnvState
from inferchaos.primitives.memory_budget import MemoryBudget
from inferchaos.primitives.replica_slots import ReplicaRecord, read_records

GIB = 1024**3

CUDA_ERRORS = {
    1: ("CUDA_ERROR_INVALID_VALUE", "invalid argument"),
    2: ("CUDA_ERROR_OUT_OF_MEMORY", "out of memory"),
    101: ("CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"),
    999: ("CUDA_ERROR_UNKNOWN", "unknown error"),
}


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, ctypes._SimpleCData) else value


class FakeLibcuda:
    """libcuda.so.1 as the ctypes boundary sees it: out-parameters arrive as ctypes pointers."""

    CONTEXT = 0xC0FFEE
    POINTER = 0x7F0000000000

    def __init__(
        self, total: int = 80 * GIB, used: int = 1 * GIB, devices: int = 1, fail: dict[str, int] | None = None
    ):
        self.total = total
        self.used = used
        self.devices = devices
        self.fail = fail or {}
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def _record(self, name: str, *args: Any) -> int:
        self.calls.append((name, tuple(_plain(a) for a in args)))
        return self.fail.get(name, 0)

    @property
    def names(self) -> list[str]:
        """Driver calls made, error lookups left out."""
        return [name for name, _ in self.calls if not name.startswith("cuGetError")]

    def cuInit(self, flags: int) -> int:
        return self._record("cuInit", flags)

    def cuDeviceGetCount(self, count: Any) -> int:
        count.contents.value = self.devices
        return self._record("cuDeviceGetCount")

    def cuDeviceGet(self, device: Any, ordinal: int) -> int:
        if ordinal >= self.devices:
            self._record("cuDeviceGet", ordinal)
            return 101
        device.contents.value = ordinal
        return self._record("cuDeviceGet", ordinal)

    def cuDeviceTotalMem_v2(self, total: Any, device: int) -> int:
        total.contents.value = self.total
        return self._record("cuDeviceTotalMem_v2", device)

    def cuDevicePrimaryCtxRetain(self, context: Any, device: int) -> int:
        context.contents.value = self.CONTEXT
        return self._record("cuDevicePrimaryCtxRetain", device)

    def cuCtxSetCurrent(self, context: Any) -> int:
        return self._record("cuCtxSetCurrent", context)

    def cuMemGetInfo_v2(self, free: Any, total: Any) -> int:
        free.contents.value = self.total - self.used
        total.contents.value = self.total
        return self._record("cuMemGetInfo_v2")

    def cuMemAlloc_v2(self, pointer: Any, nbytes: int) -> int:
        result = self._record("cuMemAlloc_v2", nbytes)
        if result == 0:
            pointer.contents.value = self.POINTER
            self.used += nbytes
        return result

    def cuMemsetD8_v2(self, pointer: Any, value: int, nbytes: int) -> int:
        return self._record("cuMemsetD8_v2", pointer, value, nbytes)

    def cuCtxSynchronize(self) -> int:
        return self._record("cuCtxSynchronize")

    def cuMemFree_v2(self, pointer: Any) -> int:
        return self._record("cuMemFree_v2", pointer)

    def cuDevicePrimaryCtxRelease(self, device: int) -> int:
        return self._record("cuDevicePrimaryCtxRelease", device)

    def cuGetErrorName(self, code: int, text: Any) -> int:
        self._record("cuGetErrorName", code)
        if code not in CUDA_ERRORS or code == 999:
            return 1  # the driver does not know the code
        text.contents.value = CUDA_ERRORS[code][0].encode()
        return 0

    def cuGetErrorString(self, code: int, text: Any) -> int:
        self._record("cuGetErrorString", code)
        if code not in CUDA_ERRORS or code == 999:
            return 1
        text.contents.value = CUDA_ERRORS[code][1].encode()
        return 0


class FakeNvmlError(Exception):
    """pynvml.NVMLError."""


@dataclass
class FakeGpu:
    total: int
    used: int
    processes: list[tuple[int, int | None]] = field(default_factory=list)


class FakePynvml:
    """The slice of pynvml the device layer calls."""

    NVMLError = FakeNvmlError

    def __init__(self, gpus: list[FakeGpu], init_error: str = "") -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.initialised = 0

    def nvmlInit(self) -> None:
        if self.init_error:
            raise FakeNvmlError(self.init_error)
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self.initialised -= 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if not 0 <= index < len(self.gpus):
            raise FakeNvmlError("Invalid Argument")
        return index

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        gpu = self.gpus[handle]
        return SimpleNamespace(total=gpu.total, used=gpu.used, free=gpu.total - gpu.used)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in self.gpus[handle].processes]


def fake_cgroup_tree(root: Path, version: int) -> Path:
    """A cgroup filesystem root as cgroup v1 or v2 lays it out, with the memory controller on;
    the folder replica budgets go in (v1: ``root/memory``; v2: ``root``)."""
    if version == 1:
        parent = root / "memory"
        parent.mkdir(parents=True, exist_ok=True)
        (parent / "memory.limit_in_bytes").write_text("9223372036854771712\n")
        (parent / "memory.usage_in_bytes").write_text("0\n")
    else:
        parent = root
        parent.mkdir(parents=True, exist_ok=True)
        (parent / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
        (parent / "cgroup.subtree_control").write_text("cpu memory pids\n")
    (parent / "cgroup.procs").write_text("")
    return parent


def write_budget(
    folder: Path,
    name: str,
    limit: int,
    usage: int,
    inactive_file: int = 0,
    version: int = 1,
    oom_kills: int = 0,
) -> MemoryBudget:
    """A memory cgroup folder as cgroup v1 (or v2) lays it out, with the files the device layer reads."""
    path = folder / name
    path.mkdir(parents=True, exist_ok=True)
    if version == 1:
        (path / "memory.limit_in_bytes").write_text(f"{limit}\n")
        (path / "memory.usage_in_bytes").write_text(f"{usage}\n")
        (path / "memory.oom_control").write_text(f"oom_kill_disable 0\nunder_oom 0\noom_kill {oom_kills}\n")
        (path / "memory.stat").write_text(
            f"cache {inactive_file}\nrss {usage - inactive_file}\ntotal_rss {usage - inactive_file}\n"
            f"total_inactive_file {inactive_file}\ntotal_active_file 0\n"
        )
    else:
        (path / "memory.max").write_text(f"{limit}\n")
        (path / "memory.current").write_text(f"{usage}\n")
        (path / "memory.swap.max").write_text("max\n")
        (path / "memory.events").write_text(f"low 0\nhigh 0\nmax 3\noom 1\noom_kill {oom_kills}\n")
        (path / "memory.stat").write_text(
            f"anon {usage - inactive_file}\nfile {inactive_file}\ninactive_file {inactive_file}\nactive_file 0\n"
        )
    (path / "cgroup.procs").write_text("")
    return MemoryBudget(name=name, path=path, limit_bytes=limit, version=version)


def replica_record(
    slot: int, state: str = "healthy", started_at: float = 1000.0, **extra: Any
) -> ReplicaRecord:
    """A replica record as a Serve replica publishes it."""
    fields: dict[str, Any] = {
        "name": f"replica-{slot}",
        "slot": slot,
        "url": f"http://127.0.0.1:{8300 + slot}",
        "metrics_url": f"http://127.0.0.1:{8300 + slot}/metrics",
        "port": 8300 + slot,
        "vllm_pid": 999_999,
        "actor_pid": 999_998,
        "node_id": f"node-{slot}",
        "state": state,
        "started_at": started_at,
        "ready_at": started_at + 50 if state == "healthy" else None,
        "log_path": f"/tmp/replica-{slot}.log",
        **extra,
    }
    return ReplicaRecord(**fields)


class FakeLocalEnv:
    """A recorded local environment: state on disk, no processes."""

    name = "local"

    def __init__(self, state: LocalEnvState) -> None:
        self.state = state

    def load_state(self) -> LocalEnvState:
        return self.state

    def budget_state(self) -> LocalEnvState:
        return self.state

    def replica_records(self) -> list[ReplicaRecord]:
        return [r for r in read_records(self.state.replicas_dir) if r.state != "stopped"]
