"""The head dashboard's CPU cap: which processes it takes, and what it says where it cannot act.

The processes are real: a stand-in "head node" process group whose leader starts a process
named like Ray's dashboard (with a module forked below it) and a raylet stand-in beside it.
The cap itself is checked on this machine's cpu controller where one is writable (root).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from inferchaos.environments.local import dashboard_cpu
from inferchaos.faults.base import wait_until
from inferchaos.primitives import cpu_quota

REAL_CPU, NO_CPU_CGROUP = cpu_quota.cpu_quota_available()

SLEEP = "import time; time.sleep(120)"
# The leader starts the dashboard (whose argv names Ray's script, and which forks a module)
# and a raylet stand-in, then sleeps; all of them stay in the leader's process group.
HEAD = f"""
import subprocess, sys, time
module = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {SLEEP!r}]); time.sleep(120)"
subprocess.Popen([sys.executable, "-c", module, "{dashboard_cpu.DASHBOARD_SCRIPT}"])
subprocess.Popen([sys.executable, "-c", {SLEEP!r}, "raylet"])
time.sleep(120)
"""


@pytest.fixture
def head() -> Iterator[psutil.Process]:
    """A head-node stand-in: 4 processes in a session of their own, ended by process group."""
    leader = subprocess.Popen([sys.executable, "-c", HEAD], start_new_session=True)
    proc = psutil.Process(leader.pid)
    try:
        assert wait_until(lambda: _all_started(proc), 20, 0.05) is not None
        yield proc
    finally:
        os.killpg(leader.pid, signal.SIGKILL)
        leader.wait(timeout=10)


def _all_started(leader: psutil.Process) -> bool:
    """All 3 processes below the leader exist and have exec'd: until it execs, a child shows
    its parent's command line, and the leader's names the dashboard's script."""
    try:
        children = leader.children(recursive=True)
        return len(children) == 3 and all(c.cmdline() != c.parent().cmdline() for c in children)
    except psutil.Error:
        return False


def _named(head: psutil.Process, marker: str) -> list[int]:
    return [p.pid for p in head.children(recursive=True) if marker in " ".join(p.cmdline())]


def test_only_the_dashboard_and_what_it_forked_are_found(head: psutil.Process) -> None:
    found = {p.pid for p in dashboard_cpu._dashboard_processes(head.pid)}
    dashboard = _named(head, dashboard_cpu.DASHBOARD_SCRIPT)
    assert len(dashboard) == 1
    module = [c.pid for c in psutil.Process(dashboard[0]).children()]
    assert found == {dashboard[0], *module} and len(module) == 1
    assert not found & {head.pid, *_named(head, "raylet")}


def test_without_a_cpu_controller_nothing_is_capped_and_it_says_why(
    head: psutil.Process, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INFERCHAOS_CGROUP_ROOT", str(tmp_path))
    said = dashboard_cpu.cap_dashboard("x", head.pid)
    assert said == f"dashboard not capped: no cgroup cpu controller under {tmp_path}"
    dashboard_cpu.remove_dashboard_group("x")  # nothing to remove: no error


def test_a_head_without_a_dashboard_is_left_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A v1 cpu hierarchy of plain files: the controller exists, so only the missing dashboard
    # can stop the cap, and nothing may be created for it.
    hierarchy = tmp_path / "cpu"
    hierarchy.mkdir()
    for name, value in (("cpu.cfs_quota_us", "-1"), ("cpu.cfs_period_us", "100000"), ("cgroup.procs", "1")):
        (hierarchy / name).write_text(value + "\n")
    monkeypatch.setenv("INFERCHAOS_CGROUP_ROOT", str(tmp_path))
    lonely = subprocess.Popen([sys.executable, "-c", SLEEP], start_new_session=True)
    try:
        said = dashboard_cpu.cap_dashboard("x", lonely.pid)
    finally:
        os.killpg(lonely.pid, signal.SIGKILL)
        lonely.wait(timeout=10)
    assert said == "dashboard not capped: no dashboard process in the head's process group"
    assert not (hierarchy / dashboard_cpu.dashboard_group_name("x")).exists()


@pytest.mark.skipif(REAL_CPU is None, reason=f"no writable cpu cgroup here: {NO_CPU_CGROUP}")
@pytest.mark.may_skip("a writable cpu cgroup is the host's, no package gives it")
def test_the_dashboard_runs_in_a_half_core_group_that_env_down_removes(head: psutil.Process) -> None:
    assert REAL_CPU is not None
    env_id = uuid.uuid4().hex[:12]
    group = REAL_CPU.root / dashboard_cpu.dashboard_group_name(env_id)
    try:
        said = dashboard_cpu.cap_dashboard(env_id, head.pid)
        assert said == "dashboard capped at 0.5 core (2 process(es))"
        assert cpu_quota.read_quota(group, REAL_CPU.version) == (50_000, 100_000)
        dashboard = _named(head, dashboard_cpu.DASHBOARD_SCRIPT)[0]
        module = psutil.Process(dashboard).children()[0].pid
        assert set(cpu_quota.group_pids(group)) == {dashboard, module}
        for pid in (head.pid, *_named(head, "raylet")):
            assert cpu_quota.process_cgroup(pid, REAL_CPU) != f"/{group.name}"
    finally:
        os.killpg(head.pid, signal.SIGKILL)
        wait_until(lambda: not cpu_quota.group_pids(group), 10, 0.05)
        dashboard_cpu.remove_dashboard_group(env_id)
    assert not group.exists()
