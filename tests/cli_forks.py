"""Many `inferchaos` command lines, each in a process of its own, for the price of one import.

A driver process imports the CLI once, then forks one child per command line. Each child is a
separate process, with its own exit code, stdout, stderr, working folder and INFERCHAOS_HOME,
started from the state a fresh `inferchaos` process has once its imports are done: nothing
ran in the driver before the fork. Importing the CLI costs most of a refused command's time,
so a corpus of bad inputs checked this way costs one import instead of one per case.

Run as ``python -m tests.cli_forks``: a JSON list of jobs on stdin, a JSON list of exit codes
on stdout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class CliJob:
    """One command line: its arguments, where it runs, and the files its output goes to."""

    args: list[str]
    cwd: str
    home: str
    stdout: str
    stderr: str


def _child(job: CliJob) -> int:
    from inferchaos.cli.main import main

    os.chdir(job.cwd)
    os.environ["INFERCHAOS_HOME"] = job.home
    for fd, path in ((1, job.stdout), (2, job.stderr)):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(target, fd)
        os.close(target)
    sys.argv = ["inferchaos", *job.args]
    try:
        main()
        code = 0
    except SystemExit as done:
        if done.code is None or isinstance(done.code, int):
            code = done.code or 0
        else:
            print(done.code, file=sys.stderr)
            code = 1
    except BaseException:  # noqa: BLE001 - what Python itself does with an uncaught exception
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    return code


def _drive(jobs: list[CliJob]) -> list[int]:
    import inferchaos.cli.main  # noqa: F401 - imported once, before any fork

    codes: list[int] = []
    for job in jobs:
        pid = os.fork()
        if pid == 0:
            os._exit(_child(job))
        _, status = os.waitpid(pid, 0)
        codes.append(os.waitstatus_to_exitcode(status))
    return codes


def run_cli_jobs(jobs: list[CliJob], timeout_s: float = 600) -> list[int]:
    """Run each job's `inferchaos` command line in its own forked process; their exit codes."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.cli_forks"],
        input=json.dumps([asdict(job) for job in jobs]),
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the CLI fork driver failed ({done.returncode}): {done.stderr[-2000:]}")
    codes: list[int] = json.loads(done.stdout)
    return codes


if __name__ == "__main__":
    print(json.dumps(_drive([CliJob(**job) for job in json.load(sys.stdin)])))
