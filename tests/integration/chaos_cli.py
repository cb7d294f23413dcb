"""Run an experiment with Chaos Toolkit's own `chaos run` and read back its journal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inferchaos.faults.ledger import Ledger


@dataclass(frozen=True)
class ChaosRun:
    """What one `chaos run` left: its exit code, output and journal."""

    returncode: int
    output: str
    journal: dict[str, Any]

    def hypothesis(self, when: str) -> dict[str, Any]:
        """The steady-state hypothesis run ``before`` or ``after`` the method."""
        state = self.journal["steady_states"][when]
        assert state is not None, f"no hypothesis {when} the method:\n{self.output[-3000:]}"
        return state

    def outputs(self, when: str) -> dict[str, Any]:
        """Each hypothesis probe's output by name."""
        return {p["activity"]["name"]: p["output"] for p in self.hypothesis(when)["probes"]}


def chaos_run(experiment: Path, home: Path, folder: Path, timeout_s: float = 600) -> ChaosRun:
    """`chaos run --rollback-strategy=always` of ``experiment`` in ``folder`` (where its journal and
    live timeline go), against the environment recorded under ``home``."""
    folder.mkdir(parents=True, exist_ok=True)
    journal = folder / "journal.json"
    result = subprocess.run(
        [
            str(Path(sys.executable).with_name("chaos")),
            "run",
            "--rollback-strategy=always",
            "--journal-path",
            str(journal),
            str(experiment),
        ],
        env={**os.environ, "INFERCHAOS_HOME": str(home)},
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    output = result.stdout + result.stderr
    assert journal.exists(), f"chaos run wrote no journal (exit {result.returncode}):\n{output[-3000:]}"
    return ChaosRun(result.returncode, output, json.loads(journal.read_text()))


def assert_nothing_left(home: Path) -> None:
    """The ledger of the environment under ``home`` holds no live injection."""
    entries = Ledger(home / "ledger").entries()
    assert not entries, f"left injected after the rollbacks: {[h.fault for h in entries]}"
