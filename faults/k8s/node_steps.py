"""Reading and cordoning nodes: the small steps the node faults are made of."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from inferchaos.primitives.kube.api import api_errors

if TYPE_CHECKING:
    from kubernetes.client import CoreV1Api, V1Node

DAEMONSET_KIND = "DaemonSet"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


def read_node(core: CoreV1Api, name: str) -> V1Node:
    """The node called ``name``; K8sError when it cannot be read."""
    with api_errors(f"read node {name}"):
        return core.read_node(name)


def set_unschedulable(core: CoreV1Api, name: str, unschedulable: bool) -> None:
    """Cordon (True) or uncordon (False) ``name``.

    Uncordoning deletes the field rather than writing false: the API server omits a false
    ``unschedulable``, so the node reads back exactly as it did before it was cordoned.
    """
    with api_errors(f"{'cordon' if unschedulable else 'uncordon'} node {name}"):
        core.patch_node(name, {"spec": {"unschedulable": True if unschedulable else None}})


def is_unschedulable(node: V1Node) -> bool:
    """Whether ``node`` is cordoned."""
    return bool(node.spec and node.spec.unschedulable)


def ready_status(node: V1Node) -> str:
    """The status of the node's Ready condition: "True", "False", or "Unknown" (also when absent)."""
    for condition in (node.status.conditions if node.status else None) or []:
        if condition.type == "Ready":
            return str(condition.status)
    return "Unknown"


def owner_kinds(pod: Any) -> set[str]:
    """Kinds of the controllers that own ``pod`` (a V1Pod)."""
    return {ref.kind for ref in (pod.metadata.owner_references or [])}


def is_mirror_pod(pod: Any) -> bool:
    """A static Pod's read-only mirror: the kubelet owns it, the API cannot evict it."""
    return MIRROR_ANNOTATION in (pod.metadata.annotations or {})
