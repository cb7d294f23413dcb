"""The Kubernetes layer, read as facts: nodes, Deployments, Pods, KubeRay clusters, Pending reasons.

:class:`K8sProbe` turns one read of the cluster into Samples:

- ``k8s.nodes_ready``, ``k8s.nodes_schedulable`` (Ready and not cordoned)
- ``k8s.deployment_ready_replicas{deployment}``, ``k8s.deployment_available_replicas{deployment}``
- ``k8s.pods_pending{namespace}``, ``k8s.pod_restarts{pod}``
- ``k8s.pods_unschedulable{namespace,reason}``: Pending Pods no node would take, counted per
  scheduler message (``0/4 nodes are available: 3 Insufficient nvidia.com/gpu``), so triage
  can quote the reason
- ``k8s.raycluster_ready_workers{raycluster}``, ``k8s.raycluster_desired_workers{raycluster}``,
  ``k8s.raycluster_provisioned{raycluster}``, ``k8s.raycluster_head_ready{raycluster}`` (1 or 0,
  from the KubeRay ``ray.io/v1`` conditions); none when KubeRay is not installed.

:func:`pending_pod_reasons` says *why* Pods are Pending, parsed from the scheduler's
``FailedScheduling`` messages (``0/4 nodes are available: 3 Insufficient nvidia.com/gpu, ...``),
so triage can name the macro layer with the reason as evidence.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from urllib3.exceptions import HTTPError

from inferchaos.errors import ProbeError
from inferchaos.layers import Layer
from inferchaos.primitives.kube.api import object_name
from inferchaos.primitives.kube.scheduling import pending_pod_reasons
from inferchaos.steady_state.probe_base import Sample

if TYPE_CHECKING:
    from kubernetes.client import ApiClient, V1NodeCondition

RAY_GROUP, RAY_VERSION, RAY_PLURAL = "ray.io", "v1", "rayclusters"
# The modules of the API classes a read goes through (CoreV1Api, AppsV1Api, CustomObjectsApi).
API_MODULES = (
    "kubernetes.client.api.core_v1_api",
    "kubernetes.client.api.apps_v1_api",
    "kubernetes.client.api.custom_objects_api",
)


@dataclass
class K8sProbe:
    """Reads nodes cluster-wide and Deployments, Pods and RayClusters of one namespace.

    ``node_selector`` narrows the node counts (e.g. to the GPU pool).
    """

    api_client: ApiClient
    namespace: str
    node_selector: str | None = None
    name: str = "k8s"
    layer: Layer = Layer.K8S

    def __post_init__(self) -> None:
        # The client imports an API class's module, and its hundreds of models, when the class
        # is first used: over a second of CPU. Inside the first read that cost made it time
        # out, and on a busy machine every read of a short baseline queued behind it.
        for module in API_MODULES:
            importlib.import_module(module)

    async def read(self) -> list[Sample]:
        """Read the cluster now, off the event loop (the kubernetes client blocks)."""
        return await asyncio.to_thread(self.read_now)

    def read_now(self) -> list[Sample]:
        """The blocking read behind :meth:`read`; raises ProbeError when the API cannot be read."""
        from kubernetes.client.exceptions import ApiException

        try:
            return [*self._nodes(), *self._deployments(), *self._pods(), *self._rayclusters()]
        except ApiException as e:
            raise ProbeError(f"could not read the Kubernetes layer: HTTP {e.status} {e.reason}") from e
        except HTTPError as e:
            raise ProbeError(f"could not read the Kubernetes layer: {e}") from e

    def _nodes(self) -> list[Sample]:
        from kubernetes.client import CoreV1Api

        nodes = CoreV1Api(self.api_client).list_node(label_selector=self.node_selector or None).items
        ready = [n for n in nodes if _condition_true(n.status.conditions if n.status else None, "Ready")]
        schedulable = [n for n in ready if not (n.spec and n.spec.unschedulable)]
        return [
            Sample("k8s.nodes_ready", float(len(ready))),
            Sample("k8s.nodes_schedulable", float(len(schedulable))),
        ]

    def _deployments(self) -> list[Sample]:
        from kubernetes.client import AppsV1Api

        samples = []
        for d in AppsV1Api(self.api_client).list_namespaced_deployment(self.namespace).items:
            labels = {"deployment": object_name(d)}
            # A Deployment the controller has not looked at yet has no status: nothing ready.
            ready = (d.status.ready_replicas if d.status else None) or 0
            available = (d.status.available_replicas if d.status else None) or 0
            samples.append(Sample("k8s.deployment_ready_replicas", float(ready), labels))
            samples.append(Sample("k8s.deployment_available_replicas", float(available), labels))
        return samples

    def _pods(self) -> list[Sample]:
        from kubernetes.client import CoreV1Api

        pods = CoreV1Api(self.api_client).list_namespaced_pod(self.namespace).items
        pending = sum(1 for p in pods if p.status and p.status.phase == "Pending")
        samples = [Sample("k8s.pods_pending", float(pending), {"namespace": self.namespace})]
        samples += self._unschedulable() if pending else []
        for pod in pods:
            restarts = sum(
                s.restart_count for s in (pod.status.container_statuses if pod.status else None) or []
            )
            samples.append(Sample("k8s.pod_restarts", float(restarts), {"pod": object_name(pod)}))
        return samples

    def _unschedulable(self) -> list[Sample]:
        """Pending Pods the scheduler refused, per its message; the preemption tail is dropped."""
        by_reason: dict[str, int] = {}
        for waiting in pending_pod_reasons(self.api_client, self.namespace):
            if not waiting.message:
                continue  # not refused: the scheduler has not looked at it yet
            reason = scheduler_reason(waiting.message)
            by_reason[reason] = by_reason.get(reason, 0) + 1
        return [
            Sample("k8s.pods_unschedulable", float(count), {"namespace": self.namespace, "reason": reason})
            for reason, count in sorted(by_reason.items())
        ]

    def _rayclusters(self) -> list[Sample]:
        from kubernetes.client import CustomObjectsApi
        from kubernetes.client.exceptions import ApiException

        try:
            listing = CustomObjectsApi(self.api_client).list_namespaced_custom_object(
                RAY_GROUP, RAY_VERSION, self.namespace, RAY_PLURAL
            )
        except ApiException as e:
            if e.status == 404:
                return []  # KubeRay's CRD is not installed: there is no Ray layer on Kubernetes here
            raise
        if not isinstance(listing, dict):
            # The client types a custom-object listing as ``object``; the API answers a JSON object.
            raise ProbeError(f"the RayCluster listing is not a JSON object but {type(listing).__name__}")
        samples = []
        for cluster in listing.get("items", []):
            labels = {"raycluster": cluster["metadata"]["name"]}
            status = cluster.get("status") or {}
            conditions = status.get("conditions") or []
            samples += [
                Sample("k8s.raycluster_ready_workers", float(status.get("readyWorkerReplicas", 0)), labels),
                Sample(
                    "k8s.raycluster_desired_workers", float(status.get("desiredWorkerReplicas", 0)), labels
                ),
                Sample("k8s.raycluster_provisioned", _flag(conditions, "RayClusterProvisioned"), labels),
                Sample("k8s.raycluster_head_ready", _flag(conditions, "HeadPodReady"), labels),
            ]
        return samples


def scheduler_reason(message: str) -> str:
    """The part of a FailedScheduling message that says why (``0/4 nodes are available: ...``).

    The preemption tail repeats the node count and says nothing about the cause; ``;`` is
    replaced because it separates labels in the timeline.
    """
    head = message.strip().split(" preemption:", 1)[0].strip().rstrip(".")
    return head.replace(";", ",")


def _condition_true(conditions: Sequence[V1NodeCondition] | None, kind: str) -> bool:
    return any(c.type == kind and c.status == "True" for c in conditions or [])


def _flag(conditions: list[dict[str, Any]], kind: str) -> float:
    return 1.0 if any(c.get("type") == kind and c.get("status") == "True" for c in conditions) else 0.0
