"""Every local scenario's negative control FAILS on the real environment, for the reason it should.

Each control runs through the CLI, as `inferchaos run experiments/controls/<scenario>.yaml`
does: the scenario exactly as written, against the real environment broken on purpose (a hung
engine, a health check that cannot see it, a node never replaced, a survivor that stalls) or
with a failure the scenario did not inject, in another layer than its fault's and in every
phase: a replica frozen at baseline, while the fault acts, or for good as the platform recovers.
It must exit 1 with the expected SLOs failed and the expected triage layer, and everything it
broke must be restored afterwards: empty ledger, no stopped process, no leaked actor, every
replica healthy. Each runs with --fail-fast, as a CI gate would: a control that failed in its
fault window ends there instead of waiting out a recovery it can no longer pass.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from env_checks import skip_unless_it_can_run, stopped_processes, wait_until_whole

from inferchaos.environments.local.env import LocalEnvironment
from inferchaos.faults.ledger import Ledger

pytestmark = pytest.mark.integration

CONTROLS = Path(__file__).resolve().parents[2] / "experiments" / "controls"
# Per scenario: the triage layer, and SLOs of which at least one must fail (a name ending in
# a dot is a prefix: the platform steady state's SLOs of that part). node_loss and
# network_partition_long last: their held faults replace a worker node, which changes the
# cluster's shape.
EXPECTED: dict[str, tuple[str, tuple[str, ...]]] = {
    "kv_flood": ("vllm", ("queue_after", "replica_0_serves_after", "platform.replica-0.")),
    # A second failure in another layer while the fault acts (Ray's leak, vLLM's hang).
    "actor_leak": ("vllm", ("platform.replica-1.", "canary_ttft_p95", "availability")),
    # A failure the scenario did not inject, as the platform recovers.
    "strict_pg_stall": ("vllm", ("platform.replica-0.", "platform.front_door_after")),
    # The squat is the device's; the survivor that hangs meanwhile is vLLM's.
    "gpu_memory_squat": ("vllm", ("survivor_serves", "survivor_ttft", "availability")),
    # A failure before anything is injected.
    "serve_controller_loss": (
        "vllm",
        ("platform.replica-1.answers_before", "platform.no_stuck_request_before"),
    ),
    "engine_hang": ("vllm", ("out_of_rotation", "availability", "ttft_after")),
    # Hung before the fault, /health still 200: only the requests it holds show it.
    "engine_hang.other_replica_hangs_at_baseline": (
        "vllm",
        ("platform.no_stuck_request_before", "platform.replica-1.answers_before", "serves_before"),
    ),
    "slow_replica": ("vllm", ("slow_share", "front_door_e2e")),
    "slow_replica.other_replica_frozen_at_baseline": (
        "vllm",
        ("platform.replica-1.answers_before", "platform.no_stuck_request_before"),
    ),
    "engine_death": ("vllm", ("survivor_ttft", "routed_around", "platform.replica-1.")),
    # A failure in another layer than the network, as the platform recovers.
    "network_partition_short": ("vllm", ("platform.replica-1.", "ttft_after")),
    "slow_link": ("network", ("front_door_ttft", "survivor_ttft", "ttft_after")),
    # A second failure in another layer: the replica users should go to hangs.
    "slow_link.other_replica_hangs": ("vllm", ("platform.replica-1.", "availability")),
    "network_partition_long.other_replica_hangs_at_baseline": (
        "vllm",
        ("platform.no_stuck_request_before", "platform.replica-1.answers_before", "nodes_before"),
    ),
    "node_loss": ("ray", ("nodes_back", "replica_back", "platform.nodes_after")),
    # A second failure in another layer: the survivor hangs while the node is lost (Ray's fault).
    "node_loss.survivor_hangs": ("vllm", ("availability", "canary_ttft_p95", "platform.replica-0.")),
    "network_partition_long": ("network", ("nodes_back", "replica_back", "platform.nodes_after")),
}


def _failed(verdict: dict, expected: tuple[str, ...]) -> list[str]:
    # An SLO back by the end of the run, but too late for the recovery window, failed too.
    # An SLO that --fail-fast left unjudged did not fail: one judged before it did.
    failed = [
        s["name"] for s in verdict["slos"] if not s["ok"] and not s["reason"].startswith("not judged")
    ] + verdict["timing"]["recovery_blocked_by"]
    return [n for n in failed if any(n == e or (e.endswith(".") and n.startswith(e)) for e in expected)]


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_the_control_fails_with_the_expected_layer_and_leaves_nothing_behind(
    scenario: str, local_env: LocalEnvironment, integration_home: Path, tmp_path: Path
) -> None:
    from ray.util.state import list_actors

    from inferchaos.faults.ray.actors import LEAK_NAMESPACE

    skip_unless_it_can_run(scenario, local_env)
    wait_until_whole(local_env)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "inferchaos.cli.main",
            "run",
            str(CONTROLS / f"{scenario}.yaml"),
            "--out",
            str(tmp_path),
            "--fail-fast",
        ],
        env={**os.environ, "INFERCHAOS_HOME": str(integration_home)},
        capture_output=True,
        text=True,
        timeout=900,
    )
    run_dirs = sorted(tmp_path.glob(f"*-{scenario}.control"))
    assert len(run_dirs) == 1, f"exit {result.returncode}, no run folder: {result.stderr[-2000:]}"
    (run_dir,) = run_dirs
    verdict = json.loads((run_dir / "verdict.json").read_text())
    slos = {s["name"]: (s["ok"], s["observed"]) for s in verdict["slos"]}
    print(
        f"{scenario}.control: {verdict['status']} — {verdict['reason']}; triage {verdict['triage']['layer']}; "
        f"slos {slos}; control {verdict['control']}"
    )
    layer, must_fail = EXPECTED[scenario]
    assert result.returncode == 1, f"{verdict['reason']}\n{result.stderr[-2000:]}"
    # Failed, or aborted by a stop condition (no replica left to serve): judged either way.
    assert verdict["status"] == "failed" or verdict["stop_condition"], verdict["reason"]
    assert _failed(verdict, must_fail), f"none of {must_fail} failed: {verdict['reason']}"
    if "baseline_start" in verdict["phases"] and "injected" not in verdict["phases"]:
        # Not steady before the fault: nothing was injected, and the run names what failed.
        assert verdict["fault"] is None and verdict["platform"]["failure"]["phase"] == "baseline"
        # Every baseline control breaks replica-1: the verdict names it, even where only a
        # request it held stuck showed it.
        assert verdict["platform"]["failure"]["replica"] == "replica-1", verdict["platform"]["failure"]
    else:
        assert verdict["fault"]["effect_observed"] is True, "the scenario's own fault must still bite"
    assert verdict["triage"]["layer"] == layer, verdict["triage"]
    assert verdict["control"]["result"] == "failed_as_expected", verdict["control"]
    assert all(entry["ok"] for entry in verdict["control"]["released"]), verdict["control"]["released"]
    assert "control: failed as expected" in result.stdout
    # A breach while the fault acts is a detection, timed from the injection.
    if any(not s["ok"] and s["phase"] == "during" and s["observed"] is not None for s in verdict["slos"]):
        assert verdict["timing"]["time_to_detect_s"] is not None, verdict["timing"]
    # Nothing the control broke outlives it.
    assert Ledger(integration_home / "ledger").is_empty()
    assert stopped_processes(local_env) == []
    assert local_env.health_check_in_force() == "progress"
    local_env.connect_ray()
    leaked = [a for a in list_actors(filters=[("ray_namespace", "=", LEAK_NAMESPACE)]) if a.state != "DEAD"]
    assert leaked == []
    wait_until_whole(local_env)
