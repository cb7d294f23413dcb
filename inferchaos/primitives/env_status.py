"""The status every environment (local, kind, cluster) reports, in the shape `env status --json` prints.

The contract itself is :class:`inferchaos.primitives.capabilities.Environment`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class NodeStatus:
    node_id: str
    alive: bool
    is_head: bool
    gpus: float
    cpus: float
    name: str = ""
    # Ray's address of the node, and the network namespace it runs in ("": the host's).
    address: str = ""
    namespace: str = ""


@dataclass
class RayStatus:
    address: str
    dashboard_url: str
    nodes: list[NodeStatus] = field(default_factory=list)

    @property
    def alive_nodes(self) -> list[NodeStatus]:
        return [n for n in self.nodes if n.alive]


@dataclass
class ReplicaStatus:
    name: str
    url: str
    metrics_url: str
    node_id: str
    healthy: bool
    state: str = ""
    pid: int = 0


@dataclass
class VllmStatus:
    replicas: list[ReplicaStatus] = field(default_factory=list)
    # What the platform's health check of a replica asks: "progress" (requests must make
    # progress), "plain" (vLLM's /health) or "unknown" where inferchaos cannot tell.
    health_check: str = "unknown"


@dataclass
class FrontDoorStatus:
    url: str
    healthy: bool


@dataclass
class ModelStatus:
    name: str
    max_model_len: int
    path: str = ""


@dataclass
class PrometheusStatus:
    """Where the environment's Prometheus answers, and how its series name the vLLM replicas.

    ``matchers`` select the replicas' ``/metrics`` series (``job="vllm"``); ``health_matchers``,
    where a job scrapes each replica's ``/health``, select that job's ``up``; ``ray_matchers``
    select the Ray cluster's own ``ray_*`` series (``job="ray"``); ``kube_matchers`` the cluster's
    kube-state-metrics series (``job="kube-state-metrics"``), on kind and cluster.
    """

    url: str
    replica_label: str = "pod"
    matchers: str = ""
    health_matchers: str | None = None
    rate_window_s: float = 60.0
    ray_matchers: str = ""
    kube_matchers: str = ""


@dataclass
class NetworkStatus:
    """How the nodes are networked: ``netns`` (a namespace per worker, on ``subnet``, the head at
    ``head_address``) or ``loopback`` (no links between nodes; ``reason`` says why)."""

    mode: str
    subnet: str = ""
    head_address: str = ""
    reason: str = ""


@dataclass
class EnvStatus:
    """What `inferchaos env status --json` prints; the keys are a contract for users' scripts."""

    env: str
    up: bool
    ray: RayStatus
    vllm: VllmStatus
    front_door: FrontDoorStatus
    model: ModelStatus
    # The probes read vLLM through it when set (`env up --prometheus`, a config's prometheus.url).
    prometheus: PrometheusStatus | None = None
    # The local environment's; None where inferchaos does not make the network (kind, cluster).
    network: NetworkStatus | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
