"""The squatter process itself: its ready line, the memory it really holds, and a clean exit on SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator

import psutil
import pytest

from inferchaos.faults.device.cuda import cuda_available
from inferchaos.faults.device.launch import PROJECT_ROOT
from tests.skips import host_lacks

MIB = 1024 * 1024
SQUAT_BYTES = 8 * MIB


def _squatter(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "inferchaos.faults.device.squatter", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=PROJECT_ROOT,
    )


@pytest.fixture
def host_squatter() -> Iterator[subprocess.Popen[str]]:
    proc = _squatter("--backend", "host", "--device", "host:0", "--bytes", str(SQUAT_BYTES))
    yield proc
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=5)


def _first_line(proc: subprocess.Popen[str]) -> dict:
    assert proc.stdout is not None
    return json.loads(proc.stdout.readline())


def test_host_squatter_holds_its_bytes_until_sigterm_then_exits_zero(
    host_squatter: subprocess.Popen[str],
) -> None:
    ready = _first_line(host_squatter)
    assert ready["ready"] is True
    assert ready["allocated_bytes"] == SQUAT_BYTES
    assert ready["pid"] == host_squatter.pid

    # Measured from outside: the pages were touched, so the kernel charges them to the process.
    rss_now = psutil.Process(host_squatter.pid).memory_info().rss
    assert rss_now - ready["rss_before_bytes"] >= 0.9 * SQUAT_BYTES

    host_squatter.send_signal(signal.SIGTERM)
    assert host_squatter.wait(timeout=10) == 0
    assert host_squatter.stderr is not None
    assert f"released {SQUAT_BYTES} bytes on SIGTERM" in host_squatter.stderr.read()


def test_host_squatter_also_stops_cleanly_on_sigint(host_squatter: subprocess.Popen[str]) -> None:
    assert _first_line(host_squatter)["ready"] is True
    host_squatter.send_signal(signal.SIGINT)
    assert host_squatter.wait(timeout=10) == 0


def test_host_squatter_refuses_more_than_half_the_machine() -> None:
    machine = psutil.virtual_memory().total
    proc = _squatter("--backend", "host", "--device", "host:0", "--bytes", str(machine))
    line = _first_line(proc)
    assert proc.wait(timeout=10) == 3
    assert line["ready"] is False
    assert "more than 50% of this machine" in line["error"]


def test_host_squatter_refuses_when_not_inside_its_budget() -> None:
    proc = _squatter(
        "--backend", "host", "--device", "host:0", "--bytes", str(MIB), "--budget", "inferchaos-x-replica-0"
    )
    line = _first_line(proc)
    assert proc.wait(timeout=10) == 3
    assert "not inside memory budget inferchaos-x-replica-0" in line["error"]


def test_cuda_squatter_without_a_driver_says_so_and_exits_3() -> None:
    usable, _ = cuda_available()
    if usable:
        host_lacks("this machine has a CUDA driver; the no-driver path cannot be shown here")
    proc = _squatter("--backend", "cuda", "--device", "0", "--bytes", str(MIB))
    line = _first_line(proc)
    assert proc.wait(timeout=10) == 3
    assert line["ready"] is False
    assert "no CUDA driver (libcuda.so.1) on this machine" in line["error"]
