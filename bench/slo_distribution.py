"""The healthy distribution behind each SLO threshold, read from run folders.

A threshold is justified by what healthy runs measured: this prints, per experiment and SLO,
every run's observed value (as verdict.json recorded it) and, for each latency SLO, the ratio
of that value to the same aggregate of the same probe over the run's own baseline: the number
a baseline-relative threshold (``{times_baseline: N}``) is compared with. A threshold needs
a margin over the largest healthy value, and a negative control must land beyond it.

Run: .venv/bin/python bench/slo_distribution.py RUNS_DIR [RUNS_DIR ...]
It walks the folders for run folders (a verdict.json beside a timeline.csv), healthy or not;
pass only folders of runs on a healthy platform, or read the status column.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path

from inferchaos.run.spec import load_and_validate
from inferchaos.steady_state.evaluation import baseline_value, evaluate_slo, phase_windows
from inferchaos.steady_state.slo import Slo
from inferchaos.steady_state.timeline import read_timeline

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"
LATENCY_PROBES = ("canary.ttft_s", "canary.itl_s", "canary.e2e_s", "load.ttft_p50_s", "load.ttft_p95_s")


@dataclass(frozen=True)
class Observation:
    """One SLO in one run: what was observed, and its ratio to the run's baseline."""

    run: str
    status: str
    observed: float | None
    ratio: float | None


def _observe(run_dir: Path) -> tuple[str, dict[str, Observation]] | None:
    verdict = json.loads((run_dir / "verdict.json").read_text())
    experiment = verdict.get("experiment", "")
    path = EXPERIMENTS / f"{experiment}.yaml"
    if not path.is_file():
        return None
    spec = load_and_validate(path)
    timeline = read_timeline(run_dir / "timeline.csv")
    windows = phase_windows(timeline)
    found: dict[str, Observation] = {}
    for slo in spec.slos.slos:
        # Judge a fixed threshold as written; judge a relative one against its own baseline.
        result = evaluate_slo(timeline, slo, windows)
        ratio = None
        if slo.probe in LATENCY_PROBES and result.observed is not None:
            unscaled: Slo = replace(slo, scale=None)
            base = baseline_value(timeline, unscaled, windows)
            ratio = result.observed / base if base else None
        found[slo.name] = Observation(run_dir.name, str(verdict.get("status")), result.observed, ratio)
    return experiment, found


def _summary(values: list[float]) -> str:
    if not values:
        return "-"
    return f"min {min(values):.3g}  median {statistics.median(values):.3g}  max {max(values):.3g}  (n={len(values)})"


def main(argv: list[str] | None = None) -> int:
    """Print the distribution of every SLO over the run folders under the given directories."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "dirs", nargs="+", type=Path, help="folders holding run folders, searched recursively"
    )
    args = parser.parse_args(argv)
    by_experiment: dict[str, dict[str, list[Observation]]] = defaultdict(lambda: defaultdict(list))
    for folder in args.dirs:
        for verdict in sorted(folder.rglob("verdict.json")):
            if not (verdict.parent / "timeline.csv").is_file():
                continue
            observed = _observe(verdict.parent)
            if observed is None:
                continue
            experiment, slos = observed
            for name, observation in slos.items():
                by_experiment[experiment][name].append(observation)
    if not by_experiment:
        print("no run folders of known experiments found", file=sys.stderr)
        return 1
    for experiment in sorted(by_experiment):
        print(f"== {experiment}")
        for name, observations in by_experiment[experiment].items():
            values = [o.observed for o in observations if o.observed is not None]
            ratios = [o.ratio for o in observations if o.ratio is not None]
            statuses = sorted({o.status for o in observations})
            print(f"  {name:28} observed: {_summary(values)}  [{', '.join(statuses)}]")
            if ratios:
                print(f"  {'':28} x baseline: {_summary(ratios)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
