"""`env up --prometheus`: what it asks of the machine, what it scrapes, and what it records.

The real Prometheus scraping the real replicas is tests/integration/test_prometheus_backend.py's.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from inferchaos.environments.local.config import LocalEnvConfig
from inferchaos.environments.local.prometheus_server import (
    HEALTH_JOB,
    RAY_JOB,
    RULES_FILE,
    VLLM_JOB,
    PrometheusRecord,
    Target,
    local_alert_labels,
    scrape_config,
    vllm_selector,
    write_targets,
)
from inferchaos.environments.local.ray_cluster import (
    MAX_NODE_INDEX,
    SERVICE_PORT_BASE,
    SERVICE_PORTS_PER_NODE,
    SERVICE_PORTS_PER_SLOT,
    prometheus_port,
    redis_port,
    refresh_scrape_targets,
)
from inferchaos.environments.local.state import LocalEnvState
from inferchaos.primitives.alert_rules import alert_rules_yaml
from inferchaos.primitives.ray_nodes import NodePorts, RayNodeRecord
from inferchaos.primitives.vllm_metrics import parse_metrics
from inferchaos.primitives.vllm_promql import KEPT_METRICS, PromVllmSelector
from tests.skips import needs_package

REPO = Path(__file__).resolve().parents[2]


def test_env_up_prometheus_without_prometheus_says_what_to_install_and_starts_nothing(tmp_path: Path) -> None:
    bare = tmp_path / "bin"
    bare.mkdir()
    assert shutil.which("prometheus", path=str(bare)) is None
    result = subprocess.run(
        [sys.executable, "-m", "inferchaos.cli.main", "env", "up", "--prometheus"],
        env={
            **os.environ,
            "INFERCHAOS_HOME": str(tmp_path / "home"),
            "PYTHONPATH": str(REPO),
            "PATH": str(bare),
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert len(lines) == 1 and "apt-get install prometheus" in lines[0], result.stderr
    assert not (tmp_path / "home" / "env" / "local" / "state.json").exists()


def test_every_job_scrapes_each_second_and_gives_up_on_a_target_within_its_tick(tmp_path: Path) -> None:
    config = scrape_config(tmp_path)
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {VLLM_JOB, HEALTH_JOB, RAY_JOB}
    assert jobs[HEALTH_JOB]["metrics_path"] == "/health", "the health job's up is the replica's /health"
    for name, job in jobs.items():
        # Prometheus refuses fractional durations ("0.8s"): whole milliseconds.
        assert job["scrape_interval"] == "1000ms" and job["scrape_timeout"] == "800ms"
        assert job["file_sd_configs"][0]["files"] == [str(tmp_path / f"{name}.json")]


@needs_package("prometheus", shutil.which("promtool"), "the distribution's prometheus (promtool)")
def test_the_real_promtool_accepts_the_scrape_config_and_its_rules(tmp_path: Path) -> None:
    for job in (VLLM_JOB, HEALTH_JOB, RAY_JOB):
        write_targets(tmp_path, job, [Target("127.0.0.1:8100", {"replica": "replica-0"})])
    rules = tmp_path / RULES_FILE
    rules.write_text(alert_rules_yaml(local_alert_labels()))
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump(scrape_config(tmp_path, rules_file=rules)))
    checked = subprocess.run(
        ["promtool", "check", "config", str(config)], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "WARNING" not in checked.stdout, checked.stdout
    assert "SUCCESS: 1 rule files found" in checked.stdout, "promtool checked the rules file too"


def test_the_rules_prometheus_evaluates_are_those_of_the_probes_built_from_its_status(tmp_path: Path) -> None:
    rules = tmp_path / RULES_FILE
    assert scrape_config(tmp_path, rules_file=rules)["rule_files"] == [str(rules)]
    assert "rule_files" not in scrape_config(tmp_path)
    status = PrometheusRecord(pid=7, port=61191, log_path="p.log", targets_dir=str(tmp_path)).status()
    # What inferchaos/run/probe_set.py builds from the environment's status.
    probes = PromVllmSelector(
        replica_label=status.replica_label,
        matchers=status.matchers,
        health_matchers=status.health_matchers,
        window_s=status.rate_window_s,
    )
    assert probes.recording_rules() == vllm_selector().recording_rules()
    assert vllm_selector(5.0).window_s == 25.0, "a rate's window holds five scrapes"


def _kept(text: str, regex: str) -> str:
    """The exposition text less the samples a ``keep`` relabelling drops (RE2 anchors it)."""
    return "".join(
        line + "\n"
        for line in text.splitlines()
        if line.startswith("#") or re.fullmatch(regex, line.split("{")[0].split(" ")[0])
    )


def test_the_replicas_job_keeps_only_the_series_the_probes_read(tmp_path: Path) -> None:
    jobs = {job["job_name"]: job for job in scrape_config(tmp_path)["scrape_configs"]}
    [keep] = jobs[VLLM_JOB]["metric_relabel_configs"]
    assert keep["action"] == "keep" and keep["source_labels"] == ["__name__"]
    assert "metric_relabel_configs" not in jobs[HEALTH_JOB] and "metric_relabel_configs" not in jobs[RAY_JOB]
    recorded = (REPO / "tests" / "fixtures" / "metrics" / "vllm_flooded.txt").read_text()
    kept = _kept(recorded, keep["regex"])
    samples = [line for line in kept.splitlines() if not line.startswith("#")]
    assert len(samples) < 100 < 500 < len(recorded.splitlines()), len(samples)
    # Everything the probes read survives: the replica reads the same from what is kept.
    assert parse_metrics(kept) == parse_metrics(recorded)
    names = {line.split("{")[0].split(" ")[0] for line in samples}
    assert names == {name for name in KEPT_METRICS if name in recorded}
    assert "vllm:request_queue_time_seconds_bucket" not in names
    assert "vllm:time_to_first_token_seconds_count" not in names, "the rules read buckets only"
    # And every series a recording rule reads.
    for rule in PromVllmSelector().recording_rules():
        read = set(re.findall(r"vllm:[a-z0-9_]+", rule.expr))
        assert read and read <= names, rule.expr


def test_the_prometheus_port_is_its_own_within_the_slot() -> None:
    for slot in (0, 1):
        base = SERVICE_PORT_BASE + slot * SERVICE_PORTS_PER_SLOT
        last_node_port = base + (MAX_NODE_INDEX + 1) * SERVICE_PORTS_PER_NODE - 1
        assert last_node_port < prometheus_port(slot) < base + SERVICE_PORTS_PER_SLOT
        assert prometheus_port(slot) != redis_port(slot)


def _node(name: str, index: int, lost: bool = False) -> RayNodeRecord:
    ports = NodePorts(
        node_manager=0,
        object_manager=0,
        metrics_export=62000 + index,
        dashboard_agent_listen=0,
        dashboard_agent_grpc=0,
        runtime_env_agent=0,
        min_worker=0,
        max_worker=0,
    )
    return RayNodeRecord(
        name=name, pid=1, is_head=index == 0, num_cpus=1, num_gpus=0, ports=ports, log_path="", lost=lost
    )


def test_the_targets_are_every_replica_slot_by_name_and_every_node_not_lost(tmp_path: Path) -> None:
    record = PrometheusRecord(pid=7, port=61191, log_path="p.log", targets_dir=str(tmp_path), create_time=2.5)
    state = LocalEnvState(
        env_id="e1",
        created_at=0.0,
        config=LocalEnvConfig(prometheus=True),
        state_dir=str(tmp_path),
        ray_temp_dir=str(tmp_path / "ray"),
        ray_address="127.0.0.2:61006",
        dashboard_url="http://127.0.0.1:61007",
        front_door_url="http://127.0.0.1:8000",
        model_dir="",
        served_model_name="tiny",
        nodes=[_node("head", 0), _node("worker-1", 1, lost=True), _node("worker-3", 3)],
        prometheus=record,
    )
    refresh_scrape_targets(state)
    replicas = json.loads((tmp_path / f"{VLLM_JOB}.json").read_text())
    assert replicas == [
        {"targets": ["127.0.0.1:8100"], "labels": {"replica": "replica-0"}},
        {"targets": ["127.0.0.1:8101"], "labels": {"replica": "replica-1"}},
    ]
    assert json.loads((tmp_path / f"{HEALTH_JOB}.json").read_text()) == replicas
    nodes = json.loads((tmp_path / f"{RAY_JOB}.json").read_text())
    assert [g["labels"]["node"] for g in nodes] == ["head", "worker-3"], "a lost node is no target"
    assert nodes[1]["targets"] == ["127.0.0.2:62003"]
    state.save()
    loaded = LocalEnvState.load(tmp_path)
    assert loaded.prometheus == record and loaded.config.prometheus
    assert loaded.prometheus.status().url == "http://127.0.0.1:61191"


def test_in_namespaces_each_replica_slot_is_listed_at_every_live_workers_address(tmp_path: Path) -> None:
    from dataclasses import replace

    from inferchaos.environments.local.network import NetworkRecord

    record = PrometheusRecord(pid=7, port=61191, log_path="p.log", targets_dir=str(tmp_path), create_time=2.5)
    head = replace(_node("head", 0), address="10.213.1.1")
    gone = replace(_node("worker-1", 1, lost=True), address="10.213.1.3", namespace="inferchaos-e1-w1")
    live = replace(_node("worker-3", 3), address="10.213.1.5", namespace="inferchaos-e1-w3")
    state = LocalEnvState(
        env_id="e1",
        created_at=0.0,
        config=LocalEnvConfig(prometheus=True, workers=1, replicas=1),
        state_dir=str(tmp_path),
        ray_temp_dir=str(tmp_path / "ray"),
        ray_address="10.213.1.1:61006",
        dashboard_url="http://127.0.0.1:61007",
        front_door_url="http://127.0.0.1:8000",
        model_dir="",
        served_model_name="tiny",
        nodes=[head, gone, live],
        prometheus=record,
        network=NetworkRecord("netns", subnet="10.213.1.0/24"),
    )
    refresh_scrape_targets(state)
    # A replica runs on whichever worker Serve placed it: only the lost node's address is left out.
    assert json.loads((tmp_path / f"{VLLM_JOB}.json").read_text()) == [
        {"targets": ["10.213.1.5:8100"], "labels": {"replica": "replica-0"}}
    ]
    nodes = json.loads((tmp_path / f"{RAY_JOB}.json").read_text())
    assert [g["targets"] for g in nodes] == [["10.213.1.1:62000"], ["10.213.1.5:62003"]]
    state.save()
    assert LocalEnvState.load(tmp_path).network == NetworkRecord("netns", subnet="10.213.1.0/24")
