"""`--gcs-ft`: what it asks of the machine, how it starts the head, and the suite that needs it.

The real Redis, GCS and head are the integration test's (tests/integration/test_gcs_ft.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from inferchaos.environments.local.config import LocalEnvConfig
from inferchaos.environments.local.ray_cluster import (
    MAX_NODE_INDEX,
    SERVICE_PORT_BASE,
    SERVICE_PORTS_PER_NODE,
    SERVICE_PORTS_PER_SLOT,
    ray_process_env,
    redis_port,
    unwatched_argv,
)
from inferchaos.environments.local.redis_store import GCS_RECONNECT_TIMEOUT_S, RedisRecord, gcs_ft_env
from inferchaos.environments.local.state import LocalEnvState
from inferchaos.errors import ConfigError
from inferchaos.run.suites import SUITES, ensure_suite_fits_env

REPO = Path(__file__).resolve().parents[2]


def _cli(args: list[str], home: Path, path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "INFERCHAOS_HOME": str(home), "PYTHONPATH": str(REPO)}
    if path is not None:
        env["PATH"] = path
    return subprocess.run(
        [sys.executable, "-m", "inferchaos.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _one_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert len(lines) == 1, f"expected one line on stderr, got:\n{result.stderr}"
    return lines[0]


def test_env_up_gcs_ft_without_redis_server_says_what_to_install_and_starts_nothing(tmp_path: Path) -> None:
    # A PATH that has Python's own folder and nothing else: no redis-server on it.
    bare = tmp_path / "bin"
    bare.mkdir()
    assert shutil.which("redis-server", path=str(bare)) is None
    result = _cli(["env", "up", "--gcs-ft"], tmp_path / "home", path=str(bare))
    line = _one_line(result)
    assert "--gcs-ft needs the redis-server program" in line and "apt-get install redis-server" in line, line
    assert not (tmp_path / "home" / "env" / "local" / "state.json").exists()


def test_gameday_ha_without_gcs_ft_says_so_in_one_line_and_starts_nothing(tmp_path: Path) -> None:
    line = _one_line(_cli(["gameday", "--suite", "ha", "--out", str(tmp_path / "runs")], tmp_path / "home"))
    assert "suite ha needs an environment started with --gcs-ft" in line, line
    assert not (tmp_path / "home" / "env" / "local" / "state.json").exists()
    assert not (tmp_path / "runs").exists()


def test_only_the_ha_suite_needs_gcs_fault_tolerance() -> None:
    assert SUITES["ha"] == ("gcs_loss",)
    with pytest.raises(ConfigError, match="needs an environment started with --gcs-ft"):
        ensure_suite_fits_env("ha", gcs_ft=False)
    ensure_suite_fits_env("ha", gcs_ft=True)
    for suite in SUITES.keys() - {"ha"}:
        ensure_suite_fits_env(suite, gcs_ft=False)


def test_the_head_alone_gets_the_storage_every_node_the_reconnect_budget(tmp_path: Path) -> None:
    redis = RedisRecord(pid=1, port=redis_port(1), log_path="redis.log")
    head = gcs_ft_env(redis, "env123")
    assert head["RAY_REDIS_ADDRESS"] == f"127.0.0.1:{redis_port(1)}"
    assert head["RAY_external_storage_namespace"] == "env123"
    worker = ray_process_env("env123", "token", tmp_path, gcs_ft=True)
    assert "RAY_REDIS_ADDRESS" not in worker
    assert worker["RAY_gcs_rpc_server_reconnect_timeout_s"] == str(GCS_RECONNECT_TIMEOUT_S)
    assert "RAY_gcs_rpc_server_reconnect_timeout_s" not in ray_process_env("env123", "token", tmp_path)


@pytest.mark.parametrize("slot", [0, 1])
def test_the_redis_port_is_past_every_nodes_ports_within_the_slot(slot: int) -> None:
    base = SERVICE_PORT_BASE + slot * SERVICE_PORTS_PER_SLOT
    last_node_port = base + (MAX_NODE_INDEX + 1) * SERVICE_PORTS_PER_NODE - 1
    assert last_node_port < redis_port(slot) < base + SERVICE_PORTS_PER_SLOT


def test_the_state_file_keeps_the_redis_record(tmp_path: Path) -> None:
    state = LocalEnvState(
        env_id="e1",
        created_at=0.0,
        config=LocalEnvConfig(gcs_ft=True),
        state_dir=str(tmp_path),
        ray_temp_dir=str(tmp_path / "ray"),
        ray_address="127.0.0.2:61006",
        dashboard_url="http://127.0.0.1:61007",
        front_door_url="http://127.0.0.1:8000",
        model_dir="",
        served_model_name="tiny",
        redis=RedisRecord(pid=42, port=61190, log_path="x.log", create_time=1.5),
    )
    state.save()
    loaded = LocalEnvState.load(tmp_path)
    assert loaded.config.gcs_ft and loaded.redis == state.redis
    assert loaded.redis is not None and loaded.redis.address == "127.0.0.1:61190"


def test_an_unwatched_head_stays_as_a_sleep_after_ray_start_returns_and_fails_with_it() -> None:
    ok = subprocess.Popen(unwatched_argv(["true"]), start_new_session=True)
    try:
        time.sleep(0.5)
        assert ok.poll() is None, "the node's recorded process must outlive `ray start`"
    finally:
        ok.kill()
        ok.wait()
    failed = subprocess.Popen(unwatched_argv(["false"]), start_new_session=True)
    assert failed.wait(timeout=10) != 0


def test_ray_reports_its_metrics_every_two_seconds_only_where_prometheus_reads_them(tmp_path: Path) -> None:
    # Read every 10 s (Ray's default), a 12 s placement-group stall showed in Prometheus, and
    # fired its alert, after its revert.
    assert (
        ray_process_env("env123", "token", tmp_path, prometheus=True)["RAY_metrics_report_interval_ms"]
        == "2000"
    )
    assert "RAY_metrics_report_interval_ms" not in ray_process_env("env123", "token", tmp_path)
