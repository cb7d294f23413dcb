"""A harmless stand-in for ``python -m inferchaos.cli.main`` that the locustfile's --chaos starts.

Invoked as ``chaos_child.py run <experiment> --out <dir>``. It records when it started,
its argv, its working directory, and when it got SIGINT into the JSON file named by $FAKE_CHAOS_RECORD, and, like
the runner, writes ``<out>/<stamp>-fake/verdict.json`` before exiting (130 on SIGINT).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

RECORD_ENV = "FAKE_CHAOS_RECORD"


def _write(record: dict[str, Any]) -> None:
    Path(os.environ[RECORD_ENV]).write_text(json.dumps(record))


def main() -> None:
    """Wait (at most 60 s) for SIGINT, recording everything."""
    record: dict[str, Any] = {
        "argv": sys.argv[1:],
        "started_at": time.time(),
        "pgid": os.getpgid(0),
        "cwd": os.getcwd(),
        "sigint_at": None,
    }
    _write(record)
    out = Path(sys.argv[sys.argv.index("--out") + 1])

    def finish(status: str, code: int) -> None:
        run_dir = out / f"{time.strftime('%Y%m%d-%H%M%S')}-fake"
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "verdict.json").write_text(json.dumps({"experiment": "fake", "status": status}))
        sys.exit(code)

    def on_sigint(_signum: int, _frame: Any) -> None:
        record["sigint_at"] = time.time()
        _write(record)
        finish("aborted", 130)

    signal.signal(signal.SIGINT, on_sigint)
    deadline = time.monotonic() + 60.0
    while time.monotonic() < deadline:
        time.sleep(0.2)
    finish("passed", 0)


if __name__ == "__main__":
    main()
