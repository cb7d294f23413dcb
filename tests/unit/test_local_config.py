"""Bad knobs of the local environment are refused before anything starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from inferchaos.environments.local.config import LocalEnvConfig
from inferchaos.environments.local.model import TinyModelSpec
from inferchaos.errors import ConfigError


def test_defaults_are_valid() -> None:
    LocalEnvConfig().validate()


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (LocalEnvConfig(workers=0), "--workers"),
        (LocalEnvConfig(gpus_per_worker=0), "--gpus-per-worker"),
        (LocalEnvConfig(replicas=3, workers=2), "--replicas 3 exceeds --workers 2"),
        (LocalEnvConfig(replicas=0), "--replicas"),
        (LocalEnvConfig(kv_cache_tokens=1000), "--kv-cache-tokens"),
        (LocalEnvConfig(kv_cache_tokens=1024, model=TinyModelSpec(max_model_len=2048)), "max_model_len"),
        (LocalEnvConfig(front_door_port=80), "front_door_port"),
        (LocalEnvConfig(port_slot=5), "port_slot"),
        (LocalEnvConfig(health_check="liveness"), "--health-check must be one of progress, plain"),
    ],
)
def test_bad_knob_names_itself(config: LocalEnvConfig, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("-", r"\-")):
        config.validate()


def test_kv_cache_bytes_give_the_requested_tokens() -> None:
    # float32 K and V, 2 layers, 1 KV head of 64: 1 KiB per token; 4096 tokens = the measured 4 MiB.
    assert LocalEnvConfig(kv_cache_tokens=4096).kv_cache_bytes == 4_194_304


def _run_cli(args: list[str], home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "INFERCHAOS_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "inferchaos.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    "args",
    [
        ["env", "up", "--replicas", "3"],
        ["env", "up", "--workers", "0"],
        ["env", "up", "--kv-cache-tokens", "100"],
        ["env", "up", "--hidden-size", "32"],
        ["env", "up", "--workers", "two"],
    ],
)
def test_cli_rejects_bad_knobs_with_one_line_and_exit_2(args: list[str], tmp_path: Path) -> None:
    result = _run_cli(args, tmp_path)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) <= 3 and "Traceback" not in result.stderr, result.stderr
    assert not (tmp_path / "env").exists(), "nothing may be started or recorded for bad input"


def test_cli_status_without_environment_says_how_to_start_one(tmp_path: Path) -> None:
    result = _run_cli(["env", "status", "--json"], tmp_path)
    assert result.returncode == 2
    assert "inferchaos env up" in result.stderr
    assert "Traceback" not in result.stderr
