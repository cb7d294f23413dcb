"""Starting a squatter process, reading its ready line, finding it again and ending it.

A squatter runs as the leader of its own process group (so it outlives the runner and a later
``inferchaos cleanup`` can end it by pid), carries ``INFERCHAOS_ENV_ID`` (so ``env down``
finds it) and ``INFERCHAOS_SQUAT_ID`` (so a revert finds it even when its pid never reached
the ledger). Its stdout goes to a log file, where the ready line is read from.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from inferchaos.errors import FaultError
from inferchaos.faults.base import JsonObject
from inferchaos.primitives.memory_budget import MemoryBudget, join_command
from inferchaos.primitives.processes import ENV_MARKER, pid_alive, spawn_process_group

logger = logging.getLogger(__name__)

SQUATTER_MODULE = "inferchaos.faults.device.squatter"
# Where the squatter lived before the device faults moved to faults/device: one that an older
# inferchaos started is still ours to find and end (`inferchaos cleanup` after an upgrade).
FORMER_SQUATTER_MODULES = ("inferchaos.faults.gpu.squatter",)
SQUAT_ID_VAR = "INFERCHAOS_SQUAT_ID"
PROJECT_ROOT = Path(__file__).resolve().parents[2]
# The squatter must not be the kernel's preferred victim inside the budget: the replica is.
SQUATTER_OOM_SCORE_ADJ = 0


@dataclass(frozen=True)
class SquatterSpec:
    """One squatter to start."""

    backend: str
    device: str
    nbytes: int
    squat_id: str
    log_path: Path
    env_id: str = ""
    budget: MemoryBudget | None = None
    max_fraction: float | None = None


@dataclass(frozen=True)
class SquatterReady:
    """The squatter's ready line, and when it was read."""

    pid: int
    allocated_bytes: int
    at: float
    report: JsonObject = field(default_factory=dict)


def squatter_argv(spec: SquatterSpec) -> list[str]:
    """The squatter's command line, wrapped to enter the budget first when there is one."""
    argv = [
        sys.executable,
        "-m",
        SQUATTER_MODULE,
        "--backend",
        spec.backend,
        "--device",
        spec.device,
        "--bytes",
        str(spec.nbytes),
    ]
    if spec.max_fraction is not None:
        argv += ["--max-fraction", repr(spec.max_fraction)]
    if spec.budget is None:
        return argv
    return join_command(
        spec.budget, [*argv, "--budget", spec.budget.name], oom_score_adj=SQUATTER_OOM_SCORE_ADJ
    )


def squatter_env(spec: SquatterSpec) -> dict[str, str]:
    """The runner's environment plus the markers, with CUDA ordinals as NVML numbers them."""
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    # NVML numbers GPUs by PCI bus id; with the same order here cuda:N is NVML's GPU N.
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PROJECT_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env[SQUAT_ID_VAR] = spec.squat_id
    # Only the environment the squat belongs to may end it on `env down`, not one the runner inherited.
    env.pop(ENV_MARKER, None)
    if spec.env_id:
        env[ENV_MARKER] = spec.env_id
    return env


def start_squatter(spec: SquatterSpec) -> int:
    """Start the squatter in a process group of its own; return its pid at once."""
    spec.log_path.parent.mkdir(parents=True, exist_ok=True)
    pid = spawn_process_group(squatter_argv(spec), squatter_env(spec), spec.log_path, cwd=PROJECT_ROOT)
    logger.info("started squatter pid %d: %d bytes on %s", pid, spec.nbytes, spec.device)
    return pid


def read_status_line(log_path: Path) -> dict[str, Any] | None:
    """The squatter's JSON status line in its log, or None before it has written one."""
    try:
        lines = log_path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise FaultError(f"could not read the squatter log {log_path}: {e}") from e
    for line in lines:
        if not line.startswith("{"):
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict) and "ready" in data:
            return data
    return None


def _log_tail(log_path: Path, lines: int = 8) -> str:
    try:
        return "\n".join(log_path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _exit_text(pid: int) -> str:
    try:
        code = psutil.Process(pid).wait(timeout=0)
    except (psutil.NoSuchProcess, psutil.TimeoutExpired):
        return "exited"
    if code is None:
        return "exited"
    if code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"


def wait_ready(pid: int, log_path: Path, timeout_s: float) -> SquatterReady:
    """Wait for the ready line; FaultError with the squatter's own words when it fails."""
    deadline = time.monotonic() + timeout_s
    while True:
        status = read_status_line(log_path)
        if status is not None:
            if status.get("ready"):
                return SquatterReady(pid, int(status["allocated_bytes"]), time.time(), status)
            raise FaultError(f"the squatter refused: {status.get('error', 'no reason given')}")
        if not pid_alive(pid):
            # It may have written its line just before exiting.
            if read_status_line(log_path) is None:
                raise FaultError(
                    f"the squatter (pid {pid}) {_exit_text(pid)} before it held its memory; "
                    f"log {log_path}:\n{_log_tail(log_path)}"
                )
            continue
        if time.monotonic() > deadline:
            raise FaultError(
                f"the squatter (pid {pid}) did not hold its memory within {timeout_s:.0f} s; see {log_path}"
            )
        time.sleep(0.1)


# How long a process with no command line may still be in its exec.
EXEC_SETTLE_S = 1.0


def _runs_squatter(cmdline: list[str]) -> bool:
    return any(module in cmdline for module in (SQUATTER_MODULE, *FORMER_SQUATTER_MODULES))


def is_squatter(proc: psutil.Process, squat_id: str) -> bool:
    """True if ``proc`` is the squatter of ``squat_id`` (by its command line and marker)."""
    try:
        cmdline = proc.cmdline()
        # A process caught mid-exec shows no command line yet (spawn returns as exec closes
        # its pipe, before the kernel sets the new arguments): look again before saying no.
        deadline = time.monotonic() + EXEC_SETTLE_S
        while not cmdline and time.monotonic() < deadline:
            time.sleep(0.02)
            cmdline = proc.cmdline()
        if not _runs_squatter(cmdline):
            return False
        return proc.environ().get(SQUAT_ID_VAR) == squat_id
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    except psutil.AccessDenied:
        # Another user's process: never ours to signal.
        return False


def find_squatters(squat_id: str) -> list[psutil.Process]:
    """Every live squatter process of ``squat_id``."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info.get("cmdline") or []
        if _runs_squatter(cmdline) and is_squatter(proc, squat_id):
            found.append(proc)
    return found


def squatter_process(pid: int | None, squat_id: str) -> list[psutil.Process]:
    """The squatter recorded as ``pid`` if it still is one; else any squatter of ``squat_id``."""
    if pid:
        try:
            proc = psutil.Process(pid)
        except psutil.NoSuchProcess:
            return []
        # A recorded pid may have been reused by an unrelated process: never signal that one.
        return [proc] if is_squatter(proc, squat_id) and pid_alive(pid) else []
    return find_squatters(squat_id)


def _signal_group(proc: psutil.Process, sig: signal.Signals) -> None:
    try:
        if os.getpgid(proc.pid) == proc.pid:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
    except (ProcessLookupError, psutil.NoSuchProcess):
        pass


def _wait_gone(proc: psutil.Process, timeout_s: float) -> tuple[bool, int | None]:
    """(gone, exit code if known). A zombie counts as gone: its memory is already freed, and
    only its parent (perhaps a runner that has since died) can reap it."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return True, proc.wait(timeout=0)
        except psutil.TimeoutExpired:
            pass
        if not pid_alive(proc.pid):
            return True, None
        if time.monotonic() > deadline:
            return False, None
        time.sleep(0.05)


def end_squatter(proc: psutil.Process, grace_s: float = 10.0) -> str:
    """SIGTERM the squatter's group, SIGKILL it after ``grace_s``; how it ended."""
    _signal_group(proc, signal.SIGTERM)
    gone, code = _wait_gone(proc, grace_s)
    if gone:
        return "released" if code in (0, None) else f"exited with code {code}"
    logger.warning("squatter pid %d ignored SIGTERM for %.0f s; sending SIGKILL", proc.pid, grace_s)
    _signal_group(proc, signal.SIGKILL)
    gone, _ = _wait_gone(proc, 5.0)
    if not gone:
        raise FaultError(f"squatter pid {proc.pid} survived SIGKILL")
    return "killed"
