"""A real Prometheus beside the local environment (``env up --prometheus``), scraping what a cluster's would.

The distribution's ``prometheus`` scrapes every replica's ``/metrics`` (job ``vllm``), each
replica's ``/health`` (job ``vllm_health``: vLLM answers an empty 200 while it serves and 503
once its engine died, so that job's ``up`` is the replica's health) and every Ray node's
metrics agent (job ``ray``), each second, so that the runs read their vLLM probes through
PromQL as they would on a cluster with ``prometheus.url`` set. Targets live in file_sd JSON
files that the environment rewrites when a node is added; Prometheus rereads them itself.

It evaluates the probes' recording rules (primitives/vllm_promql.py) each interval, so a tick
reads the latency quantiles instead of computing them over every replica's buckets, and keeps
of each replica's scrape only the series the probes read (about 70 of some 600). It evaluates
inferchaos' alerting rules too (primitives/alert_rules.py), so that each run reads which alerts
a platform team deploying them would have seen fire, and when.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
import yaml

from inferchaos.errors import ConfigError, EnvironmentStartError
from inferchaos.primitives import http
from inferchaos.primitives.alert_rules import AlertLabels, alert_rules_yaml
from inferchaos.primitives.env_status import PrometheusStatus
from inferchaos.primitives.processes import spawn_server
from inferchaos.primitives.vllm_promql import PromVllmSelector, keep_relabel_config

logger = logging.getLogger(__name__)

PROMETHEUS = "prometheus"
PROMETHEUS_HOST = "127.0.0.1"
SCRAPE_INTERVAL_S = 1
VLLM_JOB, HEALTH_JOB, RAY_JOB = "vllm", "vllm_health", "ray"
RULES_FILE = "inferchaos-rules.yml"
INSTALL_HINT = (
    "--prometheus needs the prometheus program; install the distribution's package "
    "(apt-get install prometheus) or put prometheus on PATH"
)


@dataclass
class PrometheusRecord:
    """The environment's Prometheus: what `env down` ends and the probes query."""

    pid: int
    port: int
    log_path: str
    targets_dir: str
    create_time: float = 0.0

    @property
    def url(self) -> str:
        return f"http://{PROMETHEUS_HOST}:{self.port}"

    def status(self) -> PrometheusStatus:
        """What the runs' probes query: the replica label and the jobs this scrape config sets."""
        selector = vllm_selector()
        return PrometheusStatus(
            url=self.url,
            replica_label=selector.replica_label,
            matchers=selector.matchers,
            health_matchers=selector.health_matchers,
            rate_window_s=selector.window_s,
            ray_matchers=f'job="{RAY_JOB}"',
        )


def vllm_selector(interval_s: float = SCRAPE_INTERVAL_S) -> PromVllmSelector:
    """The vLLM probes' view of this Prometheus: what they query, and what its rules precompute."""
    return PromVllmSelector(
        replica_label="replica",
        matchers=f'job="{VLLM_JOB}"',
        health_matchers=f'job="{HEALTH_JOB}"',
        # Five scrapes, so one late scrape does not empty a rate's window.
        window_s=5.0 * interval_s,
    )


def local_alert_labels(interval_s: float = SCRAPE_INTERVAL_S) -> AlertLabels:
    """The alerting rules' view of this Prometheus (primitives/alert_rules.py): the probes'
    replicas and rate window, Ray's nodes by their ``node`` label, and holds sized for runs of
    a minute or two: five scrapes before an alert fires, a minute to see a count climb."""
    return AlertLabels(
        vllm=vllm_selector(interval_s),
        ray_matchers=f'job="{RAY_JOB}"',
        node_label="node",
        hold_s=5.0 * interval_s,
        trend_s=60.0 * interval_s,
        stall_window_s=15.0,
        link_window_s=12.0,
        pressure_window_s=10.0,
        event_window_s=10.0,
    )


@dataclass(frozen=True)
class Target:
    """One scrape target of a job, with the labels that name what it is."""

    address: str
    labels: dict[str, str]


def prometheus_path() -> str:
    """The prometheus to run; ConfigError, in one line naming what to install, when there is none."""
    path = shutil.which(PROMETHEUS)
    if path is None:
        raise ConfigError(INSTALL_HINT)
    return path


def _duration(seconds: float) -> str:
    """A Prometheus duration: whole units only (``0.8s`` is refused, ``800ms`` is not)."""
    return f"{round(seconds * 1000)}ms"


def scrape_config(
    targets_dir: Path, interval_s: float = SCRAPE_INTERVAL_S, rules_file: Path | None = None
) -> dict[str, Any]:
    """The whole prometheus.yml: three jobs, each reading its targets from ``targets_dir``, the
    replicas' job keeping only what the probes read, and ``rules_file`` evaluated each interval."""

    def job(name: str, metrics_path: str = "/metrics") -> dict[str, Any]:
        return {
            "job_name": name,
            "metrics_path": metrics_path,
            "scrape_interval": _duration(interval_s),
            # Below the interval, so a hung replica's scrape fails within its tick.
            "scrape_timeout": _duration(interval_s * 0.8),
            "file_sd_configs": [{"files": [str(targets_dir / f"{name}.json")], "refresh_interval": "5s"}],
        }

    replicas = job(VLLM_JOB) | {"metric_relabel_configs": [keep_relabel_config()]}
    config: dict[str, Any] = {
        "global": {
            "scrape_interval": _duration(interval_s),
            "evaluation_interval": _duration(interval_s),
        },
        "scrape_configs": [replicas, job(HEALTH_JOB, "/health"), job(RAY_JOB)],
    }
    if rules_file is not None:
        config["rule_files"] = [str(rules_file)]
    return config


def write_targets(targets_dir: Path, job: str, targets: list[Target]) -> None:
    """Write one job's file_sd targets atomically (Prometheus may read the file at any moment)."""
    groups = [{"targets": [t.address], "labels": t.labels} for t in targets]
    path = targets_dir / f"{job}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(groups, indent=2))
    os.replace(tmp, path)


def prometheus_argv(server: str, config: Path, data_dir: Path, port: int) -> list[str]:
    """Loopback only; a day of retention is more than any run needs."""
    return [
        server,
        f"--config.file={config}",
        f"--storage.tsdb.path={data_dir}",
        "--storage.tsdb.retention.time=1d",
        f"--web.listen-address={PROMETHEUS_HOST}:{port}",
    ]


def start_prometheus(
    port: int,
    folder: Path,
    env: dict[str, str],
    logs_dir: Path,
    timeout_s: float = 30.0,
    interval_s: float = SCRAPE_INTERVAL_S,
) -> PrometheusRecord:
    """Start Prometheus as its own process group, with empty target files, and wait until it is ready."""
    server = prometheus_path()
    targets_dir = folder / "targets"
    targets_dir.mkdir(parents=True, exist_ok=True)
    for job in (VLLM_JOB, HEALTH_JOB, RAY_JOB):
        write_targets(targets_dir, job, [])
    rules = folder / RULES_FILE
    rules.write_text(alert_rules_yaml(local_alert_labels(interval_s)))
    config = folder / "prometheus.yml"
    config.write_text(yaml.safe_dump(scrape_config(targets_dir, interval_s, rules), sort_keys=False))
    log_path = logs_dir / "prometheus.log"
    pid, created = spawn_server(prometheus_argv(server, config, folder / "data", port), env, log_path)
    logger.info("started prometheus on %s:%d (pid %d)", PROMETHEUS_HOST, port, pid)
    record = PrometheusRecord(
        pid=pid, port=port, log_path=str(log_path), targets_dir=str(targets_dir), create_time=created
    )
    if not wait_ready(record.url, timeout_s, pid):
        last = _last_line(log_path)
        raise EnvironmentStartError(
            f"prometheus was not ready at {record.url} within {timeout_s:.0f} s"
            f"{f' ({last})' if last else ''}; see {log_path}"
        )
    return record


def wait_ready(url: str, timeout_s: float, pid: int) -> bool:
    """Whether ``/-/ready`` answered 200 within ``timeout_s``; False at once when ``pid`` exited."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if http.get(f"{url}/-/ready", timeout=2.0).status_code == 200:
                return True
        except httpx.HTTPError:
            pass  # not listening yet
        if not _running(pid):
            return False  # it refused its config, or its port: the log says which
        time.sleep(0.25)
    return False


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _last_line(log_path: Path) -> str:
    lines = log_path.read_text(errors="replace").strip().splitlines() if log_path.exists() else []
    return lines[-1][:300] if lines else ""


def replica_targets(replica_ports: dict[str, int], hosts: Sequence[str] = ("127.0.0.1",)) -> list[Target]:
    """The replicas by name and port, each at every host it may run on (loopback, or every worker's address)."""
    return [
        Target(f"{host}:{port}", {"replica": name})
        for name, port in sorted(replica_ports.items())
        for host in hosts
    ]
