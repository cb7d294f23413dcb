"""Does the cuda squatter really take GPU memory, and give it back? Checked against NVML.

On a machine with an NVIDIA GPU: squats 25% of device 0 through the squatter process (started
exactly as the squat_device_memory fault starts it), prints the bytes allocated beside what NVML
observes (used memory before and after, the squatter's pid among the compute processes), ends
the squatter and prints that the memory returned. Exits 1 when NVML does not show the squat or
the memory does not come back.

On a machine without one it prints why and exits 0.

Run: .venv/bin/python bench/gpu_squat_check.py   (needs the `gpu` extra for NVML)
"""

from __future__ import annotations

import sys
import tempfile
import time
import uuid
from pathlib import Path

from inferchaos.errors import FaultError
from inferchaos.faults.device.cuda import cuda_available
from inferchaos.faults.device.launch import (
    SquatterSpec,
    end_squatter,
    squatter_process,
    start_squatter,
    wait_ready,
)
from inferchaos.primitives.nvml import GpuObservation, Nvml, NvmlError

DEVICE = 0
FRACTION = 0.25
# "About the bytes": the rise must cover this share of the allocation (a context adds more).
TOLERANCE = 0.9
GIB = 1024**3


def _gib(n: int | None) -> str:
    return "n/a" if n is None else f"{n / GIB:.2f} GiB"


def _show(label: str, obs: GpuObservation) -> None:
    print(
        f"  {label}: used {_gib(obs.memory.used_bytes)}, free {_gib(obs.memory.free_bytes)} "
        f"of {_gib(obs.memory.total_bytes)}; compute pids {obs.pids}"
    )


def _wait_used_back(nvml: Nvml, target: int, timeout_s: float) -> GpuObservation:
    """NVML's view once used memory is back within the allowance of ``target`` (or at the timeout)."""
    deadline = time.monotonic() + timeout_s
    obs = nvml.observe(DEVICE)
    while obs.memory.used_bytes > target and time.monotonic() < deadline:
        time.sleep(0.2)
        obs = nvml.observe(DEVICE)
    return obs


def check(nvml: Nvml, log_dir: Path) -> bool:
    """Squat, observe, release, observe; True when NVML saw the squat and the memory came back."""
    before = nvml.observe(DEVICE)
    nbytes = int(before.memory.total_bytes * FRACTION)
    print(f"GPU {DEVICE}: squatting {FRACTION:.0%} = {_gib(nbytes)} ({nbytes} bytes)")
    _show("before", before)
    # The squatter sizes the device with the driver, which may count a little less than NVML.
    spec = SquatterSpec(
        "cuda",
        f"cuda:{DEVICE}",
        nbytes,
        uuid.uuid4().hex[:12],
        log_dir / "squatter.log",
        max_fraction=FRACTION + 0.01,
    )
    pid = start_squatter(spec)
    try:
        ready = wait_ready(pid, spec.log_path, timeout_s=120)
        during = nvml.observe(DEVICE)
        _show("during", during)
        rise = during.memory.used_bytes - before.memory.used_bytes
        listed = pid in during.pids
        held = [p.used_bytes for p in during.processes if p.pid == pid]
        print(f"  allocated by the squatter (pid {pid}): {ready.allocated_bytes} bytes")
        print(f"  NVML used rose by {rise} bytes ({rise / ready.allocated_bytes:.3f} of the allocation)")
        print(
            f"  squatter pid among compute processes: {listed}; NVML attributes to it: {_gib(held[0] if held else None)}"
        )
    finally:
        ended = [end_squatter(proc) for proc in squatter_process(pid, spec.squat_id)]
    after = _wait_used_back(nvml, before.memory.used_bytes + nbytes // 100, timeout_s=30)
    _show("after release", after)
    returned = during.memory.used_bytes - after.memory.used_bytes
    print(
        f"  squatter {ended[0] if ended else 'already gone'}; memory returned: {returned} bytes; "
        f"used now {after.memory.used_bytes - before.memory.used_bytes:+d} bytes against before"
    )
    seen = rise >= TOLERANCE * ready.allocated_bytes and listed
    back = after.memory.used_bytes <= before.memory.used_bytes + nbytes // 100 and pid not in after.pids
    print(f"result: squat observed by NVML: {seen}; memory returned: {back}")
    return seen and back


def main() -> int:
    usable, why = cuda_available()
    if not usable:
        print(f"no GPU squat check on this machine: {why}")
        return 0
    try:
        nvml = Nvml()
    except NvmlError as e:
        print(f"no GPU squat check on this machine: {e}")
        return 0
    try:
        if nvml.device_count() <= DEVICE:
            print(f"no GPU squat check on this machine: NVML sees no GPU {DEVICE}")
            return 0
        with tempfile.TemporaryDirectory(prefix="gpu-squat-check-") as folder:
            return 0 if check(nvml, Path(folder)) else 1
    except (FaultError, NvmlError) as e:
        print(f"GPU squat check failed: {e}")
        return 1
    finally:
        nvml.close()


if __name__ == "__main__":
    sys.exit(main())
