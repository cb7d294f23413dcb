"""`inferchaos alerts check` against the distribution's real ``prometheus``, evaluating a rules file.

inferchaos' own rules (deploy/prometheus/inferchaos-rules.yml) cover every signature: exit 0. A
team's file of two alerting rules covers two: exit 1, naming the default suite's others. Both
read what Prometheus lists once it has parsed and printed the rules back, not the file. Needs
no local environment: Prometheus scrapes nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from scraped_stand_in import end_group, needs_prometheus

from inferchaos.environments.local.prometheus_server import (
    PROMETHEUS_HOST,
    prometheus_argv,
    prometheus_path,
    wait_ready,
)
from inferchaos.primitives.alert_rules import CLUSTER, alerts
from inferchaos.primitives.processes import free_port, spawn_server

pytestmark = [pytest.mark.integration, needs_prometheus]

REPO = Path(__file__).resolve().parents[2]
DEPLOYED = REPO / "deploy" / "prometheus" / "inferchaos-rules.yml"
# A team's own rules: a KV alert on vLLM's older metric name, and an engine alert.
TEAM_RULES = {
    "groups": [
        {
            "name": "team_vllm",
            "rules": [
                {
                    "alert": "VllmKVCacheExhausted",
                    "expr": "max(vllm:gpu_cache_usage_perc) > 0.95 and sum(vllm:num_requests_waiting) > 0"
                    " or sum(rate(vllm:num_preemptions_total[5m])) > 0",
                    "for": "5m",
                },
                {"alert": "VllmReplicaDown", "expr": 'up{job="vllm"} == 0', "for": "2m"},
            ],
        }
    ]
}


def _prometheus(folder: Path, rules: Path) -> Iterator[str]:
    """A Prometheus on a free loopback port evaluating ``rules``; ended by its process group."""
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "prometheus.yml"
    config.write_text(yaml.safe_dump({"global": {"evaluation_interval": "1s"}, "rule_files": [str(rules)]}))
    port = free_port()
    argv = prometheus_argv(prometheus_path(), config, folder / "data", port)
    pid, _ = spawn_server(argv, dict(os.environ), folder / "prometheus.log")
    try:
        url = f"http://{PROMETHEUS_HOST}:{port}"
        assert wait_ready(url, 30.0, pid), (folder / "prometheus.log").read_text()[-2000:]
        yield url
    finally:
        end_group(pid)


@pytest.fixture
def deployed_rules(tmp_path: Path) -> Iterator[str]:
    yield from _prometheus(tmp_path / "deployed", DEPLOYED)


@pytest.fixture
def team_rules(tmp_path: Path) -> Iterator[str]:
    rules = tmp_path / "team-rules.yml"
    rules.write_text(yaml.safe_dump(TEAM_RULES, sort_keys=False))
    yield from _prometheus(tmp_path / "team", rules)


def alerts_check(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "inferchaos.cli.main", "alerts", "check", "--prometheus", url, *args],
        env={**os.environ, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_inferchaos_own_rules_cover_every_signature(deployed_rules: str) -> None:
    result = alerts_check(deployed_rules)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "not covered" not in result.stdout
    assert all(alert.name in result.stdout for alert in alerts(CLUSTER)), result.stdout
    signatures = len({a.signature for a in alerts(CLUSTER)})
    assert f"{signatures} of {signatures} signatures covered" in result.stdout


def test_a_team_s_few_rules_leave_the_suite_s_other_signatures_uncovered(team_rules: str) -> None:
    result = alerts_check(team_rules)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "VllmKVCacheExhausted" in result.stdout and "VllmReplicaDown" in result.stdout
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    # The default suite shows every signature but the two Kubernetes ones, GCS loss (suite ha),
    # and these two: a bare `up` alert reads what both replica_down and network_partition read.
    named = lines[0]
    for signature in (
        "engine_hang",
        "slow_replica",
        "placement_group_stall",
        "actor_leak",
        "node_loss",
        "serve_controller_loss",
        "gpu_memory_squat",
        "slow_link",
    ):
        assert signature in named, named
    for signature in ("kv_cache_flood", "replica_down", "network_partition", "pods_pending", "gcs_loss"):
        assert signature not in named, named
    # The k8s suite's signatures (Pending Pods, a node lost) are not the team's either.
    assert alerts_check(team_rules, "--suite", "k8s").returncode == 1
