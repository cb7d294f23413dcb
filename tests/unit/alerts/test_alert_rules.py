"""The alerting rules, tested with the real ``promtool``: each alert fires on its signature and
stays silent on the baselines of this project's own recorded healthy runs.

``healthy_baselines.csv`` holds the baseline phases of the twelve default scenarios' chaos runs
on a healthy local environment (a CI rehearsal, 2 cores): each probe's readings, as the runs'
timelines recorded them. They become the series a Prometheus scraping that environment holds
(its labels, ``local_alert_labels``), one second apart.
"""

from __future__ import annotations

import csv
import re
import shutil
import subprocess
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
import yaml

from inferchaos.environments.local.prometheus_server import local_alert_labels
from inferchaos.primitives.alert_rules import CLUSTER, DEPLOY_HEADER, LAYERS, alert_rules_yaml, alerts
from tests.skips import needs_package

HERE = Path(__file__).parent
LOCAL = local_alert_labels()
DEPLOYED = HERE.parents[2] / "deploy" / "prometheus" / "inferchaos-rules.yml"
BASELINES = HERE / "healthy_baselines.csv"
PROMTOOL = shutil.which("promtool")
needs_promtool = needs_package("prometheus", PROMTOOL, "the distribution's prometheus (promtool)")

# What each recorded probe is in a Prometheus that scrapes the local environment: the series,
# its fixed labels, and the label the timeline's own labels map to.
SERIES: Mapping[str, tuple[str, str]] = {
    "vllm.num_requests_running": ("vllm:num_requests_running", 'job="vllm"'),
    "vllm.num_requests_waiting": ("vllm:num_requests_waiting", 'job="vllm"'),
    "vllm.kv_cache_usage": ("vllm:kv_cache_usage_perc", 'job="vllm"'),
    "vllm.num_preemptions_total": ("vllm:num_preemptions_total", 'job="vllm"'),
    "vllm.generation_tokens_total": ("vllm:generation_tokens_total", 'job="vllm"'),
    "vllm.ttft_p95_s": ("replica:vllm_time_to_first_token_seconds:p95_rate5s", ""),
    "ray.nodes_alive": ("ray_cluster_active_nodes", 'job="ray"'),
    "ray.gpus_available": ("ray_resources", 'job="ray",Name="GPU",State="AVAILABLE"'),
    "ray.pending_pgs": ("ray_gcs_placement_group_count", 'job="ray",State="Pending"'),
    "ray.actors_alive": ("ray_actors", 'job="ray",Source="gcs",State="ALIVE"'),
    "ray.tasks_pending_node_assignment": ("ray_tasks", 'job="ray",State="PENDING_NODE_ASSIGNMENT"'),
    "network.node_reachable": ("up", 'job="ray"'),
}


def _labels(text: str) -> str:
    pairs = [pair.split("=", 1) for pair in text.split(";") if pair]
    return ",".join(f'{key}="{value}"' for key, value in pairs)


def healthy_series() -> dict[str, list[dict[str, str]]]:
    """Per recorded run, its baseline as promtool input series, one value per second: the
    reading of that second (the last one where two ticks fell in it), ``_`` where none."""
    # (run, series) -> tick time -> value; a tick's readings of one series add up (Ray's live
    # actors are one count per class in the timeline, one count in Ray's metric).
    ticks: dict[tuple[str, str], dict[float, float]] = defaultdict(lambda: defaultdict(float))
    with BASELINES.open() as f:
        for row in csv.DictReader(f):
            if row["error"] or row["probe"] not in SERIES:
                continue
            metric, fixed = SERIES[row["probe"]]
            own = "" if row["probe"] == "ray.actors_alive" else _labels(row["labels"])
            labels = ",".join(part for part in (fixed, own) if part)
            t = float(row["t"])
            ticks[(row["run"], f"{metric}{{{labels}}}")][t] += float(row["value"])
            if row["probe"] == "vllm.num_requests_running":
                # A replica whose /metrics answered was up.
                ticks[(row["run"], f'up{{job="vllm",{own}}}')][t] = 1.0
    per_second: dict[str, dict[str, dict[int, float]]] = defaultdict(dict)
    for (run, name), by_tick in ticks.items():
        per_second[run][name] = {int(t): value for t, value in sorted(by_tick.items())}
    rendered: dict[str, list[dict[str, str]]] = {}
    for run, series in per_second.items():
        end = max(second for values in series.values() for second in values) + 1
        rendered[run] = [
            {"series": name, "values": " ".join(f"{values[t]:g}" if t in values else "_" for t in range(end))}
            for name, values in series.items()
        ]
    return rendered


def promtool_test(tmp_path: Path, tests: Sequence[Mapping[str, object]]) -> subprocess.CompletedProcess[str]:
    rules = tmp_path / "rules.yml"
    rules.write_text(alert_rules_yaml(LOCAL))
    spec = {"rule_files": [str(rules)], "evaluation_interval": "1s", "tests": tests}
    path = tmp_path / "tests.yml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, "test", "rules", str(path)], capture_output=True, text=True, timeout=120)


def _seconds(values: str) -> int:
    """How many values promtool's expanding notation stands for (``4x60`` is 61)."""
    return sum(int(token.rpartition("x")[2]) + 1 if "x" in token else 1 for token in values.split())


def test_the_deployed_rules_file_is_the_generated_one() -> None:
    expected = alert_rules_yaml(CLUSTER, DEPLOY_HEADER)
    assert DEPLOYED.read_text() == expected, (
        "deploy/prometheus/inferchaos-rules.yml is stale: "
        "run .venv/bin/python -m inferchaos.primitives.alert_rules > deploy/prometheus/inferchaos-rules.yml"
    )


def test_every_alert_has_a_layer_a_severity_a_hold_and_a_summary_naming_its_subject() -> None:
    document = yaml.safe_load(alert_rules_yaml(CLUSTER))
    rules = [r for group in document["groups"] for r in group["rules"] if "alert" in r]
    assert {r["labels"]["layer"] for r in rules} == set(LAYERS)
    for rule in rules:
        assert rule["labels"]["severity"] in ("warning", "critical"), rule
        # An event that cannot flap fires at once; every condition holds a minute first.
        assert rule["for"] == ("0s" if rule["alert"] == "InferchaosRayNodeLost" else "60s"), rule
        assert rule["annotations"]["summary"], rule
    per_replica = [r for r in rules if "by (pod)" in r["expr"] and "group_left" not in r["expr"]]
    assert per_replica and all("$labels.pod" in r["annotations"]["summary"] for r in per_replica)


# One stretch of a flood, one value per second (``_``: no reading that second).
FLOOD_KV = "0.77 _ 0.84 0.9 0.48 _ 0.84 0.94 _ 0 0.35 0.35 0.35 0.84 0.9 0.97"
FLOOD_WAITING = "4 _ 4 5 0 _ 1 4 _ 0 0 0 0 1 3 1"

# Per alert: the series on which it must fire (promtool's expanding notation, one value per
# second) and the labels it fires with.
FIRING: Mapping[str, tuple[list[dict[str, str]], dict[str, str]]] = {
    # replica-1 in a recorded kv_flood (a --prometheus game day, bench/RESULTS.md), the fault's first
    # 22 s twice over: the cache saws as the flood's requests finish, and full with requests
    # waiting never lasts a second read in a row.
    "InferchaosKVCacheFull": (
        [
            {
                "series": 'vllm:kv_cache_usage_perc{job="vllm",replica="replica-1"}',
                "values": f"0x5 {FLOOD_KV} {FLOOD_KV}",
            },
            {
                "series": 'vllm:num_requests_waiting{job="vllm",replica="replica-1"}',
                "values": f"0x5 {FLOOD_WAITING} {FLOOD_WAITING}",
            },
            {"series": 'vllm:num_preemptions_total{job="vllm",replica="replica-1"}', "values": "0x37"},
        ],
        {"replica": "replica-1"},
    ),
    "InferchaosEngineStalled": (
        [
            {"series": 'vllm:generation_tokens_total{job="vllm",replica="replica-0"}', "values": "0+20x60"},
            {
                "series": 'vllm:generation_tokens_total{job="vllm",replica="replica-1"}',
                "values": "0+20x30 600x30",
            },
            {
                "series": 'ray_serve_replica_processing_queries{job="ray",deployment="vllm",replica="a"}',
                "values": "1x60",
            },
        ],
        {"replica": "replica-1"},
    ),
    "InferchaosReplicaSlowerThanPeers": (
        [
            {
                "series": 'replica:vllm_time_to_first_token_seconds:p95_rate5s{replica="replica-0"}',
                "values": "0.05x30",
            },
            {
                "series": 'replica:vllm_time_to_first_token_seconds:p95_rate5s{replica="replica-1"}',
                "values": "0.05 2x30",
            },
        ],
        {"replica": "replica-1"},
    ),
    "InferchaosReplicaNotAnswering": (
        [{"series": 'up{job="vllm",replica="replica-0"}', "values": "1 0x30"}],
        {"replica": "replica-0"},
    ),
    "InferchaosPlacementGroupPendingWithFreeGPUs": (
        [
            {"series": 'ray_gcs_placement_group_count{job="ray",State="Pending"}', "values": "0 1x30"},
            {"series": 'ray_resources{job="ray",Name="GPU",State="AVAILABLE"}', "values": "2x30"},
        ],
        {},
    ),
    "InferchaosActorsClimbingWhileWorkWaits": (
        [
            {"series": 'ray_actors{job="ray",Source="gcs",State="ALIVE"}', "values": "4x60 6x30"},
            {"series": 'ray_tasks{job="ray",State="PENDING_NODE_ASSIGNMENT"}', "values": "0x60 1x30"},
        ],
        {},
    ),
    # The GCS's counter appears with its first dead node (the monitor's count of active nodes
    # stays where it was: a lost node's gauge keeps its 1).
    "InferchaosRayNodeLost": (
        [
            {"series": 'ray_node_failure_total{job="ray"}', "values": "_x10 1x5"},
            {"series": 'ray_cluster_active_nodes{job="ray",node_type="node_a"}', "values": "1x15"},
        ],
        {},
    ),
    "InferchaosGcsGone": (
        [{"series": 'ray_cluster_active_nodes{job="ray"}', "values": "3x10 _x30"}],
        {"job": "ray"},
    ),
    "InferchaosServeControllerGone": (
        [{"series": 'ray_serve_controller_control_loop_duration_s{job="ray"}', "values": "0.1x10 _x30"}],
        {"job": "ray"},
    ),
    "InferchaosPodUnschedulable": (
        [{"series": 'kube_pod_status_unschedulable{namespace="inference",pod="vllm-2"}', "values": "0 1x30"}],
        {"namespace": "inference", "pod": "vllm-2"},
    ),
    "InferchaosNodeNotReady": (
        [
            {
                "series": 'kube_node_status_condition{node="gpu-1",condition="Ready",status="true"}',
                "values": "1 0x30",
            }
        ],
        {"node": "gpu-1"},
    ),
    "InferchaosDeviceMemoryOutsideReplicas": (
        [
            {"series": 'DCGM_FI_DEV_FB_USED{Hostname="gpu-1",gpu="0",pod=""}', "values": "0 60000x30"},
            {"series": 'DCGM_FI_DEV_FB_USED{Hostname="gpu-1",gpu="1",pod="vllm-0"}', "values": "70000x30"},
        ],
        {"Hostname": "gpu-1", "gpu": "0"},
    ),
    "InferchaosWorkerLinkSlow": (
        [
            {"series": 'scrape_duration_seconds{job="ray",node="worker-1"}', "values": "0.01x30"},
            {"series": 'scrape_duration_seconds{job="ray",node="worker-2"}', "values": "0.01 0.41x30"},
        ],
        {"node": "worker-2"},
    ),
    "InferchaosWorkerUnreachable": (
        [{"series": 'up{job="ray",node="worker-2"}', "values": "1 0x30"}],
        {"node": "worker-2"},
    ),
}


def test_every_alert_has_a_firing_case() -> None:
    assert set(FIRING) == {alert.name for alert in alerts(LOCAL)}


@needs_promtool
@pytest.mark.parametrize("name", sorted(FIRING))
def test_the_alert_fires_on_its_signature(name: str, tmp_path: Path) -> None:
    series, labels = FIRING[name]
    alert = next(a for a in alerts(LOCAL) if a.name == name)
    # The last second of the series, when the condition has held far longer than ``for:``.
    end = max(_seconds(s["values"]) for s in series)
    expected = {**labels, "severity": alert.severity, "layer": alert.layer}
    summary = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], alert.summary)
    fired = {"exp_labels": expected, "exp_annotations": {"summary": summary, "signature": alert.signature}}
    test = {
        "interval": "1s",
        "input_series": series,
        "alert_rule_test": [{"eval_time": f"{end - 1}s", "alertname": name, "exp_alerts": [fired]}],
    }
    result = promtool_test(tmp_path, [test])
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_a_scrape_of_the_head_missed_does_not_fire_a_lost_node_again(tmp_path: Path) -> None:
    """A node died 30 s before; the head's scrape then failed twice under load (its series
    stale for 2 s). The count is where it was: no new death, no alert."""
    series = [{"series": 'ray_node_failure_total{job="ray"}', "values": "_x10 2x30 stale stale 2x20"}]
    checks = [
        {"eval_time": f"{t}s", "alertname": "InferchaosRayNodeLost", "exp_alerts": []}
        for t in (44, 47, 52, 60)
    ]
    result = promtool_test(tmp_path, [{"interval": "1s", "input_series": series, "alert_rule_test": checks}])
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_a_lost_node_stops_firing_once_its_event_window_is_over(tmp_path: Path) -> None:
    """The GCS's count stays where the death left it: the alert must not fire on into the next
    scenario's baseline (a game day runs them back to back), nor fire again for the same death."""
    test = {
        "interval": "1s",
        "input_series": [{"series": 'ray_node_failure_total{job="ray"}', "values": "_x10 1x40"}],
        "alert_rule_test": [
            {
                "eval_time": f"{10 + LOCAL.event_window_s + 2:g}s",
                "alertname": "InferchaosRayNodeLost",
                "exp_alerts": [],
            }
        ],
    }
    result = promtool_test(tmp_path, [test])
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_recorded_baselines_hold_every_layer_the_alerts_read_locally() -> None:
    runs = healthy_series()
    assert len(runs) == 12
    for run, series in runs.items():
        names = {s["series"].split("{")[0] for s in series}
        assert {
            "vllm:num_requests_running",
            "vllm:generation_tokens_total",
            "ray_cluster_active_nodes",
            "ray_actors",
            "up",
        } <= names, run


@needs_promtool
def test_no_alert_condition_holds_on_the_recorded_healthy_baselines(tmp_path: Path) -> None:
    """Each alert's expression, evaluated at every second of each recorded baseline, selects
    nothing: a stricter test than the alert's (its ``for:`` would hide a condition shorter than
    a baseline), so a false alarm cannot hide behind a short recording."""
    tests = []
    for series in healthy_series().values():
        seconds = max(len(s["values"].split()) for s in series)
        checks = [
            {"expr": alert.expr, "eval_time": f"{t}s", "exp_samples": []}
            for alert in alerts(LOCAL)
            # Absent series are what these two read: a baseline of a local environment carries
            # neither a Serve controller metric nor a kube-state-metrics or DCGM exporter.
            if alert.name not in ("InferchaosServeControllerGone",)
            and not alert.expr.startswith(("max by (namespace", "max by (node) (kube", "max by (Hostname"))
            for t in range(1, seconds)
        ]
        tests.append({"interval": "1s", "input_series": series, "promql_expr_test": checks})
    result = promtool_test(tmp_path, tests)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
