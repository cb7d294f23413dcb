"""CPU quotas on processes through a cgroup's cpu controller (cgroup v1 CFS files, or v2 ``cpu.max``).

A child cgroup with a CFS quota lets its processes run ``quota_us`` of CPU time in every
``period_us`` of wall time, summed over all their threads and cores; the kernel throttles them
for the rest of the period. That slows a process down without stopping it, and without the
process being able to tell, which is what a noisy neighbour or a throttled container does.

The child is created directly under the controller's root (the v1 hierarchy's mount, or the
v2 root): under v2 a cgroup that holds processes cannot enable controllers for children (the
"no internal processes" rule), and only the root is exempt. A process is moved by writing its
pid to a group's ``cgroup.procs`` (all its threads move with it); its children forked later
inherit the group. A group can be removed (rmdir) only once no process is left in it.

Everything takes the controller found by :func:`find_cpu_controller`, whose ``root`` argument
(or ``$INFERCHAOS_CGROUP_ROOT``, as for memory budgets) lets tests point it at a tree of plain
files, or at an empty folder for a host without cgroups; on the real cgroup filesystem the control files
appear and vanish with their directory.
"""

from __future__ import annotations

import errno
import logging
import math
import os
from dataclasses import dataclass, replace
from pathlib import Path

from inferchaos.errors import InferchaosError
from inferchaos.primitives.memory_budget import cgroup_root

logger = logging.getLogger(__name__)

# The kernel's default CFS period; 100 ms is long enough that the bookkeeping costs nothing
# and short enough that a throttled process looks slow rather than frozen.
DEFAULT_PERIOD_US = 100_000
# The smallest quota the kernel accepts (cpu.cfs_quota_us and cpu.max both refuse less), and
# the longest period.
MIN_QUOTA_US = 1_000
MAX_PERIOD_US = 1_000_000
V1_QUOTA = "cpu.cfs_quota_us"
V1_PERIOD = "cpu.cfs_period_us"
V2_MAX = "cpu.max"
# Both versions count, in cpu.stat, the quota periods a group ran in and those it was throttled in.
STAT = "cpu.stat"
PROCS = "cgroup.procs"
# A slowed replica's cgroup: inferchaos-<env>-slow-<handle id>.
SLOW_GROUP_PREFIX = "inferchaos-"
SLOW_GROUP_MARKER = "-slow-"


class CpuQuotaError(InferchaosError):
    """A cpu cgroup could not be created, set, joined, read or removed."""


@dataclass(frozen=True)
class CpuController:
    """Where a cpu controller is mounted and which cgroup version it speaks."""

    version: int
    root: Path

    def path_of(self, relative: str) -> Path:
        """The directory of the cgroup ``relative`` (as /proc/<pid>/cgroup names it) under this root."""
        return self.root / relative.lstrip("/")

    def relative(self, path: Path) -> str:
        """The name /proc/<pid>/cgroup gives the cgroup at ``path`` (``/`` for the root)."""
        inner = path.relative_to(self.root)
        return "/" if inner == Path(".") else f"/{inner.as_posix()}"


@dataclass(frozen=True)
class CpuGroup:
    """One child cgroup of a cpu controller."""

    controller: CpuController
    name: str

    @property
    def path(self) -> Path:
        return self.controller.root / self.name

    @property
    def relative(self) -> str:
        return "/" + self.name


def find_cpu_controller(root: Path | None = None) -> CpuController | None:
    """The cpu controller under ``root`` (v1's ``cpu`` hierarchy first, then v2), or None.

    v1 mounts it at ``root/cpu`` (or ``root/cpu,cpuacct``, which ``cpu`` links to on most
    distributions); ``root`` may also be that mount itself. v2 lists ``cpu`` in the root's
    ``cgroup.controllers`` (on a hybrid system the v2 tree sits at ``root/unified``, and holds
    the cpu controller only where v1 does not). Without ``root``, where memory budgets look too
    (``$INFERCHAOS_CGROUP_ROOT``, else /sys/fs/cgroup).
    """
    root = cgroup_root() if root is None else root
    for candidate in (root, root / "cpu", root / "cpu,cpuacct"):
        if (candidate / V1_QUOTA).is_file() and (candidate / V1_PERIOD).is_file():
            return CpuController(1, candidate)
    for candidate in (root, root / "unified"):
        try:
            controllers = (candidate / "cgroup.controllers").read_text().split()
        except OSError:
            continue
        if "cpu" in controllers:
            return CpuController(2, candidate)
    return None


def cpu_quota_available(root: Path | None = None) -> tuple[CpuController | None, str]:
    """The cpu controller quotas can be set through here, or None and the reason they cannot."""
    root = cgroup_root() if root is None else root
    if os.name != "posix":
        return None, "cgroups exist on Linux only"
    controller = find_cpu_controller(root)
    if controller is None:
        return None, f"no cgroup cpu controller under {root}"
    if not os.access(controller.root, os.W_OK):
        return None, f"the cgroup v{controller.version} cpu controller at {controller.root} is not writable"
    if controller.version == 2 and not os.access(controller.root / "cgroup.subtree_control", os.W_OK):
        return None, f"{controller.root / 'cgroup.subtree_control'} is not writable"
    return controller, ""


@dataclass(frozen=True)
class Bandwidth:
    """A CFS quota and the period it is granted in, both in microseconds."""

    quota_us: int
    period_us: int


def bandwidth(slowdown: float, cores: float, period_us: int = DEFAULT_PERIOD_US) -> Bandwidth:
    """The quota that leaves processes using ``cores`` of CPU ``slowdown`` times less, per ``period_us``.

    A quota is CPU time per period summed over cores, so ``cores`` full cores take
    ``period_us * cores`` per period; a ``slowdown`` times smaller quota makes CPU-bound work
    take ``slowdown`` times longer. Where that quota is below the kernel's MIN_QUOTA_US, the
    period is lengthened (up to MAX_PERIOD_US) until it is not, so the share stays the one asked.
    """
    if not slowdown > 0 or not cores > 0 or period_us <= 0:
        raise ValueError(f"slowdown, cores and period must be positive, got {slowdown}, {cores}, {period_us}")
    share = cores / slowdown
    period = min(MAX_PERIOD_US, max(period_us, math.ceil(MIN_QUOTA_US / share)))
    return Bandwidth(max(MIN_QUOTA_US, int(period * share)), period)


def _write(path: Path, value: str) -> None:
    try:
        path.write_text(value)
    except OSError as e:
        raise CpuQuotaError(f"could not write {value!r} to {path}: {e}") from e


def create_group(
    controller: CpuController, name: str, quota: int, period_us: int = DEFAULT_PERIOD_US
) -> CpuGroup:
    """Create (or reuse) the child cgroup ``name`` and give it ``quota`` us of CPU per ``period_us``."""
    if not name or "/" in name or name in (".", ".."):
        raise CpuQuotaError(f"{name!r} is not a cgroup name")
    group = CpuGroup(controller, name)
    if controller.version == 2:
        # A v2 child has cpu.max only once its parent hands the cpu controller down. Left on
        # afterwards: other cgroups may rely on it, and it limits nothing by itself.
        subtree = controller.root / "cgroup.subtree_control"
        try:
            enabled = subtree.read_text().split()
        except OSError as e:
            raise CpuQuotaError(f"could not read {subtree}: {e}") from e
        if "cpu" not in enabled:
            _write(subtree, "+cpu")
    try:
        group.path.mkdir(exist_ok=True)
    except OSError as e:
        raise CpuQuotaError(f"could not create cgroup {group.path}: {e}") from e
    set_quota(group, quota, period_us)
    return group


def set_quota(group: CpuGroup, quota: int, period_us: int = DEFAULT_PERIOD_US) -> None:
    """Limit ``group`` to ``quota`` us of CPU per ``period_us``."""
    if quota < MIN_QUOTA_US or period_us < MIN_QUOTA_US:
        raise CpuQuotaError(
            f"a quota and a period are at least {MIN_QUOTA_US} us, got {quota} and {period_us}"
        )
    if group.controller.version == 1:
        # The period first: the pair is checked as it is written, and a quota is meant for its period.
        _write(group.path / V1_PERIOD, str(period_us))
        _write(group.path / V1_QUOTA, str(quota))
    else:
        _write(group.path / V2_MAX, f"{quota} {period_us}")


def read_quota(path: Path, version: int) -> tuple[int | None, int]:
    """(quota us or None for no limit, period us) of the cgroup at ``path``."""
    try:
        if version == 1:
            quota = int((path / V1_QUOTA).read_text())
            period = int((path / V1_PERIOD).read_text())
            return (None if quota < 0 else quota), period
        limit, period_text = (path / V2_MAX).read_text().split()
        return (None if limit == "max" else int(limit)), int(period_text)
    except (OSError, ValueError) as e:
        raise CpuQuotaError(f"could not read the CPU quota of {path}: {e}") from e


@dataclass(frozen=True)
class Throttling:
    """A cgroup's CFS bandwidth counters: periods it had runnable work in, and those it was throttled in."""

    periods: int
    throttled: int
    # The group's quota period, which turns a stretch of wall time into a number of periods.
    period_us: int = DEFAULT_PERIOD_US


def parse_cpu_stat(text: str) -> Throttling | None:
    """The ``nr_periods`` and ``nr_throttled`` lines of a cpu.stat text (v1 and v2 alike); None without them."""
    counters: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if value.strip().isdigit():
            counters[key] = int(value)
    if "nr_periods" not in counters or "nr_throttled" not in counters:
        return None
    return Throttling(counters["nr_periods"], counters["nr_throttled"])


def own_group_throttling(pid: int, controller: CpuController, beside: int) -> Throttling | None:
    """The throttling counters of ``pid``'s cpu cgroup where ``beside`` is not in it too; else None.

    A quota on a group both processes share (a CI container's CPU limit over a whole platform)
    throttles them alike, so it says nothing about ``pid`` in particular. None also when either
    process or the counters are gone.
    """
    relative = process_cgroup(pid, controller)
    if relative is None or relative == process_cgroup(beside, controller):
        return None
    path = controller.path_of(relative)
    try:
        counters = parse_cpu_stat((path / STAT).read_text())
        _, period_us = read_quota(path, controller.version)
    except (OSError, CpuQuotaError):
        return None
    return None if counters is None else replace(counters, period_us=period_us)


def move(path: Path, pid: int) -> bool:
    """Move process ``pid`` (all its threads) into the cgroup at ``path``; False when the process is gone."""
    try:
        (path / PROCS).write_text(str(pid))
    except ProcessLookupError:
        return False
    except OSError as e:
        raise CpuQuotaError(f"could not move pid {pid} into {path}: {e}") from e
    return True


def group_pids(path: Path) -> list[int]:
    """The pids in the cgroup at ``path``; [] when it is gone."""
    try:
        text = (path / PROCS).read_text()
    except FileNotFoundError:
        return []
    except OSError as e:
        raise CpuQuotaError(f"could not read {path / PROCS}: {e}") from e
    return [int(line) for line in text.split()]


def parse_proc_cgroup(text: str, version: int) -> str | None:
    """The cpu cgroup a /proc/<pid>/cgroup text names for a v1 or v2 controller, or None when it names none.

    Lines are ``id:controllers:path``: v1 lists its controllers (``4:cpu,cpuacct:/a``), v2 has
    the single line ``0::/a``.
    """
    for line in text.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if not path:
            continue
        if version == 1 and "cpu" in controllers.split(","):
            return path
        if version == 2 and hierarchy == "0" and controllers == "":
            return path
    return None


def process_cgroup(pid: int, controller: CpuController) -> str | None:
    """The cgroup of ``pid`` in ``controller``'s hierarchy (``/`` for the root), or None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return None
    return parse_proc_cgroup(text, controller.version)


def remove_group(path: Path) -> bool:
    """Remove the (empty) cgroup at ``path``; False when it is gone already; CpuQuotaError while processes remain."""
    try:
        path.rmdir()
    except FileNotFoundError:
        return False
    except OSError as e:
        left = group_pids(path) if e.errno in (errno.EBUSY, errno.ENOTEMPTY) else []
        held = f" (pids still in it: {', '.join(map(str, left))})" if left else ""
        raise CpuQuotaError(f"could not remove cgroup {path}: {e.strerror or e}{held}") from e
    logger.debug("removed cgroup %s", path)
    return True


def slow_group_name(env: str, handle_id: str) -> str:
    """The cgroup a slowed replica runs in; the name tells a later plan it is slowed already."""
    return f"{SLOW_GROUP_PREFIX}{env}{SLOW_GROUP_MARKER}{handle_id}"


def is_slow_group(name: str) -> bool:
    """Whether a cgroup's last path part names a slowed replica's group."""
    return name.startswith(SLOW_GROUP_PREFIX) and SLOW_GROUP_MARKER in name


def remove_empty_slow_groups(env: str, root: Path | None = None) -> list[str]:
    """Remove ``env``'s slow groups that hold no process any more (left when cleanup could not run)."""
    controller = find_cpu_controller(root)
    removed: list[str] = []
    if controller is None:
        return removed
    for path in controller.root.glob(f"{SLOW_GROUP_PREFIX}{env}{SLOW_GROUP_MARKER}*"):
        try:
            if remove_group(path):
                removed.append(path.name)
        except CpuQuotaError as e:
            logger.warning("left cgroup %s: %s", path, e)
    return removed
