"""The local scenarios, the runner's exit codes and its crash cleanup, on the real local environment."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from env_checks import skip_unless_it_can_run, wait_until_whole
from healthy_runs import RUNNER_SCENARIOS, assert_passed_and_clean

from inferchaos.environments.local.env import LocalEnvironment
from inferchaos.faults.ledger import Ledger

pytestmark = pytest.mark.integration

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"


def _inferchaos(args: list[str], home: Path, timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "inferchaos.cli.main", *args],
        env={**os.environ, "INFERCHAOS_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def _verdict(out: Path, name: str, result: subprocess.CompletedProcess[str]) -> dict:
    runs = sorted(out.glob(f"*-{name}"))
    assert runs, (
        f"exit {result.returncode} with no run folder:\n{result.stdout[-1500:]}\n{result.stderr[-1500:]}"
    )
    return json.loads((runs[-1] / "verdict.json").read_text())


@pytest.mark.parametrize("scenario", RUNNER_SCENARIOS)
def test_scenario_passes_on_a_healthy_environment(
    scenario: str, local_env: LocalEnvironment, integration_home: Path, tmp_path: Path
) -> None:
    skip_unless_it_can_run(scenario, local_env)
    # The scenario before may have left a replica restarting: a run started during such a
    # restart ended without a run folder. Every run starts on the whole environment.
    wait_until_whole(local_env)
    result = _inferchaos(
        ["run", str(EXPERIMENTS / f"{scenario}.yaml"), "--out", str(tmp_path)], integration_home
    )
    verdict = _verdict(tmp_path, scenario, result)
    print(f"{scenario}: {verdict['status']} — {verdict['reason']}; timing {verdict['timing']}")
    # The verdict's reason last: CI's log keeps the end of a failure's message.
    assert result.returncode == 0, (
        f"{result.stderr[-2000:]}\nverdict: {verdict['reason']}; timing {verdict['timing']}"
    )
    assert_passed_and_clean(scenario, verdict, tmp_path, local_env, integration_home)


def test_sigkilled_runner_mid_leak_then_cleanup_leaves_no_leaked_actor(
    local_env: LocalEnvironment, integration_home: Path, tmp_path: Path
) -> None:
    from ray.util.state import list_actors

    from inferchaos.faults.ray.actors import LEAK_NAMESPACE

    runner = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "inferchaos.cli.main",
            "run",
            str(EXPERIMENTS / "actor_leak.yaml"),
            "--out",
            str(tmp_path),
        ],
        env={**os.environ, "INFERCHAOS_HOME": str(integration_home)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    ledger = Ledger(integration_home / "ledger")
    local_env.connect_ray()

    def leaked() -> list:
        return [a for a in list_actors(filters=[("ray_namespace", "=", LEAK_NAMESPACE)]) if a.state != "DEAD"]

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (ledger.entries() and len(leaked()) >= 2):
        time.sleep(0.5)
    assert leaked(), "the leak should be running before the runner is killed"
    os.killpg(runner.pid, signal.SIGKILL)
    runner.wait(timeout=30)
    assert leaked(), "detached leaked actors outlive the killed runner, as a real leak does"
    assert not ledger.is_empty()

    result = _inferchaos(["cleanup"], integration_home)
    assert result.returncode == 0, result.stderr
    assert "reverted ray.leak_actors" in result.stdout
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and leaked():
        time.sleep(0.5)
    assert leaked() == []
    assert ledger.is_empty()
    again = _inferchaos(["cleanup"], integration_home)
    assert again.returncode == 0 and "nothing to revert" in again.stdout
