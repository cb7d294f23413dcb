"""How much of a game day is harness overhead rather than the windows the scenarios need.

Runs `inferchaos gameday` (the default suite on the local environment) and prints, measured in
that one run:
- the game day's wall time, split into environment start-up (before the first run), the runs,
  and the tail (index and environment tear-down);
- the inherent time of each run: its baseline, its fault window (injection to revert) and its
  recovery window (revert until recovery was confirmed: the steady SLOs recovered and then
  held for hold_s, which a run must wait through to know it recovered);
- the overhead ratio of the runs: (runs' wall - inherent) / runs' wall, and for reference the
  same over the whole wall time.

Targets: overhead at most 10% of the wall time beyond the inherent windows; a full local
game day within 20 minutes on 2 cores.

Run: .venv/bin/python bench/gameday_overhead.py [--out DIR]   (about 6 minutes)
It starts the local environment unless one is up (then start-up and tear-down are ~0).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RunWindows:
    name: str
    status: str
    started_at: float
    ended_at: float
    baseline_s: float
    fault_s: float
    recovery_s: float

    @property
    def inherent_s(self) -> float:
        return self.baseline_s + self.fault_s + self.recovery_s


def _windows(verdict_path: Path) -> RunWindows | None:
    verdict = json.loads(verdict_path.read_text())
    phases, timing = verdict["phases"], verdict["timing"]
    start, injected, reverted = phases.get("baseline_start"), phases.get("injected"), phases.get("reverted")
    if start is None or injected is None or reverted is None:
        return None
    confirmed = timing.get("recovery_confirmed_at")
    recovery = (confirmed - reverted) if confirmed else (timing.get("time_to_recover_s") or 0.0)
    return RunWindows(
        verdict["experiment"],
        verdict["status"],
        verdict["started_at"],
        verdict["ended_at"],
        injected - start,
        reverted - injected,
        recovery,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/bench-gameday"))
    args = parser.parse_args()
    began = time.time()
    result = subprocess.run(
        [sys.executable, "-m", "inferchaos.cli.main", "gameday", "--out", str(args.out)],
        capture_output=True,
        text=True,
    )
    finished = time.time()
    wall = finished - began
    day = sorted(args.out.glob("gameday-*"))[-1]
    runs = [w for w in (_windows(p) for p in sorted(day.glob("*/verdict.json"))) if w is not None]
    print(f"gameday exit code: {result.returncode}")
    if not runs:
        print(result.stdout[-3000:], result.stderr[-3000:])
        return
    print(
        f"{'scenario':18s} {'status':8s} {'baseline':>9s} {'fault':>7s} {'recovery':>9s} {'run wall':>9s} {'overhead':>9s}"
    )
    for w in runs:
        run_wall = w.ended_at - w.started_at
        print(
            f"{w.name:18s} {w.status:8s} {w.baseline_s:8.1f}s {w.fault_s:6.1f}s {w.recovery_s:8.1f}s "
            f"{run_wall:8.1f}s {run_wall - w.inherent_s:8.1f}s"
        )
    first, last = min(w.started_at for w in runs), max(w.ended_at for w in runs)
    span = last - first
    inherent = sum(w.inherent_s for w in runs)
    print(f"game-day wall time                  : {wall:7.1f} s  (target <= 1200 s)")
    print(f"  before the first run (start-up)   : {first - began:7.1f} s")
    print(f"  the runs, first start to last end : {span:7.1f} s")
    print(f"  after the last run (index, down)  : {finished - last:7.1f} s")
    print(f"inherent windows                    : {inherent:7.1f} s")
    print(f"overhead / runs' wall               : {(span - inherent) / span:7.1%}  (target <= 10%)")
    print(f"overhead / whole wall (for reference): {(wall - inherent) / wall:7.1%}")


if __name__ == "__main__":
    main()
