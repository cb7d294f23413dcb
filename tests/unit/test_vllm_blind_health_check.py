"""vllm.blind_health_check switches a recorded local environment's replicas to the plain check, and back.

The environment is a real LocalEnvironment attached to a state folder written here (no Ray,
no vLLM): the fault acts through the override file every replica reads at its health checks
(environments/local/progress_check.py), so that file and `env status` are what users see.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from inferchaos.environments.local.config import LocalEnvConfig
from inferchaos.environments.local.env import LocalEnvironment
from inferchaos.environments.local.progress_check import OVERRIDE_FILE, HealthCheck, health_check_in_force
from inferchaos.environments.local.state import LocalEnvState
from inferchaos.errors import ConfigError
from inferchaos.faults.ledger import Ledger
from inferchaos.faults.registry import get_fault


def recorded_env(state_dir: Path, health_check: str = HealthCheck.PROGRESS) -> LocalEnvironment:
    state_dir.mkdir(parents=True, exist_ok=True)
    LocalEnvState(
        env_id="test",
        created_at=0.0,
        config=LocalEnvConfig(health_check=health_check),
        state_dir=str(state_dir),
        ray_temp_dir=str(state_dir / "ray"),
        ray_address="127.0.0.1:1",
        dashboard_url="http://127.0.0.1:1",
        front_door_url="http://127.0.0.1:1",
        model_dir=str(state_dir / "model"),
        served_model_name="tiny",
        ready=True,
    ).save()
    return LocalEnvironment(state_dir=state_dir)


def test_inject_blinds_every_replica_and_revert_restores_the_check_it_started_with(tmp_path: Path) -> None:
    env = recorded_env(tmp_path / "env")
    ledger = Ledger(tmp_path / "ledger")
    fault = get_fault("vllm.blind_health_check")
    plan = fault.plan(env, {})
    assert "from progress to plain" in plan.description
    assert env.health_check_in_force() == HealthCheck.PROGRESS, "a plan changes nothing"

    handle = fault.inject(env, {}, ledger)
    assert env.health_check_in_force() == HealthCheck.PLAIN
    # What each replica reads at its next check.
    assert health_check_in_force(tmp_path / "env", HealthCheck.PROGRESS) is HealthCheck.PLAIN
    assert [h.id for h in ledger.entries()] == [handle.id]
    evidence = fault.evidence(env, handle)
    assert evidence.bit and evidence.symptoms["health_check"] == "plain"

    fault.revert(env, handle, ledger)
    fault.revert(env, handle, ledger)  # idempotent
    assert env.health_check_in_force() == HealthCheck.PROGRESS
    assert not (tmp_path / "env" / OVERRIDE_FILE).exists()
    assert ledger.is_empty()


def test_a_plain_platform_has_nothing_to_blind(tmp_path: Path) -> None:
    env = recorded_env(tmp_path / "env", health_check=HealthCheck.PLAIN)
    with pytest.raises(ConfigError, match="plain already; there is nothing to blind"):
        get_fault("vllm.blind_health_check").plan(env, {})


def test_only_a_plain_override_changes_the_check(tmp_path: Path) -> None:
    # A torn or foreign write must not silently change what the platform checks.
    (tmp_path / OVERRIDE_FILE).write_text("")
    assert health_check_in_force(tmp_path, HealthCheck.PROGRESS) is HealthCheck.PROGRESS
    (tmp_path / OVERRIDE_FILE).write_text("plain\n")
    assert health_check_in_force(tmp_path, HealthCheck.PROGRESS) is HealthCheck.PLAIN
