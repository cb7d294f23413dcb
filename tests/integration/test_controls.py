"""Every local scenario's negative control FAILS on the real environment, for the reason it should.

Each control runs through the CLI, as `inferchaos run experiments/controls/<scenario>.yaml`
does: the scenario exactly as written, against the real environment broken on purpose (a hung
engine, actors never released, a GPU that stays held, a node never replaced, a survivor that
stalls). It must exit 1 with the expected triage layer, and everything it broke must be
restored afterwards: empty ledger, no stopped process, no leaked actor, every replica healthy.
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
# node_loss and network_partition_long last: their held faults replace a worker node, which
# changes the cluster's shape.
EXPECTED = {
    "kv_flood": "vllm",
    "actor_leak": "ray",
    "strict_pg_stall": "ray",
    "gpu_memory_squat": "device",
    "serve_controller_loss": "ray",
    "engine_hang": "vllm",
    "slow_replica": "vllm",
    "engine_death": "vllm",
    "network_partition_short": "network",
    "slow_link": "network",
    "node_loss": "ray",
    "network_partition_long": "network",
}


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_the_control_fails_with_the_expected_layer_and_leaves_nothing_behind(
    scenario: str, local_env: LocalEnvironment, integration_home: Path, tmp_path: Path
) -> None:
    from ray.util.state import list_actors

    from inferchaos.faults.ray.actors import LEAK_NAMESPACE

    skip_unless_it_can_run(scenario, local_env)
    wait_until_whole(local_env)
    result = subprocess.run(
        [sys.executable, "-m", "inferchaos.experiments.cli", "run", str(CONTROLS / f"{scenario}.yaml"),
         "--out", str(tmp_path)],
        env={**os.environ, "INFERCHAOS_HOME": str(integration_home)},
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    (run_dir,) = sorted(tmp_path.glob(f"*-{scenario}.control"))
    verdict = json.loads((run_dir / "verdict.json").read_text())
    slos = {s["name"]: (s["ok"], s["observed"]) for s in verdict["slos"]}
    print(f"{scenario}.control: {verdict['status']} — {verdict['reason']}; triage {verdict['triage']['layer']}; "
          f"slos {slos}; control {verdict['control']}")  # fmt: skip
    assert result.returncode == 1, f"{verdict['reason']}\n{result.stderr[-2000:]}"
    assert verdict["fault"]["effect_observed"] is True, "the scenario's own fault must still bite"
    assert verdict["triage"]["layer"] == EXPECTED[scenario], verdict["triage"]
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
