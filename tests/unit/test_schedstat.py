"""A process tree's CPU time and run-queue wait, read from the real /proc of this test."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

from inferchaos.primitives.schedstat import TreeSchedCounter, parse_schedstat


def test_a_schedstat_line_gives_run_and_wait_nanoseconds() -> None:
    assert parse_schedstat("379879507 3327340912 62\n") == (379879507, 3327340912)
    assert parse_schedstat("") is None
    assert parse_schedstat("12 x 3") is None


def _spin(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_the_totals_cover_child_processes() -> None:
    counter = TreeSchedCounter(os.getpid())
    before = counter.read()
    # A child that spins on CPU for 0.3 s of its own CPU time, then sleeps until ended.
    child = subprocess.Popen(
        [sys.executable, "-c", "import time\nend = time.process_time() + 0.3\n"
         "while time.process_time() < end: pass\nprint('spun', flush=True)\ntime.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "spun"
        after = counter.read()
    finally:
        child.kill()
        child.wait()
    assert after.cpu_s - before.cpu_s >= 0.3


def test_a_thread_that_ends_takes_nothing_off_the_totals() -> None:
    counter = TreeSchedCounter(os.getpid())
    worker = threading.Thread(target=_spin, args=(0.2,))
    worker.start()
    worker.join()
    # The thread is gone: its counters went with it, but not from the totals, which ran it.
    counter.read()
    ran = threading.Thread(target=_spin, args=(0.2,))
    ran.start()
    during = counter.read()
    ran.join()
    after = counter.read()
    assert after.cpu_s >= during.cpu_s and after.wait_s >= during.wait_s
