"""ray.kill_gcs on the real local environment with GCS fault tolerance (`env up --gcs-ft`).

The shared environment runs without --gcs-ft, as every other test expects it; the bad-input
case runs on it. The GCS tests run after every test that needs the shared environment and
before the ones that take it down (conftest.py orders them by the ``gcs_ft`` marker): their
fixture takes the shared environment down and starts it again, same ports and home, with
--gcs-ft (a real redis-server), and leaves it up for the teardown tests, which end it. They
skip, saying why, where redis-server is not installed; .ci/run installs it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import ray
from env_checks import wait_until_whole

from inferchaos.environments.local.config import LocalEnvConfig
from inferchaos.environments.local.env import LocalEnvironment
from inferchaos.faults.ledger import Ledger
from inferchaos.faults.ray.gcs import gcs_processes
from inferchaos.faults.registry import get_fault
from inferchaos.primitives.gcs_state import GcsStorage
from inferchaos.primitives.openai_stream import stream_completion
from inferchaos.primitives.processes import pid_alive
from tests.skips import require

pytestmark = pytest.mark.integration

NAME = "ray.kill_gcs"
EXPERIMENT = Path(__file__).resolve().parents[2] / "experiments" / "gcs_loss.yaml"
OUTAGE_S = 8


def _cli(args: list[str], home: Path, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "inferchaos.cli.main", *args],
        env={**os.environ, "INFERCHAOS_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def _gcs_pids(env: LocalEnvironment) -> list[int]:
    """The environment's gcs_server processes, found here by port and marker (Ray's own processes)."""
    state = env.load_state()
    storage = GcsStorage(state.env_id, state.ray_address, state.nodes[0].ports.gcs, "", 0, 0, "")
    return [p.pid for p in gcs_processes(storage)]


def _alive_node_ids(env: LocalEnvironment) -> set[str]:
    return {n.node_id for n in env.ray_nodes() if n.alive}


def test_kill_gcs_without_gcs_ft_exits_2_in_one_line_and_injects_nothing(
    local_env: LocalEnvironment, integration_home: Path, tmp_path: Path
) -> None:
    assert not local_env.load_state().config.gcs_ft, "the shared environment runs without --gcs-ft"
    ledger = Ledger(integration_home / "ledger")
    assert ledger.is_empty(), "an earlier test left the ledger non-empty; this test cannot judge it"
    before = _gcs_pids(local_env)
    out = tmp_path / "runs"
    result = _cli(["run", str(EXPERIMENT), "--out", str(out)], integration_home)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr + result.stdout, result.stderr[-2000:]
    assert len(lines) == 1, f"expected one line on stderr, got:\n{result.stderr}"
    assert "ray.kill_gcs needs GCS fault tolerance" in lines[0] and "--gcs-ft" in lines[0], lines[0]
    assert ledger.is_empty(), "nothing may be injected without GCS fault tolerance"
    assert not out.exists(), "a refused experiment must not leave a run folder"
    assert _gcs_pids(local_env) == before and len(before) == 1, "the GCS must be untouched"


@pytest.fixture(scope="module")
def gcs_env(
    local_env: LocalEnvironment, env_config: LocalEnvConfig, integration_home: Path
) -> Iterator[LocalEnvironment]:
    """The shared environment started again with --gcs-ft; left up for the teardown tests."""
    require("redis-server", shutil.which("redis-server"), "redis-server")
    environment = LocalEnvironment(
        replace(env_config, gcs_ft=True), state_dir=integration_home / "env" / "local", progress=print
    )
    if not (environment.is_recorded() and environment.load_state().config.gcs_ft):
        # A driver left connected to the cluster going down ends this whole process 60 s later
        # (exit 1, no pytest summary), whoever connected it.
        if ray.is_initialized():
            ray.shutdown()
        local_env.down()
        environment.up()
    state = environment.load_state()
    assert state.redis is not None and pid_alive(state.redis.pid)
    yield environment


@pytest.mark.gcs_ft
def test_gcs_down_the_front_door_serves_and_the_revert_brings_the_cluster_back(
    gcs_env: LocalEnvironment, integration_home: Path
) -> None:
    wait_until_whole(gcs_env)
    ledger = Ledger(integration_home / "ledger")
    assert ledger.is_empty()
    (gcs_before,) = _gcs_pids(gcs_env)
    nodes_before = _alive_node_ids(gcs_env)
    fault = get_fault(NAME)
    params = {"recover_timeout_s": 60}

    plan = fault.plan(gcs_env, params)
    assert f"pid:{gcs_before}" in plan.targets and pid_alive(gcs_before), "planning kills nothing"

    handle = fault.inject(gcs_env, params, ledger)
    assert not ledger.is_empty(), "the kill must be in the ledger while it is live"
    assert not pid_alive(gcs_before) and _gcs_pids(gcs_env) == []
    # The outage: Ray's control plane is gone, the data plane must not notice. gcs_loss holds
    # its outage longer (the HA game day); here it only has to outlast a few front-door requests.
    time.sleep(OUTAGE_S)
    during = fault.evidence(gcs_env, handle)
    print("gcs evidence during the outage:", during)
    assert during.bit and not during.symptoms["gcs_back"], during.reason

    fault.revert(gcs_env, handle, ledger)
    assert ledger.is_empty()
    after = fault.evidence(gcs_env, handle)
    print("gcs evidence after revert:", after)
    s = after.symptoms
    assert s["gcs_back"] and s["down_s"] >= OUTAGE_S, after.reason
    (gcs_after,) = _gcs_pids(gcs_env)
    assert gcs_after != gcs_before and s["gcs_pid_after"] == gcs_after
    assert s["nodes_intact"] and s["serve_intact"], after.reason
    assert _alive_node_ids(gcs_env) >= nodes_before

    sent, served = s["front_door_requests_during_outage"], s["front_door_served_during_outage"]
    print(f"front door during the GCS outage: {served}/{sent} served, by {s['front_door_served_by']}")
    assert sent >= 10, s
    assert served / sent >= 0.99, s["front_door_errors"]

    status = gcs_env.status()
    again = stream_completion(
        status.front_door.url, status.model.name, "still there?", max_tokens=4, timeout_s=10
    )
    assert again.ok, again.error
    fault.revert(gcs_env, handle, ledger)  # idempotent: no second GCS
    assert ledger.is_empty() and _gcs_pids(gcs_env) == [gcs_after]
    wait_until_whole(gcs_env, timeout_s=60)


@pytest.mark.gcs_ft
def test_cleanup_after_kill_9_of_the_runner_mid_outage_restarts_the_gcs(
    gcs_env: LocalEnvironment, integration_home: Path, tmp_path: Path
) -> None:
    wait_until_whole(gcs_env)
    ledger = Ledger(integration_home / "ledger")
    assert ledger.is_empty()
    nodes_before = _alive_node_ids(gcs_env)
    runner = subprocess.Popen(
        [sys.executable, "-m", "inferchaos.cli.main", "run", str(EXPERIMENT), "--out", str(tmp_path)],
        env={**os.environ, "INFERCHAOS_HOME": str(integration_home)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and runner.poll() is None:
            if any(h.fault == NAME and h.state.get("killed_at") for h in ledger.entries()):
                break
            time.sleep(0.25)
        assert runner.poll() is None, "the runner ended before the GCS was killed"
        time.sleep(3)
    finally:
        os.killpg(runner.pid, signal.SIGKILL)
        runner.wait(timeout=30)
    assert [h.fault for h in ledger.entries()] == [NAME], (
        "a runner killed with -9 cannot have reverted anything"
    )
    assert _gcs_pids(gcs_env) == [], "the GCS stays down until cleanup"

    cleanup = _cli(["cleanup"], integration_home)
    print(f"cleanup rc {cleanup.returncode}: {cleanup.stdout[-1500:]} {cleanup.stderr[-1500:]}")
    assert cleanup.returncode == 0, cleanup.stdout + cleanup.stderr
    assert f"reverted {NAME}" in cleanup.stdout
    assert ledger.is_empty()
    assert len(_gcs_pids(gcs_env)) == 1
    assert _alive_node_ids(gcs_env) >= nodes_before
    wait_until_whole(gcs_env, timeout_s=120)
    again = _cli(["cleanup"], integration_home)
    assert again.returncode == 0 and "the ledger is empty" in again.stdout


@pytest.mark.gcs_ft
def test_gameday_ha_passes_and_its_control_fails_as_expected(
    gcs_env: LocalEnvironment, integration_home: Path, tmp_path: Path
) -> None:
    wait_until_whole(gcs_env)
    # --strict: a scenario skipped here (exit 0 otherwise) fails the day, as CI requires.
    result = _cli(
        ["gameday", "--suite", "ha", "--controls", "--strict", "--out", str(tmp_path)], integration_home, 900
    )
    print(result.stdout[-4000:], result.stderr[-2000:])
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "gcs_loss.control" in result.stdout
    # gcs_loss's one healthy run (healthy_runs.py): it passed, the GCS outage bit, and the
    # platform came back; its control failed in the layer of its defect (a hung engine, vLLM's).
    (summary_file,) = tmp_path.glob("gameday-*/summary.json")
    runs = {r["experiment"]: r for r in json.loads(summary_file.read_text())["runs"]}
    healthy, control = runs["gcs_loss"], runs["gcs_loss.control"]
    assert healthy["status"] == "passed" and healthy["time_to_recover_s"] is not None, healthy
    verdict = json.loads((summary_file.parent / healthy["run_dir"] / "verdict.json").read_text())
    assert verdict["fault"]["effect_observed"] is True, verdict["reason"]
    assert control["status"] == "failed" and control["control"]["proven"] is True, control
    assert control["triage_layer"] == "vllm", control
    assert Ledger(integration_home / "ledger").is_empty()
    assert len(_gcs_pids(gcs_env)) == 1
    wait_until_whole(gcs_env, timeout_s=120)
