"""A memory budget per vLLM replica: the local environment's stand-in for a GPU's memory.

On Linux, as root, with cgroup v1's memory controller, each replica runs inside its own
memory cgroup whose limit plays the card's size. A squatter allocating inside the cgroup takes
memory the replica then lacks, and the replica (run with ``oom_score_adj`` 1000, which its
children inherit) is the process the kernel kills, so a starting replica dies as a model load
on a squatted GPU fails, while the squatter lives on (measured: exit 137 about 40 s into start-up).
"""

from __future__ import annotations

import logging
import os
import shlex
from dataclasses import dataclass
from pathlib import Path

from inferchaos.errors import InferchaosError, ProbeError
from inferchaos.primitives.nvml import DeviceMemory

logger = logging.getLogger(__name__)

CGROUP_V1_MEMORY = Path("/sys/fs/cgroup/memory")
# The replica is the OOM killer's first choice inside its budget, never the squatter.
REPLICA_OOM_SCORE_ADJ = 1000


class MemoryBudgetError(InferchaosError):
    """A memory cgroup could not be created, joined or read."""


@dataclass(frozen=True)
class MemoryBudget:
    """One replica's memory cgroup."""

    name: str
    path: Path
    limit_bytes: int

    def usage_bytes(self) -> int:
        """Bytes charged to the budget now (every process in it, page cache included)."""
        return int((self.path / "memory.usage_in_bytes").read_text())

    def free_bytes(self) -> int:
        return max(0, self.limit_bytes - self.usage_bytes())

    def pids(self) -> list[int]:
        text = (self.path / "cgroup.procs").read_text()
        return [int(line) for line in text.split()]

    def oom_kills(self) -> int:
        """How many times the kernel's OOM killer acted inside this budget (0 if the kernel does not say)."""
        for line in (self.path / "memory.oom_control").read_text().splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
        return 0


def budgets_available() -> tuple[bool, str]:
    """Whether replica budgets can be made here; the reason when they cannot."""
    if os.name != "posix" or not CGROUP_V1_MEMORY.is_dir():
        return False, f"no cgroup v1 memory controller at {CGROUP_V1_MEMORY}"
    if os.geteuid() != 0:
        return False, "memory cgroups need root"
    if not os.access(CGROUP_V1_MEMORY, os.W_OK):
        return False, f"{CGROUP_V1_MEMORY} is not writable"
    return True, ""


def budget_name(env_id: str, slot: int) -> str:
    """The cgroup name of replica slot ``slot`` of environment ``env_id``."""
    return f"inferchaos-{env_id}-replica-{slot}"


def open_budget(name: str, limit_bytes: int) -> MemoryBudget:
    """Create (or reuse) the cgroup ``name`` with the given limit."""
    path = CGROUP_V1_MEMORY / name
    try:
        path.mkdir(exist_ok=True)
        (path / "memory.limit_in_bytes").write_text(str(limit_bytes))
    except OSError as e:
        raise MemoryBudgetError(f"could not set up memory budget {path}: {e}") from e
    return MemoryBudget(name=name, path=path, limit_bytes=limit_bytes)


def find_budget(name: str) -> MemoryBudget | None:
    """The existing budget ``name``, or None."""
    path = CGROUP_V1_MEMORY / name
    if not path.is_dir():
        return None
    return MemoryBudget(name=name, path=path, limit_bytes=int((path / "memory.limit_in_bytes").read_text()))


def join_command(
    budget: MemoryBudget, argv: list[str], oom_score_adj: int = REPLICA_OOM_SCORE_ADJ
) -> list[str]:
    """Wrap ``argv`` so the process enters ``budget`` (and sets its OOM score) before it execs.

    A shell does it rather than a preexec_fn, which is unsafe in a threaded parent such as a
    Ray actor; everything the command forks later inherits both.
    """
    script = (
        f"echo $$ > {shlex.quote(str(budget.path / 'cgroup.procs'))} && "
        f"echo {int(oom_score_adj)} > /proc/self/oom_score_adj && exec {shlex.join(argv)}"
    )
    return ["/bin/sh", "-c", script]


def remove_budgets(env_id: str) -> list[str]:
    """Remove every budget of ``env_id``; their processes must have ended already."""
    removed: list[str] = []
    if not CGROUP_V1_MEMORY.is_dir():
        return removed
    for path in CGROUP_V1_MEMORY.glob(f"inferchaos-{env_id}-*"):
        try:
            path.rmdir()
            removed.append(path.name)
        except OSError as e:
            logger.warning("could not remove memory budget %s: %s", path, e)
    return removed


def read_memory_stat(budget: MemoryBudget) -> dict[str, int]:
    """The budget's memory.stat as numbers."""
    try:
        text = (budget.path / "memory.stat").read_text()
    except OSError as e:
        raise ProbeError(f"could not read {budget.path / 'memory.stat'}: {e}") from e
    stats = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if value.strip().isdigit():
            stats[key] = int(value)
    return stats


def budget_memory(budget: MemoryBudget, device: str) -> DeviceMemory:
    """A replica budget read as a device: its limit is the total, its working set the used bytes."""
    try:
        usage = budget.usage_bytes()
    except OSError as e:
        raise ProbeError(f"could not read the usage of memory budget {budget.name}: {e}") from e
    stats = read_memory_stat(budget)
    used = max(0, usage - stats.get("total_inactive_file", stats.get("inactive_file", 0)))
    return DeviceMemory(device, budget.limit_bytes, used, max(0, budget.limit_bytes - used))
