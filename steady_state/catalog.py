"""Every probe name the steady-state layer knows, so experiments can be checked before a run.

A probe *name* is ``<layer>.<reading>`` (``vllm.kv_cache_usage``); labels such as
``replica`` or ``class`` are not part of the name. A Probe *object* (what the sampler polls)
is named ``<layer>`` or ``<layer>@<instance>`` (``vllm@replica-0``); the sampler writes that
name, and the Probe object's own labels (``replica=replica-0``), on the error row of a read
that failed, so the layer and the instance at fault stay visible.
"""

from __future__ import annotations

from inferchaos.layers import Layer

# A replica's last cold start (steady_state/cold_start.py): what recovery windows may scale by.
COLD_START = "vllm.cold_start_s"

VLLM_PROBES: frozenset[str] = frozenset(
    {
        "vllm.num_requests_running",
        "vllm.num_requests_waiting",
        "vllm.kv_cache_usage",
        "vllm.kv_cache_capacity_tokens",
        "vllm.num_preemptions_total",
        "vllm.preemption_rate",
        "vllm.prompt_tokens_total",
        "vllm.generation_tokens_total",
        "vllm.ttft_p50_s",
        "vllm.ttft_p95_s",
        "vllm.ttft_p99_s",
        "vllm.itl_p50_s",
        "vllm.itl_p95_s",
        "vllm.e2e_p50_s",
        "vllm.e2e_p95_s",
        "vllm.healthy",
        COLD_START,
    }
)

CANARY_PROBES: frozenset[str] = frozenset(
    # routed, routed_original (the first server seen under the name): {replica};
    # oldest_wait_s: the oldest request in flight still without a first token.
    {
        "canary.success",
        "canary.ttft_s",
        "canary.itl_s",
        "canary.e2e_s",
        "canary.routed",
        "canary.routed_original",
        "canary.oldest_wait_s",
    }
)

RAY_PROBES: frozenset[str] = frozenset(
    {
        "ray.nodes_alive",
        "ray.nodes_dead",
        "ray.gpus_total",
        "ray.gpus_available",
        "ray.cpus_total",
        "ray.cpus_available",
        "ray.actors",  # {state, class}
        "ray.actors_alive",  # {class}
        "ray.tasks",  # {state}
        "ray.tasks_pending_node_assignment",
        "ray.pgs",  # {state, strategy}
        "ray.pending_pgs",
        "ray.pg_pending_age_s",  # {pg, strategy}
        # Ray Serve's own view of its replicas (steady_state/serve.py).
        "ray.serve_replicas",  # {app, deployment, state}: replicas per state
        "ray.serve_replica",  # {app, deployment, replica, state}: 1 RUNNING, 0 otherwise
    }
)

DEVICE_PROBES: frozenset[str] = frozenset(
    {"device.free_bytes", "device.used_bytes", "device.total_bytes", "device.available"}
)

K8S_PROBES: frozenset[str] = frozenset(
    {
        "k8s.pods_pending",  # {namespace}
        "k8s.pods_unschedulable",  # {namespace, reason}: FailedScheduling's message (kube API) or Unschedulable / SchedulingGated (kube-state-metrics)
        "k8s.nodes_ready",
        # Also read by steady_state/k8s.py.
        "k8s.nodes_schedulable",
        "k8s.pod_restarts",  # {pod}
        "k8s.deployment_ready_replicas",
        "k8s.deployment_available_replicas",
        "k8s.raycluster_ready_workers",
        "k8s.raycluster_desired_workers",
        "k8s.raycluster_provisioned",
        "k8s.raycluster_head_ready",
    }
)

# Read from the head's side of each worker's link (steady_state/network_probe.py); {node}.
NETWORK_PROBES: frozenset[str] = frozenset({"network.node_reachable", "network.handshake_rtt_s"})

# The alerts the environment's Prometheus fires (steady_state/prometheus_alerts.py): firing and
# pending {alertname, layer, ...its own labels}, 1 per alert; firing_count, every tick it read;
# unscraped {metric}, 1 per metric an alert reads that Prometheus holds no series of.
ALERT_PROBES: frozenset[str] = frozenset(
    {"alerts.firing", "alerts.pending", "alerts.firing_count", "alerts.unscraped"}
)

KNOWN_PROBES: frozenset[str] = (
    VLLM_PROBES | CANARY_PROBES | RAY_PROBES | DEVICE_PROBES | K8S_PROBES | NETWORK_PROBES | ALERT_PROBES
)

# One family per layer; a probe name outside every family cannot belong to any layer.
PROBE_FAMILIES: tuple[str, ...] = tuple(f"{layer.value}." for layer in Layer)

# Families whose reading names are not fixed in advance: Locust names its statistics after
# the load shape, so any ``load.*`` name is accepted. Every other family is checked by name,
# because a typo such as ``vllm.kv_cache_usge`` would otherwise be an SLO that never sees data.
OPEN_FAMILIES: tuple[str, ...] = ("load.",)

# Rows that carry phase marks in timeline.csv, e.g. ``phase.injected``.
PHASE_PREFIX = "phase."


def probe_layer(name: str) -> str:
    """The layer part of a probe name or a Probe object name (``vllm@replica-0`` -> ``vllm``)."""
    return name.split("@", 1)[0].split(".", 1)[0]
