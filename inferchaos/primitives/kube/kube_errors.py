"""Errors of the Kubernetes layer, inside the one inferchaos error tree."""

from __future__ import annotations

from inferchaos.errors import FaultError


class K8sError(FaultError):
    """The Kubernetes API or the node container runtime refused or failed a fault's action."""
