"""Alerting rules for the three layers and the device: what a platform team deploys, and what a
game day proves.

One alert per signature of the three-layer playbook (a KV cache full while requests wait, a
placement group PENDING while GPUs are free, live actors climbing while GPU work waits, Pods
unschedulable, a node lost, device memory taken outside the replicas) and one per gray failure
(an engine that answers ``/health`` but generates nothing, a replica many times slower than its
peers, a replica or a worker that does not answer, the Serve controller or the GCS gone). Each
carries ``for:``, a ``severity``, a ``layer`` label (``vllm`` | ``ray`` | ``k8s`` | ``device`` |
``network``) and a summary naming the replica or node.

They read the real metric names of vLLM (primitives/vllm_metrics.py), Ray's metrics agent
(``ray_*``), kube-state-metrics and NVIDIA's DCGM exporter, and the recording rules of
primitives/vllm_promql.py, which the file carries in the same document. Like those, they are
generated from one source, :func:`alert_rules_document`: ``deploy/prometheus/inferchaos-rules.yml``
is its output for a cluster's labels (:data:`CLUSTER`); the local environment's Prometheus loads
its output for that environment's labels (environments/local/prometheus_server.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from inferchaos.primitives.prometheus_api import promql_duration
from inferchaos.primitives.ray_metrics import ACTIVE_NODES, NODE_FAILURES
from inferchaos.primitives.vllm_metrics import (
    GENERATION_TOKENS,
    KV_USAGE,
    OLDER_NAMES,
    PREEMPTIONS,
    TTFT,
    WAITING,
)
from inferchaos.primitives.vllm_promql import PromVllmSelector

ALERT_GROUP = "inferchaos_alerts"
# Every alert's name starts so: a team's ALERTS series tell inferchaos' apart from their own.
PREFIX = "Inferchaos"
LAYERS = ("vllm", "ray", "k8s", "device", "network")
# A KV cache this full with requests waiting is out of room (vLLM preempts past it).
KV_FULL = 0.9
# A replica whose p95 time to first token is this many times the fastest replica's, and at
# least FLOOR_S, is slower than its peers.
SLOWER_THAN_PEERS = 4.0
SLOW_FLOOR_S = 0.5
# Device memory in use on a GPU no Pod holds, in MiB (DCGM's unit): more than a driver's own.
SQUAT_MIB = 1024
# A Ray node whose metrics agent never answered a scrape in under LINK_FLOOR_S over a while, and
# took this many times the quickest node's, sits behind a slow link: a scrape is a round trip or
# more over it.
SLOWER_LINK = 5.0
LINK_FLOOR_S = 0.15


@dataclass(frozen=True)
class AlertLabels:
    """Where the rules find each layer's series, and how long each condition must last.

    ``vllm`` is the replicas' selector (its replica label and rate window, shared with the
    recording rules); ``ray_matchers`` select Ray's metrics agents, ``node_label`` names a
    Ray node's target; ``hold_s`` is every alert's ``for:`` and ``trend_s`` the stretch over
    which a count is seen to climb or drop.
    """

    vllm: PromVllmSelector
    ray_matchers: str = 'job="ray"'
    node_label: str = "instance"
    hold_s: float = 60.0
    trend_s: float = 600.0
    # How long a replica must generate nothing, while Serve holds requests, to be stalled: long
    # enough that the router cannot have passed it over by chance, and longer than Ray's report.
    stall_window_s: float = 300.0
    # How long a node's scrapes must all be slow for its link to be: longer than a busy spell.
    link_window_s: float = 120.0
    # The stretch over which a KV cache that filled and requests that waited count as one flood:
    # a flood's requests finish and are replaced, so the cache saws between half and full and the
    # queue empties for a read or two (a recorded kv_flood never held both for 5 s at once).
    pressure_window_s: float = 120.0
    # How long an alert on an event (a node declared dead) fires after it: long enough to be
    # seen, short enough not to fire on into the next game-day scenario.
    event_window_s: float = 300.0

    def ray(self, metric: str, *extra: str) -> str:
        inner = ",".join(m for m in (self.ray_matchers, *extra) if m)
        return f"{metric}{{{inner}}}" if inner else metric


# A cluster's Prometheus: vLLM's Pods scraped by a PodMonitor (the Pod names the replica), a
# scrape every 15 s (a rate window holds four), Ray's head and workers in job "ray".
CLUSTER = AlertLabels(
    vllm=PromVllmSelector(replica_label="pod", matchers='job="vllm"', window_s=60.0),
)


@dataclass(frozen=True)
class Alert:
    """One alerting rule, and the signature of the playbook it stands for."""

    name: str
    layer: str
    severity: str
    expr: str
    summary: str
    signature: str
    # The metrics it reads: what `alerts check` matches a team's own rules by.
    reads: tuple[str, ...] = field(default_factory=tuple)
    # The suite's faults whose signature this is (``<layer>.<verb>``).
    faults: tuple[str, ...] = field(default_factory=tuple)
    # False for an event that cannot flap (a counter Ray raises once it has declared a node
    # dead, after its own health checks): its rule fires at once, ``for: 0s``.
    holds: bool = True

    def rule(self, hold_s: float) -> dict[str, Any]:
        """The rule as a Prometheus rules file holds it."""
        return {
            "alert": self.name,
            "expr": self.expr,
            "for": promql_duration(hold_s if self.holds else 0.0),
            "labels": {"severity": self.severity, "layer": self.layer},
            "annotations": {"summary": self.summary, "signature": self.signature},
        }


def alerts(labels: AlertLabels) -> tuple[Alert, ...]:
    """Every alert, for ``labels``' series."""
    v, by = labels.vllm, labels.vllm.replica_label
    window, trend = promql_duration(v.window_s), promql_duration(labels.trend_s)
    kv = "|".join(name.removeprefix("vllm:") for name in (KV_USAGE, *OLDER_NAMES[KV_USAGE]))
    kv_matcher = '__name__=~"vllm:(' + kv + ')"'
    pressure = promql_duration(labels.pressure_window_s)
    kv_peak = f"max by ({by}) (max_over_time({v.selector('', kv_matcher)}[{pressure}]))"
    waited = f"max by ({by}) (max_over_time({v.selector(WAITING)}[{pressure}]))"
    preempting = f"sum by ({by}) (rate({v.selector(PREEMPTIONS)}[{window}]))"
    ttft = next(r.record for r in v.recording_rules() if r.key == "vllm.ttft_p95_s")
    pending_pgs = "sum(" + labels.ray("ray_gcs_placement_group_count", 'State=~"Pending|Infeasible"') + ")"
    free_gpus = "sum(" + labels.ray("ray_resources", 'Name="GPU"', 'State="AVAILABLE"') + ")"
    alive = labels.ray("ray_actors", 'Source="gcs"', 'State="ALIVE"')
    pending_tasks = "sum(" + labels.ray("ray_tasks", 'State="PENDING_NODE_ASSIGNMENT"') + ")"
    pending_actors = "sum(" + labels.ray("ray_actors", 'Source="gcs"', 'State="PENDING_CREATION"') + ")"
    waiting_work = f"{pending_tasks} > 0 or {pending_pgs} > 0 or {pending_actors} > 0"
    # Not the monitor's count of active nodes: without an autoscaler it keeps a lost node's 1.
    failures = f"sum({labels.ray(NODE_FAILURES)})"
    event = promql_duration(labels.event_window_s)
    # Its highest count over a while before the last event window: a max over a stretch, so a
    # scrape of the head that failed under load is no drop (a point read there once made a
    # long-past death fire again), and 0 only where no node ever died.
    failures_before = f"sum(max_over_time({labels.ray(NODE_FAILURES)}[{trend}] offset {event}))"
    node = labels.node_label
    # A hung engine freezes every vLLM series where it stood (requests running included), so it
    # shows as a replica generating nothing for a while when the deployment has traffic.
    stall_window = promql_duration(labels.stall_window_s)
    stalled = f"sum by ({by}) (rate({v.selector(GENERATION_TOKENS)}[{stall_window}]))"
    # Requests Serve's replicas hold now: traffic that a replica generating nothing cannot be idle
    # for (it reports every 10 s, within the stall window, so stopped traffic clears it first).
    in_flight = labels.ray("ray_serve_replica_processing_queries")
    # A busy node's scrape is slow now and then; one behind a slow link is never quick.
    scrape = f"max by ({node}) (min_over_time({labels.ray('scrape_duration_seconds')}[{promql_duration(labels.link_window_s)}]))"
    return (
        Alert(
            f"{PREFIX}KVCacheFull",
            "vllm",
            "warning",
            f"({kv_peak} >= {KV_FULL:g} or {preempting} > 0) and on ({by}) {waited} > 0",
            f"{{{{ $labels.{by} }}}}: KV cache {KV_FULL:.0%} full or preempting while requests wait "
            f"(within {pressure})",
            "kv_cache_flood",
            (KV_USAGE, WAITING, PREEMPTIONS),
            ("vllm.flood_kv_cache",),
        ),
        Alert(
            f"{PREFIX}EngineStalled",
            "vllm",
            "critical",
            f"{stalled} == 0 and on () sum({in_flight}) > 0",
            f"{{{{ $labels.{by} }}}}: no token generated for {stall_window} while Serve has requests in flight "
            "(a hung engine answers /health)",
            "engine_hang",
            (GENERATION_TOKENS,),
            ("vllm.hang_engine",),
        ),
        Alert(
            f"{PREFIX}ReplicaSlowerThanPeers",
            "vllm",
            "warning",
            f"{ttft} > on () group_left () ({SLOWER_THAN_PEERS:g} * min({ttft})) and {ttft} > {SLOW_FLOOR_S:g}",
            f"{{{{ $labels.{by} }}}}: p95 time to first token {SLOWER_THAN_PEERS:g}x the fastest replica's",
            "slow_replica",
            (f"{TTFT}_bucket",),
            ("vllm.slow_engine",),
        ),
        Alert(
            f"{PREFIX}ReplicaNotAnswering",
            "vllm",
            "critical",
            f"max by ({by}) ({v.selector('up')}) == 0",
            f"{{{{ $labels.{by} }}}}: its /metrics does not answer",
            "replica_down",
            ("up",),
            ("vllm.kill_engine",),
        ),
        Alert(
            f"{PREFIX}PlacementGroupPendingWithFreeGPUs",
            "ray",
            "warning",
            f"{pending_pgs} > 0 and on () {free_gpus} > 0",
            "a placement group is PENDING while GPUs are free (strict placement cannot fit)",
            "placement_group_stall",
            ("ray_gcs_placement_group_count", "ray_resources"),
            ("ray.stall_placement_group",),
        ),
        Alert(
            f"{PREFIX}ActorsClimbingWhileWorkWaits",
            "ray",
            "warning",
            f"(sum({alive}) - sum({alive} offset {trend})) > 0 and on () ({waiting_work})",
            f"live actors grew over {trend} while GPU work waits (an actor leak)",
            "actor_leak",
            ("ray_actors", "ray_tasks", "ray_gcs_placement_group_count"),
            ("ray.leak_actors",),
        ),
        Alert(
            f"{PREFIX}RayNodeLost",
            "ray",
            "critical",
            f"{failures} > ({failures_before} or vector(0))",
            f"the GCS declared a Ray node dead in the last {event}",
            "node_loss",
            (NODE_FAILURES,),
            ("ray.kill_node",),
            holds=False,
        ),
        Alert(
            f"{PREFIX}GcsGone",
            "ray",
            "critical",
            f"absent_over_time({labels.ray(ACTIVE_NODES)}[{window}])",
            "the GCS gives no count of Ray's nodes (the GCS or its monitor is gone)",
            "gcs_loss",
            (ACTIVE_NODES,),
            ("ray.kill_gcs",),
        ),
        Alert(
            f"{PREFIX}ServeControllerGone",
            "ray",
            "critical",
            f"absent_over_time({labels.ray('ray_serve_controller_control_loop_duration_s')}[{window}])",
            "the Serve controller reports no control loop",
            "serve_controller_loss",
            ("ray_serve_controller_control_loop_duration_s",),
            ("ray.kill_serve_controller",),
        ),
        Alert(
            f"{PREFIX}PodUnschedulable",
            "k8s",
            "warning",
            "max by (namespace, pod) (kube_pod_status_unschedulable) == 1",
            "{{ $labels.namespace }}/{{ $labels.pod }}: Pending, unschedulable",
            "pods_pending",
            ("kube_pod_status_unschedulable",),
            ("k8s.squat_gpu_ledger", "k8s.force_anti_affinity_deadlock", "k8s.taint_gpu_nodes"),
        ),
        Alert(
            f"{PREFIX}NodeNotReady",
            "k8s",
            "critical",
            'max by (node) (kube_node_status_condition{condition="Ready",status="true"}) == 0',
            "{{ $labels.node }}: not Ready",
            "k8s_node_loss",
            ("kube_node_status_condition",),
            ("k8s.stop_node_container", "k8s.cordon_node", "k8s.drain_node", "k8s.delete_node"),
        ),
        Alert(
            f"{PREFIX}DeviceMemoryOutsideReplicas",
            "device",
            "warning",
            f'max by (Hostname, gpu) (DCGM_FI_DEV_FB_USED{{pod=""}}) > {SQUAT_MIB}',
            "{{ $labels.Hostname }} GPU {{ $labels.gpu }}: memory in use that no Pod holds",
            "gpu_memory_squat",
            ("DCGM_FI_DEV_FB_USED",),
            ("device.squat_device_memory",),
        ),
        Alert(
            f"{PREFIX}WorkerLinkSlow",
            "network",
            "warning",
            f"{scrape} > on () group_left () ({SLOWER_LINK:g} * min({scrape})) and {scrape} > {LINK_FLOOR_S:g}",
            f"{{{{ $labels.{node} }}}}: every scrape of its metrics agent takes {SLOWER_LINK:g}x the quickest node's",
            "slow_link",
            ("scrape_duration_seconds",),
            ("network.degrade_link",),
        ),
        Alert(
            f"{PREFIX}WorkerUnreachable",
            "network",
            "critical",
            f"max by ({node}) ({labels.ray('up')}) == 0",
            f"{{{{ $labels.{node} }}}}: Ray's metrics agent does not answer (node down or cut off)",
            "network_partition",
            ("up",),
            ("network.partition_node",),
        ),
    )


def alert_rules_document(labels: AlertLabels) -> dict[str, Any]:
    """The rules file: the vLLM recording rules the alerts read, then the alerts."""
    recording = labels.vllm.rules_document()["groups"]
    rules = [alert.rule(labels.hold_s) for alert in alerts(labels)]
    return {"groups": [*recording, {"name": ALERT_GROUP, "rules": rules}]}


def alert_rules_yaml(labels: AlertLabels, header: Sequence[str] = ()) -> str:
    """:func:`alert_rules_document` as YAML, after ``header`` comment lines."""
    comments = "".join(f"# {line}\n" if line else "#\n" for line in header)
    return comments + yaml.safe_dump(alert_rules_document(labels), sort_keys=False, width=120)


DEPLOY_HEADER = (
    "inferchaos' alerting rules for a cluster's Prometheus, generated by",
    "`python -m inferchaos.primitives.alert_rules` (inferchaos/primitives/alert_rules.py); edit that, not this.",
    "",
    "Load it with rule_files: in prometheus.yml, or as the spec of a PrometheusRule (prometheus-operator).",
    "It expects vLLM's Pods in job vllm (the Pod names the replica), Ray's metrics agents in job ray,",
    "kube-state-metrics, and NVIDIA's DCGM exporter in Kubernetes mode (it labels a GPU with the Pod holding it).",
)


def main() -> None:
    """Print the cluster's rules file (deploy/prometheus/inferchaos-rules.yml)."""
    print(alert_rules_yaml(CLUSTER, DEPLOY_HEADER), end="")


if __name__ == "__main__":
    main()


def alerts_for(fault: str, labels: AlertLabels) -> tuple[Alert, ...]:
    """The alerts whose signature ``fault`` (``<layer>.<verb>``) shows."""
    return tuple(alert for alert in alerts(labels) if fault in alert.faults)
