"""CPU time and run-queue wait of a process tree, read from each thread's /proc schedstat.

For each thread the kernel counts the time it ran and the time it waited, runnable, for a
CPU (``/proc/<pid>/task/<tid>/schedstat``, in nanoseconds). A CFS quota's throttled time
counts as waiting: measured here, a busy loop under a 10% quota ran 0.10 s and waited 0.90 s
of every second. So ``cpu / (cpu + wait)`` is the share of the CPU a process tree was ready to
use and got, whatever work it does; a stopped (SIGSTOP) or sleeping thread adds to neither.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from inferchaos.primitives.processes import descendants

logger = logging.getLogger(__name__)

PROC = Path("/proc")


@dataclass(frozen=True)
class SchedTimes:
    """Seconds a process tree ran on a CPU and waited runnable for one, since it was first read."""

    cpu_s: float
    wait_s: float


def parse_schedstat(text: str) -> tuple[int, int] | None:
    """(run ns, wait ns) from a schedstat line ``<run ns> <wait ns> <timeslices>``; None when malformed."""
    fields = text.split()
    if len(fields) < 2 or not (fields[0].isdigit() and fields[1].isdigit()):
        return None
    return int(fields[0]), int(fields[1])


def _thread_times(pid: int) -> dict[tuple[int, int], tuple[int, int]]:
    times: dict[tuple[int, int], tuple[int, int]] = {}
    try:
        tasks = list((PROC / str(pid) / "task").iterdir())
    except OSError:
        return times  # gone since it was listed
    for task in tasks:
        try:
            parsed = parse_schedstat((task / "schedstat").read_text())
        except OSError:
            continue  # the thread ended between the listing and the read
        if parsed is not None and task.name.isdigit():
            times[(pid, int(task.name))] = parsed
    return times


@dataclass
class TreeSchedCounter:
    """Running totals of the CPU time and run-queue wait of ``pid`` and everything below it.

    Threads and child processes come and go (a thread's counters leave with it), so the totals
    add up each thread's increase between reads rather than summing what is left: they never
    go back. A thread first seen counts from its start.
    """

    pid: int
    _last: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)
    _cpu_ns: int = 0
    _wait_ns: int = 0

    def read(self) -> SchedTimes:
        """The totals now; a tree that is gone keeps the totals it had."""
        seen: dict[tuple[int, int], tuple[int, int]] = {}
        for process in descendants(self.pid):
            seen.update(_thread_times(process.pid))
        for key, (cpu, wait) in seen.items():
            before_cpu, before_wait = self._last.get(key, (0, 0))
            # A thread id reused by a new thread reads lower than its predecessor: count it afresh.
            self._cpu_ns += cpu - before_cpu if cpu >= before_cpu else cpu
            self._wait_ns += wait - before_wait if wait >= before_wait else wait
        self._last = seen
        return SchedTimes(self._cpu_ns / 1e9, self._wait_ns / 1e9)
