"""Headless Locust runs for the load tests.

Locust patches its process with gevent on import, so it only ever runs here as a subprocess,
in its own session so that a test can end it by process group.
"""

from __future__ import annotations

import csv
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LOCUSTFILE = REPO / "inferchaos" / "load" / "locustfile.py"
FAKE_CHILD = Path(__file__).resolve().with_name("chaos_child.py")
LOCUST_BOUND_S = 60.0
CHAOS_AT_S = 2.0
CHAOS_RUN_TIME_S = 5
FLAKY_MODEL = "explicit-model"


@dataclass
class LocustRun:
    """One headless Locust subprocess and what it left behind."""

    argv: list[str]
    proc: subprocess.Popen[bytes]
    csv_prefix: Path
    output_path: Path
    launched_at: float

    def wait(self) -> LocustRun:
        """Wait for Locust to end (bounded); a run that hangs is killed and fails the test."""
        try:
            self.proc.wait(timeout=LOCUST_BOUND_S)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
            pytest.fail(
                f"Locust did not end within {LOCUST_BOUND_S:g} s: {' '.join(self.argv)}\n{self.output}"
            )
        return self

    @property
    def output(self) -> str:
        return self.output_path.read_text(errors="replace")

    def rows(self, suffix: str = "_stats_history.csv") -> list[dict[str, str]]:
        with open(f"{self.csv_prefix}{suffix}", newline="") as f:
            return list(csv.DictReader(f))

    def last_row(self, name: str, request_type: str = "LLM") -> dict[str, str]:
        rows = [r for r in self.rows() if r["Name"] == name and r["Type"] == request_type]
        assert rows, f"no {request_type} {name} row in the stats history\n{self.output}"
        return rows[-1]

    def log_time(self, pattern: str) -> float:
        """Epoch seconds of the first log line matching ``pattern``."""
        for line in self.output.splitlines():
            if re.search(pattern, line):
                stamp = re.match(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]", line)
                assert stamp, line
                return datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        raise AssertionError(f"no log line matches {pattern!r}\n{self.output}")


def start_locust(
    host: str, folder: Path, *args: str, env: dict[str, str] | None = None, cwd: Path = REPO
) -> LocustRun:
    """Start ``locust -f inferchaos/load/locustfile.py --headless`` against ``host`` with CSVs in ``folder``.

    It runs in ``cwd``: the repository, or (to show nothing depends on it) another folder.
    """
    folder.mkdir(parents=True, exist_ok=True)
    prefix = folder / "locust"
    argv = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(LOCUSTFILE),
        "--headless",
        "--only-summary",
        "--host",
        host,
        "--csv",
        str(prefix),
        "--csv-full-history",
        *args,
    ]
    output = folder / "output.txt"
    with open(output, "wb") as out:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
    return LocustRun(argv, proc, prefix, output, time.time())


@dataclass
class Runs:
    """The session's Locust runs (see conftest.runs) and the chaos run's files."""

    steady: LocustRun
    flaky: LocustRun
    spike: LocustRun
    chaos: LocustRun
    chaos_record: Path
    chaos_out: Path
    chaos_experiment: Path
