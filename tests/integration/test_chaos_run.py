"""Every local experiment run by Chaos Toolkit's own `chaos run`, on the real environment.

A plain `chaos run` judges every SLO of the experiment in its steady-state hypothesis
(inferchaos/ctk/live.py): the baseline and recovery ones before the method and after it, the
during-phase ones after it, over what the method's background sampler took while the fault
acted. It plays the rollbacks with ``--rollback-strategy=always``. This is the one run on the
healthy platform of each scenario healthy_runs.py gives `chaos run`; the others run through the
inferchaos runner (test_scenarios.py), and gcs_loss, which needs --gcs-ft, in test_gcs_ft.py.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import yaml
from chaos_cli import assert_nothing_left, chaos_run
from env_checks import skip_unless_it_can_run, wait_until_whole
from healthy_runs import CHAOS_RUN_SCENARIOS, check_symptoms

from inferchaos.environments.local.env import LocalEnvironment
from inferchaos.faults.base import FaultHandle
from inferchaos.faults.ledger import Ledger

pytestmark = pytest.mark.integration

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"


def _judged(experiment: Path) -> set[str]:
    """The SLOs a plain `chaos run` judges: every SLO of the experiment."""
    return {s["name"] for s in yaml.safe_load(experiment.read_text())["slos"]}


@pytest.mark.parametrize("scenario", CHAOS_RUN_SCENARIOS)
def test_chaos_run_holds_the_hypothesis_before_and_after_and_plays_the_rollbacks(
    scenario: str, local_env: LocalEnvironment, integration_home: Path, tmp_path: Path
) -> None:
    skip_unless_it_can_run(scenario, local_env)
    wait_until_whole(local_env)
    experiment = EXPERIMENTS / f"{scenario}.yaml"
    run = chaos_run(experiment, integration_home, tmp_path)
    after = run.outputs("after")
    print(f"{scenario}: {run.journal['status']}, after the method: {after.get('steady-state-sampled')}")
    assert run.returncode == 0, run.output[-4000:]
    assert run.journal["status"] == "completed" and run.journal["deviated"] is False, run.output[-4000:]
    for when in ("before", "after"):
        state = run.hypothesis(when)
        assert state["steady_state_met"] is True, state
        judged = {
            name for name, output in run.outputs(when).items() if isinstance(output, dict) and "ok" in output
        }
        assert judged == _judged(experiment), f"{when}: the hypothesis judges {judged}"
    assert after["steady-state-sampled"]["recovered"] is True, after["steady-state-sampled"]
    # Sampled while the fault acted, until the method's revert: what the during SLOs were judged on.
    during = next(r for r in run.journal["run"] if r["activity"]["name"] == "sample-while-the-fault-acts")
    assert during["status"] == "succeeded" and during["output"]["ticks"] > 0, during
    assert during["output"]["reason"].endswith("was reverted"), during["output"]
    # The fault bit: its evidence, read while it acted, is in the journal's method.
    effect = next(r for r in run.journal["run"] if r["activity"]["name"] == "fault-had-an-effect")
    assert effect["output"]["effect_observed"] is True, effect["output"]
    for evidence in effect["output"]["evidence"]:
        check_symptoms(scenario, evidence["symptoms"])
    assert [r["status"] for r in run.journal["rollbacks"]] == ["succeeded"], run.journal["rollbacks"]
    assert_nothing_left(integration_home)


def test_chaos_run_fails_when_the_platform_does_not_recover(
    local_env: LocalEnvironment, integration_home: Path, tmp_path: Path
) -> None:
    """The same hypothesis misses when the stall is left in place through it (the method's revert
    taken out): the plain `chaos run` deviates and exits 1, and the rollback still clears it."""
    wait_until_whole(local_env)
    raw = yaml.safe_load((EXPERIMENTS / "strict_pg_stall.yaml").read_text())
    # Its sampler would sample until the revert it waits for: out with the revert.
    raw["method"] = [
        a
        for a in raw["method"]
        if not a["provider"]["func"].startswith("rollback_") and not a.get("background")
    ]
    raw["recovery"]["within_s"] = 10  # the stall never clears: no need to wait out 30 s
    broken = tmp_path / "strict_pg_stall_not_reverted.yaml"
    broken.write_text(yaml.safe_dump(raw))
    run = chaos_run(broken, integration_home, tmp_path / "run")
    after = run.hypothesis("after")
    failed = [p["activity"]["name"] for p in after["probes"] if not p["tolerance_met"]]
    print(f"not reverted: {run.journal['status']}, deviated {run.journal['deviated']}, missed {failed}")
    assert after["steady_state_met"] is False
    # chaoslib's words for a run whose method completed and whose steady state deviated; `chaos
    # run` exits 1 for it.
    assert run.journal["deviated"] is True and run.journal["status"] == "completed"
    assert run.returncode == 1, run.output[-3000:]
    # The scenario's own SLO misses; the sampler may miss first, on the platform steady state's
    # recovery that the stalled group (and the detector watching it) kept from holding.
    assert failed and failed[0] in {
        "steady-state-sampled",
        "no_pending_groups_before",
        "no_pending_groups_after",
    }, failed
    assert run.outputs("after")["steady-state-sampled"]["recovered"] is False
    assert [r["status"] for r in run.journal["rollbacks"]] == ["succeeded"]
    assert_nothing_left(integration_home)


def test_chaos_run_fails_when_a_replica_freezes_for_good_as_the_platform_recovers(
    local_env: LocalEnvironment, integration_home: Path, tmp_path: Path
) -> None:
    """strict_pg_stall's own signal comes back at once after its revert, but replica-1, which
    the fault never touched, freezes (its whole process group) right then: the hypothesis after
    the method judges the platform steady state too, so the plain `chaos run` deviates, naming
    replica-1, where it passed on the fault's signal alone."""
    from inferchaos.faults.vllm.hang import HangEngine

    wait_until_whole(local_env)
    scenario_ledger, own = Ledger(integration_home / "ledger"), Ledger(tmp_path / "freeze-ledger")
    freeze = HangEngine()
    frozen: list[FaultHandle] = []

    def freeze_at_the_revert() -> None:
        seen = False
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            live = any(h.fault == "ray.stall_placement_group" for h in scenario_ledger.entries())
            if seen and not live:
                frozen.append(freeze.inject(local_env, {"replica": "replica-1", "what": "all"}, own))
                return
            seen = seen or live
            time.sleep(0.2)

    watcher = threading.Thread(target=freeze_at_the_revert, daemon=True)
    watcher.start()
    try:
        run = chaos_run(EXPERIMENTS / "strict_pg_stall.yaml", integration_home, tmp_path / "run")
    finally:
        watcher.join(timeout=5)
        for handle in frozen:
            freeze.revert(local_env, handle, own)
    assert frozen, "replica-1 was never frozen: the scenario's revert was not seen"
    after = run.hypothesis("after")
    missed = [p["activity"]["name"] for p in after["probes"] if not p["tolerance_met"]]
    print(f"frozen at the revert: {run.journal['status']}, after the method missed {missed}")
    assert run.returncode == 1 and run.journal["deviated"] is True, run.output[-3000:]
    assert run.hypothesis("before")["steady_state_met"] is True
    # chaoslib stops at the first probe out of tolerance: the front door's own request, where
    # the router sent it to the frozen replica; else the sampler, naming it.
    assert missed and missed[0] in ("front-door-serves", "steady-state-sampled"), missed
    if missed[0] == "steady-state-sampled":
        sampled = run.outputs("after")["steady-state-sampled"]
        failures = sampled["platform_failures"]
        # The frozen replica by name (its requests, its server), or Serve's count of RUNNING
        # replicas while it replaces the replica, or the recovery it kept from holding.
        assert any(
            "replica-1" in f or f.startswith(("platform.serve_replicas_after", "recovery:")) for f in failures
        ), sampled
        assert sampled["recovered"] is False, sampled
        assert f"the platform steady state failed: {failures[0]}" in run.output
    assert [r["status"] for r in run.journal["rollbacks"]] == ["succeeded"]
    assert_nothing_left(integration_home)
    assert own.is_empty()
    wait_until_whole(local_env)
