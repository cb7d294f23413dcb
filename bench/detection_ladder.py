"""Who notices a fault first, and how fast: inferchaos' own judgement beside the platform's signals.

Injects each fault several times (default 5) through the runner, each run a short experiment
built here: a baseline, the fault for a fixed window, its revert and a recovery window, judged
by front-door SLOs (availability per 3 s window, canary TTFT p95 against the run's own
baseline). Every verdict's ``detection`` (steady_state/detection.py) says when each signal
first noticed, counted from the fault's injection; this prints, per fault and signal, how many
runs it noticed in and the median and max time to notice: inferchaos' SLOs and detectors
first, then the first failed canary request, vLLM /health, Ray's nodes and actors, Serve's
replica state (and Kubernetes readiness where there is a kube API).

Faults: vllm.hang_engine, vllm.slow_engine, ray.kill_serve_controller, vllm.kill_engine, and
ray.kill_gcs when that fault is registered and the environment accepts its plan (GCS fault
tolerance on); a fault that is not registered, or whose plan the environment refuses, is
skipped with one line on stderr. Progress goes to stderr, the table to stdout; every run
folder stays under --out for a second look (`inferchaos report`).

Run: .venv/bin/python bench/detection_ladder.py [--runs N] [--fault NAME ...] [--out DIR]
It attaches to the running local environment (`inferchaos env up` first) and, like a game
day, waits between runs until every replica serves again.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inferchaos.cli.gameday import wait_until_whole
from inferchaos.environments.local.env import LocalEnvironment
from inferchaos.errors import ConfigError, EnvironmentError_, InferchaosError
from inferchaos.faults.registry import get_fault
from inferchaos.run.runner import RunOptions, plan_run, run_experiment
from inferchaos.run.spec import ExperimentSpec, ensure_experiment_is_valid
from inferchaos.steady_state.detection import SignalDetection, signal_title

# (fault, its arguments): replica 0 for the replica faults, so each run hits the same one.
FAULTS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("vllm.hang_engine", {"replica": 0}),
    ("vllm.slow_engine", {"replica": 0}),
    # Their reverts wait for the platform; the recovery window must end before that wait does.
    ("ray.kill_serve_controller", {"recover_timeout_s": 150}),
    ("vllm.kill_engine", {"replica": 0}),
    ("ray.kill_gcs", {"recover_timeout_s": 150}),
)


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def experiment(
    fault: str, arguments: Mapping[str, Any], baseline_s: float, during_s: float
) -> dict[str, Any]:
    """A Chaos Toolkit experiment (with inferchaos' keys) that injects ``fault`` for ``during_s``."""
    layer, verb = fault.split(".", 1)
    module = f"inferchaos.ctk.{layer}_actions"
    return {
        "version": "1.0.0",
        "title": f"bench: who notices {fault}, and when",
        "description": "Built by bench/detection_ladder.py; front-door SLOs only, so that every fault is judged alike.",
        "tags": ["inferchaos", "bench"],
        "configuration": {},
        "environment": {"name": "local"},
        "baseline": {"duration_s": baseline_s},
        "steady-state-hypothesis": {
            "title": "The front door serves completions",
            "probes": [
                {
                    "type": "probe",
                    "name": "front-door-serves",
                    "tolerance": True,
                    "provider": {
                        "type": "python",
                        "module": "inferchaos.ctk.providers",
                        "func": "front_door_serves",
                    },
                }
            ],
        },
        "method": [
            {
                "type": "action",
                "name": verb.replace("_", "-"),
                "provider": {"type": "python", "module": module, "func": verb, "arguments": dict(arguments)},
                "pauses": {"after": during_s},
            }
        ],
        "rollbacks": [
            {
                "type": "action",
                "name": f"rollback-{verb.replace('_', '-')}",
                "provider": {"type": "python", "module": module, "func": f"rollback_{verb}"},
            }
        ],
        "slos": [
            {
                "name": "serves_before",
                "probe": "canary.success",
                "agg": "mean",
                "op": ">=",
                "threshold": 0.9,
                "phase": "baseline",
            },
            {
                "name": "availability",
                "probe": "canary.success",
                "agg": "mean",
                "op": ">=",
                "threshold": 0.9,
                "phase": "during",
                "window_s": 3,
            },
            {
                "name": "canary_ttft_p95",
                "probe": "canary.ttft_s",
                "agg": "p95",
                "op": "<=",
                "threshold": {"times_baseline": 5, "at_least": 0.5},
                "phase": "during",
                "window_s": 5,
            },
            {
                "name": "serves_after",
                "probe": "canary.success",
                "agg": "mean",
                "op": ">=",
                "threshold": 0.9,
                "phase": "recovery",
                "window_s": 5,
            },
        ],
        "recovery": {"within_s": 120, "hold_s": 5, "steady": ["serves_after"]},
    }


def experiment_spec(
    fault: str, arguments: Mapping[str, Any], baseline_s: float, during_s: float
) -> ExperimentSpec:
    """:func:`experiment`, validated as any experiment file is (ConfigError when it is not valid)."""
    name = f"detection_{fault.replace('.', '_')}"
    return ensure_experiment_is_valid(
        experiment(fault, arguments, baseline_s, during_s), Path(f"{name}.yaml")
    )


@dataclass(frozen=True)
class SignalSummary:
    """One line of the table: how one signal noticed one fault over the runs."""

    fault: str
    layer: str
    signal: str
    runs: int
    noticed: int
    median_s: float | None
    max_s: float | None


def summarize(results: Mapping[str, Sequence[Sequence[SignalDetection]]]) -> list[SignalSummary]:
    """Per fault (in the given order) and signal (in the order the runs list them), over every run.

    A run that did not list a signal (its environment cannot have it) is not counted for it.
    """
    summaries = []
    for fault, runs in results.items():
        signals: dict[str, tuple[str, list[float | None]]] = {}
        for detections in runs:
            for d in detections:
                signals.setdefault(d.signal, (d.layer, []))[1].append(d.noticed_after_s)
        for signal, (layer, times) in signals.items():
            noticed = [t for t in times if t is not None]
            summaries.append(
                SignalSummary(
                    fault,
                    layer,
                    signal,
                    len(times),
                    len(noticed),
                    statistics.median(noticed) if noticed else None,
                    max(noticed) if noticed else None,
                )
            )
    return summaries


def _seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:.1f} s"


def format_table(summaries: Sequence[SignalSummary]) -> str:
    """The table this prints: fault, layer, signal, runs that noticed, median and max time to notice."""
    header = ("fault", "layer", "signal", "noticed", "median", "max")
    lines = [
        (
            s.fault,
            s.layer,
            signal_title(s.signal),
            f"{s.noticed}/{s.runs}",
            _seconds(s.median_s),
            _seconds(s.max_s),
        )
        for s in summaries
    ]
    widths = [max(len(row[i]) for row in (header, *lines)) for i in range(len(header))]

    def line(row: Sequence[str]) -> str:
        # Names to the left, numbers to the right.
        return "  ".join(
            c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )

    out = [line(header)]
    for index, (summary, row) in enumerate(zip(summaries, lines, strict=True)):
        if index > 0 and summary.fault != summaries[index - 1].fault:
            out.append("")  # a blank line between faults
        out.append(line(row).rstrip())
    return "\n".join(out)


def bench(args: argparse.Namespace) -> dict[str, list[list[SignalDetection]]]:
    env = LocalEnvironment()
    results: dict[str, list[list[SignalDetection]]] = {}
    wanted = set(args.fault or [name for name, _ in FAULTS])
    for fault, arguments in FAULTS:
        if fault not in wanted:
            continue
        try:
            get_fault(fault)
        except ConfigError:
            _say(f"{fault}: not registered in this inferchaos; skipped")
            continue
        spec = experiment_spec(fault, arguments, args.baseline, args.during)
        wait_until_whole(env, say=_say)
        try:
            plan_run(spec, env)
        except (ConfigError, EnvironmentError_) as e:
            _say(f"{fault}: the environment refuses it ({e}); skipped")
            continue
        for index in range(args.runs):
            wait_until_whole(env, say=_say)
            run_dir = args.out / f"{fault}-{index + 1}"
            _say(f"{fault}: run {index + 1}/{args.runs} -> {run_dir}")
            options = RunOptions(out_dir=args.out, interval_s=args.interval, run_dir=run_dir)
            try:
                verdict = run_experiment(spec, env, options, progress=lambda m: _say(f"  {m}"))
            except InferchaosError as e:
                _say(f"{fault}: run {index + 1} could not run: {e}")
                continue
            if verdict is None or not verdict.detection:
                _say(
                    f"{fault}: run {index + 1} injected nothing ({verdict.reason if verdict else 'dry run'})"
                )
                continue
            _say(f"  {verdict.status}: {verdict.reason}")
            results.setdefault(fault, []).append(list(verdict.detection))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5, help="injections of each fault (default 5)")
    parser.add_argument(
        "--fault", action="append", choices=[name for name, _ in FAULTS], help="only this fault (repeatable)"
    )
    parser.add_argument(
        "--baseline", type=float, default=10.0, help="baseline seconds of each run (default 10)"
    )
    parser.add_argument(
        "--during", type=float, default=15.0, help="seconds each fault stays active (default 15)"
    )
    parser.add_argument(
        "--interval", type=float, default=1.0, help="sampling interval in seconds (default 1)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("runs") / f"bench-detection-{time.strftime('%Y%m%d-%H%M%S')}",
        help="folder for the run folders (default runs/bench-detection-<time>)",
    )
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    results = bench(args)
    if not results:
        _say("no fault was injected")
        return 1
    print(format_table(summarize(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
