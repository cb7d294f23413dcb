"""Would the platform's alerts have caught each fault, and before its users did?

Runs `inferchaos gameday --prometheus` (the local environment with its Prometheus, which
evaluates deploy/prometheus's alerting rules for the environment's labels) or reads a game day
folder already written, and prints per scenario, from that one day:
- its first alert after the injection, that alert's layer and the layer of the fault;
- when it fired, counted from the injection;
- its lead over the first failed user request (negative: users failed first; "-" where no
  user request failed);
- alerts already firing before the injection (a false alarm at baseline).

The goal: an alert of the fault's layer before the first failed user request in every scenario
where users fail at all, and no alert firing before any injection.

Run: .venv/bin/python bench/alert_lead.py [--day DIR] [--suite default]   (a game day: ~12 minutes)
Without --day it runs the game day into a temporary folder; the environment must not be up
(the game day starts it with --prometheus and takes it down).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path


def run_day(out: Path, suite: str) -> Path:
    """Run the game day with --prometheus into ``out``; its day folder."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "inferchaos.cli.main",
            "gameday",
            "--suite",
            suite,
            "--prometheus",
            "--out",
            str(out),
        ],
        check=False,
    )
    days = sorted(out.glob("gameday-*"))
    if not days:
        raise SystemExit(f"the game day wrote no day folder under {out}")
    return days[-1]


def rows(day: Path) -> list[tuple[str, ...]]:
    """One row per run of the day: scenario, fault layer, first alert, its layer, after, lead, early alarms."""
    out = []
    for verdict_path in sorted(day.glob("*/verdict.json")):
        verdict = json.loads(verdict_path.read_text())
        fault_layer = (verdict.get("fault") or {}).get("layer", "-")
        detections = verdict.get("detection") or []
        alerts = [d for d in detections if str(d.get("signal", "")).startswith("alert.")]
        early = sorted(
            {d["signal"].removeprefix("alert.") for d in alerts if (d.get("noticed_after_s") or 0) < 0}
        )
        fired = sorted(
            (d for d in alerts if d.get("noticed_after_s") is not None and d["noticed_after_s"] >= 0),
            key=lambda d: d["noticed_after_s"],
        )
        if not fired:
            read = any(d.get("detail") == "no alert fired" for d in detections)
            out.append(
                (
                    verdict["experiment"],
                    fault_layer,
                    "no alert fired" if read else "alerts not read",
                    "-",
                    "-",
                    "-",
                    ", ".join(early) or "-",
                )
            )
            continue
        first = fired[0]
        lead = "-" if first.get("lead_s") is None else f"{first['lead_s']:+.1f} s"
        out.append(
            (
                verdict["experiment"],
                fault_layer,
                first["signal"].removeprefix("alert."),
                first["layer"],
                f"{first['noticed_after_s']:.1f} s",
                lead,
                ", ".join(early) or "-",
            )
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--day", type=Path, help="a game day folder already written (gameday-...)")
    parser.add_argument("--suite", default="default")
    args = parser.parse_args()
    day = args.day or run_day(Path(tempfile.mkdtemp(prefix="alert-lead-")), args.suite)
    header = (
        "scenario",
        "fault layer",
        "first alert",
        "its layer",
        "after injection",
        "lead over users",
        "firing before injection",
    )
    table = [header, *rows(day)]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for r in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)))
    print(f"\nday: {day}")


if __name__ == "__main__":
    main()
