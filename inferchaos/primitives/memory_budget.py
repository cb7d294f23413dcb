"""A memory budget per vLLM replica: the local environment's stand-in for a GPU's memory.

On Linux, as root, each replica runs inside its own memory cgroup whose limit plays the card's
size. A squatter allocating inside the cgroup takes memory the replica then lacks, and the
replica (run with ``oom_score_adj`` 1000, which its children inherit) is the process the kernel
kills, so a starting replica dies as a model load on a squatted GPU fails, while the squatter
lives on (measured on cgroup v1: exit 137 about 40 s into start-up).

Two cgroup versions hold budgets (:func:`find_memory_controller`):

- v1: a child of the ``memory`` hierarchy (``memory.limit_in_bytes``, ``memory.usage_in_bytes``,
  ``oom_kill`` in ``memory.oom_control``);
- v2: a child of the root (or of a hybrid system's ``unified`` tree) whose
  ``cgroup.subtree_control`` already hands the memory controller down (``memory.max``,
  ``memory.current``, ``oom_kill`` in ``memory.events``). inferchaos never enables the
  controller itself: the root belongs to the init system.

Without root there is no writable cgroup to put a budget in. A systemd user manager could
delegate one (a ``Delegate=yes`` scope), but inferchaos does not create such scopes yet, so
detection says exactly that instead of trying. ``INFERCHAOS_CGROUP_ROOT`` points detection at
another root than ``/sys/fs/cgroup`` (tests; an empty folder plays a host without cgroups).
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

CGROUP_ROOT_ENV = "INFERCHAOS_CGROUP_ROOT"
DEFAULT_CGROUP_ROOT = Path("/sys/fs/cgroup")
# Present when systemd is the init system (what sd_booted(3) checks).
SYSTEMD_RUNTIME_DIR = Path("/run/systemd/system")
# The replica is the OOM killer's first choice inside its budget, never the squatter.
REPLICA_OOM_SCORE_ADJ = 1000
PROCS = "cgroup.procs"


class MemoryBudgetError(InferchaosError):
    """A memory cgroup could not be created, joined or read."""


@dataclass(frozen=True)
class BudgetFiles:
    """The control files of one cgroup version's memory controller."""

    limit: str
    usage: str
    # The file whose ``oom_kill N`` line counts the OOM killer's acts in the group.
    oom_events: str


V1_FILES = BudgetFiles("memory.limit_in_bytes", "memory.usage_in_bytes", "memory.oom_control")
V2_FILES = BudgetFiles("memory.max", "memory.current", "memory.events")
FILES = {1: V1_FILES, 2: V2_FILES}


@dataclass(frozen=True)
class MemoryController:
    """Where budgets are made: the folder their cgroups are created in, and its cgroup version."""

    version: int
    parent: Path

    @property
    def files(self) -> BudgetFiles:
        return FILES[self.version]


@dataclass(frozen=True)
class MemoryBudget:
    """One replica's memory cgroup."""

    name: str
    path: Path
    limit_bytes: int
    version: int = 1

    @property
    def files(self) -> BudgetFiles:
        return FILES[self.version]

    def usage_bytes(self) -> int:
        """Bytes charged to the budget now (every process in it, page cache included)."""
        return int((self.path / self.files.usage).read_text())

    def free_bytes(self) -> int:
        return max(0, self.limit_bytes - self.usage_bytes())

    def pids(self) -> list[int]:
        text = (self.path / PROCS).read_text()
        return [int(line) for line in text.split()]

    def oom_kills(self) -> int:
        """How many times the kernel's OOM killer acted inside this budget (0 if the kernel does not say)."""
        for line in (self.path / self.files.oom_events).read_text().splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
        return 0


def cgroup_root() -> Path:
    """Where the cgroup filesystem is looked for: ``$INFERCHAOS_CGROUP_ROOT``, else /sys/fs/cgroup."""
    override = os.environ.get(CGROUP_ROOT_ENV)
    return Path(override) if override else DEFAULT_CGROUP_ROOT


def _v2_candidates(root: Path) -> list[Path]:
    """v2 trees under ``root`` that offer the memory controller: the root itself, or ``unified`` (hybrid)."""
    found = []
    for candidate in (root, root / "unified"):
        try:
            controllers = (candidate / "cgroup.controllers").read_text().split()
        except OSError:
            continue
        if "memory" in controllers:
            found.append(candidate)
    return found


def find_memory_controller(root: Path | None = None) -> MemoryController | None:
    """The memory controller under ``root`` (default :func:`cgroup_root`): v1's hierarchy first, then v2.

    Found means present, not usable: :func:`memory_controller_available` checks that budgets
    can be made there.
    """
    root = cgroup_root() if root is None else root
    v1 = root / "memory"
    if (v1 / V1_FILES.limit).is_file():
        return MemoryController(1, v1)
    candidates = _v2_candidates(root)
    return MemoryController(2, candidates[0]) if candidates else None


def _subtree_has_memory(parent: Path) -> bool:
    try:
        return "memory" in (parent / "cgroup.subtree_control").read_text().split()
    except OSError:
        return False


def _no_writable_cgroup(where: str) -> str:
    """Why an unprivileged user gets no budget, saying whether systemd could have delegated one."""
    if SYSTEMD_RUNTIME_DIR.is_dir():
        delegation = (
            "systemd is present, and a delegated user scope (systemd-run --user --scope -p Delegate=yes) "
            "could hold memory budgets, but inferchaos does not create one yet; run as root"
        )
    else:
        delegation = f"no systemd here ({SYSTEMD_RUNTIME_DIR} is absent) to delegate one; run as root"
    return f"no writable cgroup: {where} is not writable by uid {os.geteuid()}; {delegation}"


def memory_controller_available(root: Path | None = None) -> tuple[MemoryController | None, str]:
    """The controller budgets can be made under here, or None and the precise reason they cannot."""
    root = cgroup_root() if root is None else root
    if os.name != "posix":
        return None, "memory cgroups exist on Linux only"
    controller = find_memory_controller(root)
    if controller is None:
        return None, (
            f"no cgroup memory controller under {root} (neither cgroup v1's memory/ hierarchy "
            "nor a cgroup v2 tree listing memory in cgroup.controllers)"
        )
    parent = controller.parent
    if controller.version == 2 and not _subtree_has_memory(parent):
        return None, (
            f"cgroup v2 at {parent} does not hand the memory controller to its children "
            f"({parent / 'cgroup.subtree_control'} lacks memory; as root: echo +memory > that file)"
        )
    if not (os.access(parent, os.W_OK) and os.access(parent / PROCS, os.W_OK)):
        return None, _no_writable_cgroup(f"the cgroup v{controller.version} memory controller at {parent}")
    return controller, ""


def budgets_available() -> tuple[bool, str]:
    """Whether replica budgets can be made here; the reason when they cannot."""
    controller, why = memory_controller_available()
    return controller is not None, why


def budget_name(env_id: str, slot: int) -> str:
    """The cgroup name of replica slot ``slot`` of environment ``env_id``."""
    return f"inferchaos-{env_id}-replica-{slot}"


def _controller() -> MemoryController:
    controller, why = memory_controller_available()
    if controller is None:
        raise MemoryBudgetError(f"memory budgets are unavailable here: {why}")
    return controller


def open_budget(name: str, limit_bytes: int) -> MemoryBudget:
    """Create (or reuse) the cgroup ``name`` with the given limit."""
    controller = _controller()
    path = controller.parent / name
    try:
        path.mkdir(exist_ok=True)
        (path / controller.files.limit).write_text(str(limit_bytes))
        if controller.version == 2 and (path / "memory.swap.max").is_file():
            # A card's memory has no swap: with it, a squatted replica would page instead of
            # failing fast. (The v1 budgets leave memory.memsw.* alone; the host they were
            # measured on has no swap.)
            (path / "memory.swap.max").write_text("0")
    except OSError as e:
        raise MemoryBudgetError(f"could not set up memory budget {path}: {e}") from e
    return MemoryBudget(name=name, path=path, limit_bytes=limit_bytes, version=controller.version)


def _read_limit(path: Path, version: int) -> int:
    text = (path / FILES[version].limit).read_text().strip()
    # v2 writes "max" for no limit; a budget always has one, but a stranger's group may not.
    return -1 if text == "max" else int(text)


def find_budget(name: str) -> MemoryBudget | None:
    """The existing budget ``name``, or None (also where budgets cannot exist at all)."""
    controller = find_memory_controller()
    if controller is None:
        return None
    path = controller.parent / name
    if not path.is_dir():
        return None
    limit = _read_limit(path, controller.version)
    return MemoryBudget(name=name, path=path, limit_bytes=limit, version=controller.version)


def parse_memory_cgroup(text: str) -> str:
    """The memory cgroup a /proc/<pid>/cgroup text names, or '' when it names none.

    Lines are ``id:controllers:path``: v1 lists its controllers (``7:memory:/a``) and wins on a
    hybrid system, where it holds the memory controller; v2 has the one line ``0::/a``.
    """
    v2 = ""
    for line in text.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if not path:
            continue
        if "memory" in controllers.split(","):
            return path
        if hierarchy == "0" and controllers == "":
            v2 = path
    return v2


def join_command(
    budget: MemoryBudget, argv: list[str], oom_score_adj: int = REPLICA_OOM_SCORE_ADJ
) -> list[str]:
    """Wrap ``argv`` so the process enters ``budget`` (and sets its OOM score) before it execs.

    A shell does it rather than a preexec_fn, which is unsafe in a threaded parent such as a
    Ray actor; everything the command forks later inherits both.
    """
    script = (
        f"echo $$ > {shlex.quote(str(budget.path / PROCS))} && "
        f"echo {int(oom_score_adj)} > /proc/self/oom_score_adj && exec {shlex.join(argv)}"
    )
    return ["/bin/sh", "-c", script]


def remove_budgets(env_id: str) -> list[str]:
    """Remove every budget of ``env_id``; their processes must have ended already."""
    removed: list[str] = []
    controller = find_memory_controller()
    if controller is None:
        return removed
    for path in controller.parent.glob(f"inferchaos-{env_id}-*"):
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
