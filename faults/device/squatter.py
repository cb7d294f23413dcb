"""The squatter: a process of its own that takes memory, touches every page, and holds it.

    python -m inferchaos.faults.device.squatter --backend cuda|host --device N|host:K --bytes B [--budget CGROUP]

Once the memory is held it prints one JSON line to stdout,
``{"ready": true, "allocated_bytes": ..., "pid": ...}``, then waits for SIGTERM or SIGINT,
frees the memory and exits 0. When it cannot take the memory it prints
``{"ready": false, "error": "...", "pid": ...}`` and exits 3.

The host backend writes one byte per page of an anonymous mapping, so the kernel really backs
(and charges) every page. It is started already inside the replica's memory budget (the
launcher wraps it with ``join_command``); ``--budget`` makes it check that it is, so a squatter
meant for a budget never takes the machine's memory instead.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from inferchaos.errors import FaultError
from inferchaos.primitives.memory_budget import parse_memory_cgroup

if TYPE_CHECKING:
    # For the type only: the squatter process starts without importing the fault machinery.
    from inferchaos.faults.base import JsonObject

EXIT_FAILED = 3
# Safety caps: a host squatter never takes more than half the machine, a cuda one never more
# than this share of the card unless told a smaller share.
HOST_MAX_MACHINE_FRACTION = 0.5
CUDA_MAX_FRACTION = 0.95
STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}


@dataclass(frozen=True)
class SquatRequest:
    """What the command line asked for."""

    backend: str
    device: str
    nbytes: int
    budget: str = ""
    max_fraction: float = CUDA_MAX_FRACTION


@dataclass
class HeldMemory:
    """Memory the squatter holds, and how to give it back."""

    allocated_bytes: int
    release: Callable[[], None]
    report: JsonObject = field(default_factory=dict)


def parse_request(argv: Sequence[str] | None = None) -> SquatRequest:
    """Read the command line; argparse exits 2 on a malformed one."""
    parser = argparse.ArgumentParser(
        prog="python -m inferchaos.faults.device.squatter", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--backend", choices=("cuda", "host"), required=True)
    parser.add_argument("--device", required=True, help="cuda: N or cuda:N; host: host:K")
    parser.add_argument("--bytes", type=int, required=True, dest="nbytes")
    parser.add_argument(
        "--budget", default="", help="host: the memory cgroup this process must already be in"
    )
    parser.add_argument(
        "--max-fraction", type=float, default=CUDA_MAX_FRACTION, help="cuda: largest share of the device"
    )
    args = parser.parse_args(argv)
    return SquatRequest(args.backend, args.device, args.nbytes, args.budget, args.max_fraction)


def cuda_ordinal(device: str) -> int:
    """``3`` or ``cuda:3`` -> 3."""
    text = device.removeprefix("cuda:")
    if not text.isdigit():
        raise FaultError(f"--device {device!r} is not a CUDA device (N or cuda:N)")
    return int(text)


def memory_cgroup_of_self() -> str:
    """The memory cgroup path of this process (cgroup v1 or v2), or '' when there is none."""
    try:
        return parse_memory_cgroup(Path("/proc/self/cgroup").read_text())
    except OSError:
        return ""


def _rss_bytes() -> int:
    return int(psutil.Process().memory_info().rss)


def hold_host_memory(request: SquatRequest) -> HeldMemory:
    """Map ``nbytes`` of anonymous memory and write one byte per page."""
    if not request.device.startswith("host:") or not request.device[5:].isdigit():
        raise FaultError(f"--device {request.device!r} is not a host device (host:K)")
    if request.nbytes <= 0:
        raise FaultError(f"cannot squat {request.nbytes} bytes")
    machine = psutil.virtual_memory().total
    if request.nbytes > HOST_MAX_MACHINE_FRACTION * machine:
        raise FaultError(
            f"refusing to squat {request.nbytes} bytes of host memory: more than "
            f"{HOST_MAX_MACHINE_FRACTION:.0%} of this machine's {machine} bytes"
        )
    if request.budget:
        cgroup = memory_cgroup_of_self()
        if cgroup.rstrip("/").rsplit("/", 1)[-1] != request.budget:
            raise FaultError(
                f"not inside memory budget {request.budget} (this process is in {cgroup or 'none'})"
            )
    rss_before = _rss_bytes()
    started = time.monotonic()
    try:
        region = mmap.mmap(-1, request.nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        region[:: mmap.PAGESIZE] = b"\x01" * len(range(0, request.nbytes, mmap.PAGESIZE))
    except (OSError, MemoryError, ValueError) as e:
        raise FaultError(f"could not take {request.nbytes} bytes of host memory: {e}") from e
    return HeldMemory(
        request.nbytes,
        region.close,
        {
            "rss_before_bytes": rss_before,
            "rss_after_bytes": _rss_bytes(),
            "budget": request.budget,
            "hold_s": round(time.monotonic() - started, 3),
        },
    )


def hold_cuda_memory(request: SquatRequest) -> HeldMemory:
    """Allocate and touch ``nbytes`` on the GPU through the CUDA driver."""
    from inferchaos.faults.device.cuda import CudaDriver, hold_device_memory, release_device_memory

    ordinal = cuda_ordinal(request.device)
    driver = CudaDriver()
    allocation = hold_device_memory(driver, ordinal, request.nbytes, request.max_fraction)
    return HeldMemory(
        allocation.nbytes,
        lambda: release_device_memory(driver, allocation),
        {
            "total_bytes": allocation.total_bytes,
            "free_before_bytes": allocation.free_before_bytes,
            "free_after_bytes": allocation.free_after_bytes,
        },
    )


def _emit(line: JsonObject) -> None:
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


def main(argv: Sequence[str] | None = None) -> int:
    """Squat, report, hold until SIGTERM/SIGINT, free; the exit status of the process."""
    # Held back until the memory is taken: a stop request during the allocation then frees
    # it cleanly instead of killing the process halfway through.
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    request = parse_request(argv)
    hold = hold_cuda_memory if request.backend == "cuda" else hold_host_memory
    try:
        held = hold(request)
    except FaultError as e:
        _emit(
            {
                "ready": False,
                "error": str(e),
                "pid": os.getpid(),
                "backend": request.backend,
                "device": request.device,
            }
        )
        return EXIT_FAILED
    _emit(
        {
            "ready": True,
            "allocated_bytes": held.allocated_bytes,
            "pid": os.getpid(),
            "backend": request.backend,
            "device": request.device,
            **held.report,
        }
    )
    received = signal.sigwait(STOP_SIGNALS)
    try:
        held.release()
    except FaultError as e:
        sys.stderr.write(f"squatter: releasing the memory failed: {e}\n")
        return EXIT_FAILED
    sys.stderr.write(f"squatter: released {held.allocated_bytes} bytes on {signal.Signals(received).name}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
