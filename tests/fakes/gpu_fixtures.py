"""Fixtures of the device-layer unit tests: a recorded local environment with no processes."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferchaos.environments.local.config import LocalEnvConfig
from inferchaos.environments.local.state import LocalEnvState
from tests.fakes.gpu import FakeLocalEnv


@pytest.fixture
def local_state(tmp_path: Path) -> LocalEnvState:
    state_dir = tmp_path / "env"
    (state_dir / "replicas").mkdir(parents=True)
    return LocalEnvState(
        env_id="abc123",
        created_at=0.0,
        config=LocalEnvConfig(),
        state_dir=str(state_dir),
        ray_temp_dir="",
        ray_address="",
        dashboard_url="",
        front_door_url="http://127.0.0.1:8000",
        model_dir="",
        served_model_name="tiny-llama",
        ready=True,
    )


@pytest.fixture
def fake_env(local_state: LocalEnvState) -> FakeLocalEnv:
    return FakeLocalEnv(local_state)
