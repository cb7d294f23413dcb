"""The layers inferchaos reasons about, micro first (the triage order of the README's layer table)."""

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
