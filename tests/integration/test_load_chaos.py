"""Locust load during a chaos run, on the real local environment (`inferchaos run --load`).

The load's TTFT, read back from Locust as ``load.ttft_p95_s``, must rise while the KV cache
is flooded and come back after the revert; and the Locust process group must be gone when
the runner ends, whether it finished, was interrupted, or was killed.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
import yaml

from inferchaos.environments.local.env import LocalEnvironment
from inferchaos.faults.ledger import Ledger
from inferchaos.steady_state.timeline import Mark, Timeline, read_timeline

pytestmark = pytest.mark.integration

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"
RUN_BOUND_S = 600.0
# The canary's recovery floor while Locust loads the platform (see _kv_flood_holding_recovery).
LOADED_TTFT_FLOOR_S = 1.0


def _runner(
    home: Path, out: Path, *extra: str, experiment: Path = EXPERIMENTS / "kv_flood.yaml"
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "inferchaos.cli.main",
            "run",
            str(experiment),
            "--load",
            "steady",
            "--out",
            str(out),
            *extra,
        ],
        env={**os.environ, "INFERCHAOS_HOME": str(home)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _locust_processes(home: Path) -> list[psutil.Process]:
    """Live Locust processes started under this session's INFERCHAOS_HOME."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if (
            "locust" not in " ".join(proc.info["cmdline"] or [])
            or proc.info["status"] == psutil.STATUS_ZOMBIE
        ):
            continue
        try:
            if proc.environ().get("INFERCHAOS_HOME") == str(home):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def _wait_for(condition: Callable[[], bool], what: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} within {timeout_s:g} s")
        time.sleep(0.5)


def _run_dir(out: Path) -> Path | None:
    found = sorted(out.glob("*-kv_flood"))
    return found[-1] if found else None


def _timeline_has(out: Path, probe: str, minimum: float = 0.0) -> bool:
    run_dir = _run_dir(out)
    if run_dir is None or not (run_dir / "timeline.csv").exists():
        return False
    # The runner is still writing: a partial last line is skipped by read_timeline.
    timeline = read_timeline(run_dir / "timeline.csv")
    if probe.startswith("phase."):
        return probe.removeprefix("phase.") in timeline.marks
    return any(r.value > minimum for r in timeline.select(probe))


def _kv_flood_holding_recovery(folder: Path, hold_s: float) -> Path:
    """kv_flood whose recovery must hold ``hold_s``: the run then samples the load that long
    after the canary recovered. Locust users queued behind the flood keep the load's sliding
    percentile high for seconds after the canary, which waits for nothing, is already back
    (with the scenario's own 5 s hold the load's p95 can still be twice its baseline's worst).
    The window the hold may start in grows by as much as the hold: under Locust load the
    canary's first tokens spike every few seconds even after a healthy recovery, and a 15 s
    hold in the scenario's 30 s found no spike-free start."""
    spec = yaml.safe_load((EXPERIMENTS / "kv_flood.yaml").read_text())
    spec["recovery"]["within_s"] += hold_s - spec["recovery"]["hold_s"]
    spec["recovery"]["hold_s"] = hold_s
    # The platform steady state holds recovery for at least one canary timeout; kv_flood's 30 s
    # under load finds no spike-free start (bench/RESULTS.md), so the canary waits hold_s.
    spec["canary"]["request_timeout_s"] = hold_s
    # The canary under Locust load meets a spike every 6-11 s: two in one of the scenario's 10 s
    # windows (twenty requests) read as its p95 and failed a healthy fresh-clone run (0.54 s
    # against 0.38 s). Judged on 5 s windows, as this test held in every CI run before, one
    # spike lands alone in its window; a flood that never drains still fails either way.
    # Its 0.3 s floor is an idle platform's: under Locust load a healthy canary's first tokens
    # spike past it for seconds after a full recovery (bench/RESULTS.md), while a flood that never
    # drains keeps them at seconds. The floor under load sits between the two.
    for slo in spec["slos"]:
        if slo["name"] == "ttft_after":
            slo["window_s"] = 5
            slo["threshold"]["at_least"] = LOADED_TTFT_FLOOR_S
    folder.mkdir()
    path = folder / "kv_flood.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _values(timeline: Timeline, probe: str, start: float, end: float) -> list[float]:
    return [r.value for r in timeline.select(probe, start=start, end=end, include_end=True)]


def test_load_ttft_rises_during_the_flood_and_recovers(
    local_env: LocalEnvironment, integration_home: Path, tmp_path: Path
) -> None:
    experiment = _kv_flood_holding_recovery(tmp_path / "experiment", hold_s=15.0)
    runner = _runner(integration_home, tmp_path, experiment=experiment)
    try:
        output, _ = runner.communicate(timeout=RUN_BOUND_S)
    finally:
        if runner.poll() is None:
            os.killpg(runner.pid, signal.SIGINT)
            runner.wait(timeout=120)
    run_dir = _run_dir(tmp_path)
    assert run_dir is not None, output[-3000:]
    verdict = json.loads((run_dir / "verdict.json").read_text())
    print(f"kv_flood with load: {verdict['status']} — {verdict['reason']}")
    assert runner.returncode in (0, 1), output[-3000:]
    assert verdict["fault"] is not None, verdict["reason"]

    timeline = read_timeline(run_dir / "timeline.csv")
    marks = timeline.marks
    baseline = _values(timeline, "load.ttft_p95_s", marks[Mark.BASELINE_START], marks[Mark.INJECTED])
    during = _values(timeline, "load.ttft_p95_s", marks[Mark.INJECTED], marks[Mark.REVERTED])
    recovery = _values(timeline, "load.ttft_p95_s", marks[Mark.REVERTED], marks[Mark.END])
    print(f"load.ttft_p95_s baseline {baseline}\nduring {during}\nrecovery {recovery}")
    assert len(baseline) >= 3 and len(during) >= 3 and len(recovery) >= 3
    assert max(_values(timeline, "load.rps", marks[Mark.BASELINE_START], marks[Mark.END])) > 0
    calm = statistics.median(baseline)
    assert max(during) >= 2 * calm, "the flood should slow the load's first tokens down"
    # Judged over the 15 s the run held its recovery: the last 5 samples alone failed a healthy
    # fresh-clone run, where two slower requests 24 s after the revert kept Locust's 10 s sliding p95
    # at 0.56 s (bound 0.47 s) for exactly those samples, after 11 s at 0.12-0.25 s. A flood
    # that never drains keeps the load's p95 at seconds for the whole hold.
    assert verdict["timing"]["recovered"], verdict["reason"]
    recovered_at = marks[Mark.REVERTED] + verdict["timing"]["time_to_recover_s"]
    held = _values(timeline, "load.ttft_p95_s", recovered_at, marks[Mark.END])
    print(f"load.ttft_p95_s while the recovery held: {held}")
    assert len(held) >= 5, held
    assert min(held) <= max(1.5 * max(baseline), calm + 0.1), "the load's TTFT should come back"

    assert (run_dir / "load" / "locust_stats_history.csv").exists(), "Locust's CSVs belong to the run folder"
    assert _locust_processes(integration_home) == []
    assert Ledger(integration_home / "ledger").is_empty()


def test_sigint_to_the_runner_during_the_fault_stops_locust(
    local_env: LocalEnvironment, integration_home: Path, tmp_path: Path
) -> None:
    runner = _runner(integration_home, tmp_path)
    try:
        _wait_for(lambda: _timeline_has(tmp_path, "load.rps"), "no load was sampled", 180)
        assert _locust_processes(integration_home), "Locust runs beside the runner"
        _wait_for(lambda: _timeline_has(tmp_path, "phase.injected"), "the flood was not injected", 120)
        time.sleep(3.0)  # let the flood bite, so the interrupt lands mid-fault
        runner.send_signal(signal.SIGINT)
        output, _ = runner.communicate(timeout=180)
    finally:
        if runner.poll() is None:
            os.killpg(runner.pid, signal.SIGKILL)
            runner.wait(timeout=30)
    assert runner.returncode == 130, output[-3000:]
    run_dir = _run_dir(tmp_path)
    assert run_dir is not None
    verdict = json.loads((run_dir / "verdict.json").read_text())
    assert verdict["status"] == "aborted" and "interrupted" in verdict["reason"]
    assert _locust_processes(integration_home) == []
    assert Ledger(integration_home / "ledger").is_empty(), "the flood was rolled back"


def test_locust_ends_itself_when_the_runner_is_killed(
    local_env: LocalEnvironment, integration_home: Path, tmp_path: Path
) -> None:
    runner = _runner(integration_home, tmp_path)
    try:
        _wait_for(lambda: _timeline_has(tmp_path, "load.users"), "no load was sampled", 180)
        assert _locust_processes(integration_home)
    finally:
        os.killpg(runner.pid, signal.SIGKILL)
        runner.wait(timeout=30)
        # The kill may land after the flood began; the ledger knows what to revert.
        cleanup = subprocess.run(
            [sys.executable, "-m", "inferchaos.cli.main", "cleanup"],
            capture_output=True,
            text=True,
            env={**os.environ, "INFERCHAOS_HOME": str(integration_home)},
            timeout=120,
        )
        assert cleanup.returncode == 0, cleanup.stderr
    # Locust leads its own process group, so the kill missed it; it watches the runner's pid.
    _wait_for(lambda: _locust_processes(integration_home) == [], "Locust outlived its runner", 15)
