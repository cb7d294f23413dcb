"""A worker whose `ray start` timed out before its raylet registered is started again; no other exit is.

The wrapper is run for real, as start_node runs it: a shell leading its own process group, its
output appended to the node's log. What it wraps here is a shell command that writes what
`ray start` writes when its raylet did not register in time (Ray's own start-up is the
integration tests'), and that leaves a process behind, as a failed start leaves its raylet.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from inferchaos.environments.local.ray_cluster import STARTUP_ATTEMPTS, retrying_startup
from inferchaos.primitives.processes import pid_alive

RAY_TIMEOUT_LINE = (
    "Exception: The current node timed out during startup. This could happen because some of the "
    "raylet failed to startup or the GCS has become overloaded."
)


def _start(tries: Path, log: Path, fail_first: int, then: str) -> subprocess.Popen[bytes]:
    """The wrapper around a start that times out ``fail_first`` times (each leaving a ``sleep``
    in the group, its pid written to ``tries``), then runs ``then``."""
    start = (
        f"n=$(wc -l < {tries}); sleep 300 & echo $! >> {tries}; "
        f'if [ "$n" -lt {fail_first} ]; then echo "{RAY_TIMEOUT_LINE}"; exit 1; fi; {then}'
    )
    tries.touch()
    with open(log, "ab") as out:
        return subprocess.Popen(
            retrying_startup(["/bin/sh", "-c", start], log),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    nodes: list[subprocess.Popen[bytes]] = []
    yield nodes
    for node in nodes:
        try:
            os.killpg(node.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        node.wait(timeout=10)


def _pids(tries: Path) -> list[int]:
    return [int(line) for line in tries.read_text().split()]


def test_a_start_that_timed_out_is_tried_again_and_what_it_left_is_killed_first(
    tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    tries, log = tmp_path / "tries", tmp_path / "ray-worker-3.log"
    # The log already holds an earlier node's timeout: only what this start wrote counts.
    log.write_text(RAY_TIMEOUT_LINE + "\n")
    node = _start(tries, log, fail_first=1, then="exit 7")
    started.append(node)
    assert node.wait(timeout=30) == 7, log.read_text()
    first, second = _pids(tries)
    assert not pid_alive(first), "the failed start's leftover must be gone before the next try"
    assert pid_alive(second), "what the registered start runs is the node's, and is left alone"
    assert f"try 2 of {STARTUP_ATTEMPTS}" in log.read_text()


def test_a_node_that_started_and_ended_later_is_not_started_again(
    tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    tries, log = tmp_path / "tries", tmp_path / "ray-worker-1.log"
    node = _start(tries, log, fail_first=0, then="echo 'the node was marked dead'; exit 1")
    started.append(node)
    assert node.wait(timeout=30) == 1
    assert len(_pids(tries)) == 1, log.read_text()


def test_the_retries_are_bounded_and_the_last_failure_is_the_nodes(
    tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    tries, log = tmp_path / "tries", tmp_path / "ray-worker-2.log"
    node = _start(tries, log, fail_first=STARTUP_ATTEMPTS + 5, then="exit 0")
    started.append(node)
    assert node.wait(timeout=30) == 1
    pids = _pids(tries)
    assert len(pids) == STARTUP_ATTEMPTS, log.read_text()
    # Nothing of the last try is left to register later, with no `ray start` watching it.
    assert not any(pid_alive(pid) for pid in pids), pids
