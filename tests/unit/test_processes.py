"""Processes of an environment are found and ended by pid, even when they escaped their parent."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import psutil

from inferchaos.faults.base import wait_until
from inferchaos.primitives.processes import (
    ENV_MARKER,
    end_processes,
    kill_tree_now,
    pid_alive,
    process_group,
    processes_with_marker,
    same_process,
    same_server,
    spawn_process_group,
    spawn_server,
)

# A parent that starts a child in a new session (as Ray starts workers) and sleeps.
TREE = (
    "import subprocess, sys, time; "
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True); "
    "time.sleep(60)"
)


def _spawn_tree(tmp_path: Path, marker: str) -> int:
    env = {**os.environ, ENV_MARKER: marker}
    pid = spawn_process_group([sys.executable, "-c", TREE], env, tmp_path / "tree.log")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and len(processes_with_marker(marker)) < 2:
        time.sleep(0.05)
    return pid


def test_spawned_process_leads_its_own_group(tmp_path: Path) -> None:
    pid = _spawn_tree(tmp_path, "test-group")
    try:
        assert os.getpgid(pid) == pid
        assert os.getsid(pid) == pid
    finally:
        kill_tree_now(pid)


def test_kill_tree_now_ends_children_in_other_process_groups(tmp_path: Path) -> None:
    pid = _spawn_tree(tmp_path, "test-kill-tree")
    tree = processes_with_marker("test-kill-tree")
    assert len(tree) == 2
    killed = kill_tree_now(pid)
    assert set(killed) == {p.pid for p in tree}
    psutil.wait_procs(tree, timeout=5)
    assert not any(pid_alive(p.pid) for p in tree)


def test_marker_finds_an_orphan_and_end_processes_ends_it(tmp_path: Path) -> None:
    pid = _spawn_tree(tmp_path, "test-orphan")
    # Kill only the parent: the child is orphaned, as a vLLM worker is when its server dies.
    os.kill(pid, 9)
    psutil.wait_procs([psutil.Process(pid)], timeout=5) if pid_alive(pid) else None
    orphans = processes_with_marker("test-orphan")
    assert len(orphans) == 1 and orphans[0].pid != pid
    end_processes(orphans, grace_s=2)
    assert processes_with_marker("test-orphan") == []


# A leader that daemonizes a child into its own group and exits, as `ray start` without
# --block leaves the head's agents; the child's environment is no help (Ray's agents retitle
# themselves over it).
DAEMONIZE = "import os, time\nif os.fork() == 0:\n    time.sleep(60)\n"


def test_process_group_finds_what_daemonized_away_after_its_leader_died(tmp_path: Path) -> None:
    leader = spawn_process_group([sys.executable, "-c", DAEMONIZE], dict(os.environ), tmp_path / "group.log")
    psutil.wait_procs([psutil.Process(leader)], timeout=10) if pid_alive(leader) else None
    deadline = time.monotonic() + 10
    members = process_group(leader)
    while not members and time.monotonic() < deadline:
        time.sleep(0.05)
        members = process_group(leader)
    try:
        assert len(members) == 1 and members[0].pid != leader
        assert members[0].ppid() != leader, "orphaned: its parent is gone"
    finally:
        end_processes(members, grace_s=2)
    assert process_group(leader) == []


LISTENER = (
    "import socket, time; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); "
    "open({path!r}, 'w').write(str(s.getsockname()[1])); time.sleep(60)"
)


def test_a_start_time_read_across_a_clock_step_is_still_the_same_process() -> None:
    me = psutil.Process()
    # psutil adds the wall clock's boot time: a step of a second between two reads moves it.
    assert same_process(me.pid, me.create_time() + 1.0) is not None
    assert same_process(me.pid, me.create_time() - 1.0) is not None
    assert same_process(me.pid, me.create_time() + 60.0) is None


def test_a_server_is_known_by_its_pid_name_and_port_when_its_start_time_no_longer_matches(
    tmp_path: Path,
) -> None:
    port_file = tmp_path / "port"
    pid, created = spawn_server(
        [sys.executable, "-c", LISTENER.format(path=str(port_file))], os.environ, tmp_path / "l.log"
    )
    try:
        assert wait_until(lambda: port_file.exists() and port_file.read_text() != "", 10, 0.05) is not None
        port = int(port_file.read_text())
        name = psutil.Process(pid).name()
        assert same_server(pid, created, port, name) is not None
        stepped = created - 3600  # a recorded start an hour off: only the port and name tell
        assert same_server(pid, stepped, port, name) is not None
        assert same_server(pid, stepped, port + 1, name) is None, "another port: not our server"
        assert same_server(pid, stepped, port, "redis-server") is None, "another program: not our server"
    finally:
        os.killpg(pid, 9)
