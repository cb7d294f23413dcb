"""Helpers of the report tests: the recorded run folders and edits of their copies."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

FIXTURE_RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"
RUN_NAMES = ("passed_kv_flood", "failed_kv_flood", "aborted_pg_stall", "probe_error_node_loss")


def copy_run(name: str, into: Path) -> Path:
    """A private copy of the recorded run folder ``name`` under ``into``."""
    target = into / name
    shutil.copytree(FIXTURE_RUNS / name, target)
    return target


def read_json(path: Path) -> dict[str, Any]:
    """The JSON document at ``path``."""
    return json.loads(path.read_text())


def edit_json(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Apply ``change`` to the JSON document at ``path`` in place."""
    data = read_json(path)
    change(data)
    path.write_text(json.dumps(data, indent=2))
