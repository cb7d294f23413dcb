"""A CPU cap on the head's Ray dashboard, standing in for the head pod's own CPUs.

On a cluster the dashboard runs on the head, beside the GCS, and no replica shares its CPUs.
Here every node shares the host's cores, and Ray runs the replicas at niceness 15
(``RAY_worker_niceness``) while the dashboard runs at 0. While the GCS is down the dashboard's
modules retry it in a tight loop that takes more than a core on a small machine, and the
replicas, starved, answer the canary several times slower. Capped at half a core, the same
outage leaves the replicas enough CPU to serve (figures in bench/RESULTS.md). Outside such a
loop the dashboard uses a few percent of a core, so the cap changes nothing else.

The cap is applied once the environment is up (the dashboard's start-up is not slowed) and
where a writable cgroup cpu controller exists; elsewhere the environment runs without it.
"""

from __future__ import annotations

import logging

import psutil

from inferchaos.primitives.cpu_quota import (
    CpuQuotaError,
    bandwidth,
    cpu_quota_available,
    create_group,
    find_cpu_controller,
    move,
    remove_group,
)
from inferchaos.primitives.processes import process_group

logger = logging.getLogger(__name__)

DASHBOARD_CORES = 0.5
# The dashboard's main process; its modules are forked below it (ray-dashboard-<Module>-0).
DASHBOARD_SCRIPT = "ray/dashboard/dashboard.py"


def dashboard_group_name(env_id: str) -> str:
    """The cgroup the environment's dashboard runs in: inferchaos-<env id>-dashboard."""
    return f"inferchaos-{env_id}-dashboard"


def _dashboard_processes(head_pgid: int) -> list[psutil.Process]:
    """The dashboard's main process in the head's process group, and everything below it."""
    found: list[psutil.Process] = []
    for proc in process_group(head_pgid):
        try:
            if any(part.endswith(DASHBOARD_SCRIPT) for part in proc.cmdline()):
                found += [proc, *proc.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
    return found


def cap_dashboard(env_id: str, head_pgid: int) -> str:
    """Move the head's dashboard into a cgroup limited to DASHBOARD_CORES; say what was done."""
    controller, why_not = cpu_quota_available()
    if controller is None:
        return f"dashboard not capped: {why_not}"
    procs = _dashboard_processes(head_pgid)
    if not procs:
        return "dashboard not capped: no dashboard process in the head's process group"
    try:
        cap = bandwidth(1.0, DASHBOARD_CORES)
        group = create_group(controller, dashboard_group_name(env_id), cap.quota_us, cap.period_us)
        moved = sum(move(group.path, proc.pid) for proc in procs)
    except CpuQuotaError as e:
        logger.warning("could not cap the dashboard's CPU: %s", e)
        return f"dashboard not capped: {e}"
    return f"dashboard capped at {DASHBOARD_CORES:g} core ({moved} process(es))"


def remove_dashboard_group(env_id: str) -> None:
    """Remove the dashboard's cgroup once its processes have ended; nothing when there is none."""
    controller = find_cpu_controller()
    if controller is None:
        return
    try:
        remove_group(controller.root / dashboard_group_name(env_id))
    except CpuQuotaError as e:
        logger.warning("left the dashboard's cgroup: %s", e)
