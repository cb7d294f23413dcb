"""How much of a game day is harness overhead rather than the windows the scenarios need.

Runs `inferchaos gameday` (the default suite on the local environment) and prints, measured in
that one run:
- the game day's wall time (environment start-up included, and without it);
- the inherent time: each scenario's baseline, fault window (injection to revert) and
  measured recovery (revert to recovered);
- the overhead ratio: (wall - inherent) / wall, with and without environment start-up.

Targets: overhead at most 10% of the wall time beyond the inherent windows; a full local
game day within 20 minutes on 2 cores.

Run: .venv/bin/python bench/gameday_overhead.py [--out DIR]   (about 8-10 minutes)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/bench-gameday"))
    args = parser.parse_args()
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "experiments.cli", "gameday", "--out", str(args.out)], capture_output=True, text=True
    )
    wall = time.monotonic() - started
    day = sorted(args.out.glob("gameday-*"))[-1]
    inherent = 0.0
    first_baseline = None
    rows = []
    for verdict_path in sorted(day.glob("*/verdict.json")):
        verdict = json.loads(verdict_path.read_text())
        phases = verdict["phases"]
        start, injected, reverted = phases.get("baseline_start"), phases.get("injected"), phases.get("reverted")
        ttr = verdict["timing"].get("time_to_recover_s") or 0.0
        if start is None or injected is None or reverted is None:
            continue
        first_baseline = min(first_baseline or start, start)
        windows = (injected - start) + (reverted - injected) + ttr
        inherent += windows
        rows.append((verdict["experiment"], verdict["status"], injected - start, reverted - injected, ttr,
                     verdict["ended_at"] - verdict["started_at"]))  # fmt: skip
    print(f"gameday exit code: {result.returncode}")
    print(f"{'scenario':18s} {'status':8s} {'baseline':>9s} {'fault':>7s} {'recovery':>9s} {'run wall':>9s}")
    for name, status, base, fault, ttr, run_wall in rows:
        print(f"{name:18s} {status:8s} {base:8.1f}s {fault:6.1f}s {ttr:8.1f}s {run_wall:8.1f}s")
    scenarios_wall = wall - (first_baseline - (time.time() - wall)) if first_baseline else wall
    print(f"game-day wall time                 : {wall:7.1f} s  (target <= 1200 s)")
    print(f"  of which before the first baseline: {wall - scenarios_wall:7.1f} s (environment start-up)")
    print(f"inherent windows                   : {inherent:7.1f} s")
    print(f"overhead / wall                    : {(wall - inherent) / wall:7.1%}")
    print(f"overhead / wall, start-up excluded : {(scenarios_wall - inherent) / scenarios_wall:7.1%}  (target <= 10%)")


if __name__ == "__main__":
    main()
