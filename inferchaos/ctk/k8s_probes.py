"""Chaos Toolkit probes for the Kubernetes experiments, read as facts.

A plain ``chaos run`` of ``experiments/k8s_node_loss.yaml`` and its siblings uses these for its
steady-state hypothesis and to record whether the fault bit; the inferchaos runner samples
:mod:`steady_state.k8s` instead and ignores them. ``configuration`` is described in
:mod:`faults.k8s.configuration`.
"""

from __future__ import annotations

import logging
from typing import Any

from inferchaos.ctk import fault_adapter
from inferchaos.faults.base import JsonObject
from inferchaos.faults.k8s.configuration import Configuration, Secrets, env_from_configuration
from inferchaos.primitives.kube.api import api_errors

logger = logging.getLogger(__name__)

# What Chaos Toolkit's discovery lists (inferchaos/ctk/discovery.py).
__all__ = ["deployment_must_be_ready", "fault_effect"]


def deployment_must_be_ready(
    namespace: str, deployment: str, configuration: Configuration = None, secrets: Secrets = None
) -> bool:
    """True when every wanted replica of ``deployment`` is ready."""
    env = env_from_configuration(configuration, secrets)
    try:
        with api_errors(f"read deployment {namespace}/{deployment}"):
            found: Any = env.k8s.apps.read_namespaced_deployment(deployment, namespace)
    finally:
        env.k8s.api_client.close()
    return (found.status.ready_replicas or 0) >= (found.spec.replicas or 0)


def fault_effect(fault: str, configuration: Configuration = None, secrets: Secrets = None) -> JsonObject:
    """Evidence of every live ledger entry of ``fault`` (``k8s.<verb>``): did it bite, and how."""
    if "." not in fault:
        # Before 0.2 this probe took the bare verb and added the layer itself.
        logger.warning("fault name %r is deprecated: use %r", fault, f"k8s.{fault}")
        fault = f"k8s.{fault}"
    return fault_adapter.fault_effect(fault, configuration, secrets)
