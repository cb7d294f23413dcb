"""A vLLM replica's processes, found and signalled by pid and start time: what the faults that freeze or slow one share.

A fault that acts on a replica's processes records each one (pid, start time, name) when it
plans, and later acts, reverts or reports only on a process that is still the same: never on
one that reused a recorded pid. Revert (and `inferchaos cleanup` in a later process, from the
ledger alone) relies on that.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import NotRequired, TypedDict

import psutil

from inferchaos.errors import FaultError
from inferchaos.faults.base import JsonObject
from inferchaos.faults.vllm.engine import find_engine_core
from inferchaos.primitives.processes import descendants
from inferchaos.primitives.processes import same_process as same_pid_and_start

GONE = "gone"


class ProcessEntry(TypedDict):
    """One recorded process, as the ledger keeps it; ``cgroup``: where a slow fault found it."""

    pid: int
    create_time: float
    name: str
    cgroup: NotRequired[str | None]


def entry_json(entry: ProcessEntry) -> JsonObject:
    """``entry`` for a fault's state, key for key (mypy takes no TypedDict for a ``JsonObject``)."""
    stored: JsonObject = {"pid": entry["pid"], "create_time": entry["create_time"], "name": entry["name"]}
    if "cgroup" in entry:
        stored["cgroup"] = entry["cgroup"]
    return stored


def process_state(pid: int) -> str | None:
    """The state letter of ``pid`` in /proc/<pid>/stat (``T``: stopped), or None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name in parentheses may itself hold spaces and parentheses: the state
    # follows the last closing one.
    return stat[stat.rindex(")") + 2]


def same_process(entry: ProcessEntry) -> psutil.Process | None:
    """The live process ``entry`` recorded (pid and start time), or None when it is gone or its pid was reused."""
    return same_pid_and_start(int(entry["pid"]), float(entry["create_time"]))


def state_of(entry: ProcessEntry) -> str:
    """The state letter of the recorded process, or ``gone`` (exited, or its pid reused)."""
    if same_process(entry) is None:
        return GONE
    return process_state(int(entry["pid"])) or GONE


def pid_list(pids: list[int]) -> str:
    """Pids for a message: ``1, 2, 3`` or ``none``."""
    return ", ".join(str(pid) for pid in pids) or "none"


def process_group(leader: int) -> list[psutil.Process]:
    """Every live process of the process group ``leader`` leads, the leader first."""
    members = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == leader and proc.status() != psutil.STATUS_ZOMBIE:
                members.append(proc)
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue
    return sorted(members, key=lambda p: (p.pid != leader, p.pid))


def processes_to_stop(what: str, server_pid: int) -> list[psutil.Process]:
    """The processes ``what`` (engine, server, all) names for the vLLM server ``server_pid``; FaultError when they cannot be found."""
    if what == "server":
        try:
            return [psutil.Process(server_pid)]
        except psutil.NoSuchProcess as e:
            raise FaultError(f"the vLLM server pid {server_pid} is gone") from e
    if what == "all":
        group = process_group(server_pid)
        if not group:
            raise FaultError(f"no live process in the vLLM server's process group {server_pid}")
        return group
    engine = find_engine_core(server_pid)
    found = descendants(engine.pid)
    if not found:
        raise FaultError(f"the EngineCore pid {engine.pid} under vLLM server pid {server_pid} is gone")
    return found


def records(processes: list[psutil.Process]) -> list[ProcessEntry]:
    """What undo needs to find each process again, and only it: pid, start time, and a name for messages.

    A process that ended while it was read is left out.
    """
    found: list[ProcessEntry] = []
    for proc in processes:
        try:
            found.append({"pid": proc.pid, "create_time": proc.create_time(), "name": proc.name()})
        except psutil.NoSuchProcess:
            continue
    return found


def signal_recorded(
    entries: list[ProcessEntry], sig: signal.Signals
) -> tuple[list[int], list[int], list[str]]:
    """Send ``sig`` to each recorded process that is still the same; (signalled, gone, failures)."""
    sent, gone, failed = [], [], []
    for entry in entries:
        proc = same_process(entry)
        if proc is None:
            gone.append(int(entry["pid"]))
            continue
        try:
            proc.send_signal(sig)
            sent.append(proc.pid)
        except psutil.NoSuchProcess:
            gone.append(proc.pid)
        except psutil.AccessDenied as e:
            failed.append(f"pid {proc.pid}: {e}")
    return sent, gone, failed


def wait_stopped(entries: list[ProcessEntry], timeout_s: float) -> dict[str, str]:
    """The state of each recorded pid once all are stopped, or as they are when ``timeout_s`` ran out.

    SIGSTOP is delivered asynchronously, when the process next runs in the kernel.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        states = {str(e["pid"]): state_of(e) for e in entries}
        if all(s == "T" for s in states.values()) or time.monotonic() >= deadline:
            return states
        time.sleep(0.01)
