"""The probes a run samples, built from what the environment says about its layers."""

from __future__ import annotations

import importlib
import logging
from typing import Any

from inferchaos.environments.k8s_env import K8sEnvironment
from inferchaos.steady_state.base import Probe
from inferchaos.steady_state.canary import CanaryConfig, CanaryProbe
from inferchaos.steady_state.k8s import K8sProbe
from inferchaos.steady_state.ray import RayProbe
from inferchaos.steady_state.vllm import VllmProbe

logger = logging.getLogger(__name__)


def build_probes(env: Any, canary_rate_per_s: float = 2.0) -> tuple[list[Probe], CanaryProbe]:
    """Every probe for ``env``: one per vLLM replica, the canary, Ray, the device if known, Kubernetes if any."""
    status = env.status()
    probes: list[Probe] = [
        VllmProbe(r.name, r.metrics_url, r.url.rstrip("/") + "/health")
        for r in sorted(status.vllm.replicas, key=lambda r: r.name)
    ]
    canary = CanaryProbe(
        CanaryConfig(base_url=status.front_door.url, model=status.model.name, rate_per_s=canary_rate_per_s)
    )
    probes.append(canary)
    state = env.load_state()
    probes.append(RayProbe(state.dashboard_url, env.connect_ray))
    # An environment whose GPUs are on cluster nodes says so: this host's devices are not theirs.
    device = _device_probe(env) if getattr(env, "local_devices", True) else None
    if device is not None:
        probes.append(device)
    # Environments with a kube API (kind, cluster) get the Kubernetes-layer probe.
    if isinstance(env, K8sEnvironment):
        probes.append(k8s_probe_of(env))
    return probes, canary


def _device_probe(env: Any) -> Probe | None:
    """The device probe, where the device layer is installed (it reports unavailability itself)."""
    try:
        module = importlib.import_module("inferchaos.steady_state.device")
    except ImportError:
        logger.info("no device probe in this installation")
        return None
    factory = getattr(module, "device_probe_for", None)
    return factory(env) if factory is not None else None


def k8s_probe_of(env: K8sEnvironment) -> K8sProbe:
    """The Kubernetes-layer probe of a kind or cluster environment, scoped by its config."""
    return K8sProbe(env.k8s.api_client, env.config.kube.namespace, env.config.allow.node_selector)
