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
import re
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from kubernetes.client import ApiClient, AppsV1Api, CoreV1Api, CustomObjectsApi
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from inferchaos.errors import ProbeError
from inferchaos.layers import Layer
from inferchaos.steady_state.base import Sample

RAY_GROUP, RAY_VERSION, RAY_PLURAL = "ray.io", "v1", "rayclusters"


class ReasonKind(StrEnum):
    """What kind of obstacle one reason of a scheduling failure is."""

    INSUFFICIENT_RESOURCE = "insufficient_resource"
    UNTOLERATED_TAINT = "untolerated_taint"
    UNSCHEDULABLE_NODE = "unschedulable_node"
    POD_ANTI_AFFINITY = "pod_anti_affinity"
    POD_AFFINITY = "pod_affinity"
    NODE_AFFINITY = "node_affinity"
    TOPOLOGY_SPREAD = "topology_spread"
    VOLUME = "volume"
    OTHER = "other"


# The cordon taint: newer schedulers report a cordoned node as this taint, older ones as
# "node(s) were unschedulable"; both mean the same thing to triage.
CORDON_TAINT = "node.kubernetes.io/unschedulable"

_HEAD = re.compile(r"^(\d+)/(\d+) nodes are available(?::\s*(.*))?$", re.DOTALL)
_REASON = re.compile(r"^(\d+)\s+(.+)$", re.DOTALL)
_INSUFFICIENT = re.compile(r"^Insufficient (\S+)$")
_TAINT = re.compile(r"had (?:untolerated )?taint \{([^}]*)\}")
_SPLIT = re.compile(r",\s+(?=\d+\s)")


@dataclass(frozen=True)
class SchedulingReason:
    """One reason in a FailedScheduling message and how many nodes it ruled out."""

    text: str
    nodes: int
    kind: ReasonKind
    detail: str = ""


def classify_reason(text: str) -> tuple[ReasonKind, str]:
    """The kind of one reason text and its detail (the resource, or the taint ``key: value``)."""
    if m := _INSUFFICIENT.match(text):
        return ReasonKind.INSUFFICIENT_RESOURCE, m.group(1)
    if text == "Too many pods":
        return ReasonKind.INSUFFICIENT_RESOURCE, "pods"
    if m := _TAINT.search(text):
        taint = m.group(1).strip()
        kind = (
            ReasonKind.UNSCHEDULABLE_NODE
            if taint.split(":")[0] == CORDON_TAINT
            else ReasonKind.UNTOLERATED_TAINT
        )
        return kind, taint
    if "were unschedulable" in text:
        return ReasonKind.UNSCHEDULABLE_NODE, ""
    if "anti-affinity" in text:
        return ReasonKind.POD_ANTI_AFFINITY, ""
    if "pod affinity" in text:
        return ReasonKind.POD_AFFINITY, ""
    if "node affinity/selector" in text or "node selector" in text:
        return ReasonKind.NODE_AFFINITY, ""
    if "topology spread" in text:
        return ReasonKind.TOPOLOGY_SPREAD, ""
    if "volume" in text or "PersistentVolumeClaim" in text:
        return ReasonKind.VOLUME, ""
    return ReasonKind.OTHER, ""


@dataclass(frozen=True)
class SchedulingFailure:
    """A parsed ``0/N nodes are available: ...`` message (the preemption part is dropped)."""

    nodes_available: int
    nodes_total: int
    reasons: tuple[SchedulingReason, ...]


def parse_failed_scheduling(message: str) -> SchedulingFailure | None:
    """Parse the scheduler's FailedScheduling message; None when it is not in that form.

    A reason without a node count (``pod has unbound immediate PersistentVolumeClaims``)
    applies to every node, so it counts all of them.
    """
    head = message.strip().split(" preemption:", 1)[0].strip().rstrip(".")
    m = _HEAD.match(head)
    if not m:
        return None
    available, total, body = int(m.group(1)), int(m.group(2)), (m.group(3) or "").strip()
    reasons = []
    for part in _SPLIT.split(body) if body else []:
        part = part.strip().rstrip(".")
        counted = _REASON.match(part)
        nodes, text = (int(counted.group(1)), counted.group(2).strip()) if counted else (total, part)
        kind, detail = classify_reason(text)
        reasons.append(SchedulingReason(text, nodes, kind, detail))
    return SchedulingFailure(available, total, tuple(reasons))


@dataclass
class PendingPodReasons:
    """Why one unscheduled Pod is Pending: the scheduler's latest message and its counts per reason."""

    namespace: str
    pod: str
    message: str
    nodes_available: int | None = None
    nodes_total: int | None = None
    reasons: dict[str, int] = field(default_factory=dict)
    parsed: tuple[SchedulingReason, ...] = ()

    @classmethod
    def from_message(cls, namespace: str, pod: str, message: str) -> PendingPodReasons:
        """Parse ``message``; an unparsable or empty one leaves the counts empty."""
        failure = parse_failed_scheduling(message) if message else None
        if failure is None:
            return cls(namespace, pod, message)
        reasons = {r.text: r.nodes for r in failure.reasons}
        return cls(
            namespace, pod, message, failure.nodes_available, failure.nodes_total, reasons, failure.reasons
        )

    @property
    def kinds(self) -> dict[ReasonKind, int]:
        """Nodes ruled out per kind of reason."""
        kinds: dict[ReasonKind, int] = {}
        for reason in self.parsed:
            kinds[reason.kind] = kinds.get(reason.kind, 0) + reason.nodes
        return kinds

    def blocked_by(self, kind: ReasonKind, detail: str | None = None) -> int:
        """Nodes that ruled this Pod out for ``kind``; ``detail`` narrows to a resource or a taint key."""
        return sum(
            r.nodes
            for r in self.parsed
            if r.kind == kind and (detail is None or detail in (r.detail, r.detail.split(":")[0].strip()))
        )

    def describe(self) -> str:
        """One line for a verdict: ``ns/pod Pending: 0/4 nodes are available: ...``."""
        return f"{self.namespace}/{self.pod} Pending: {self.message or 'no scheduling message yet'}"


def _event_time(event: Any) -> float:
    """When an event was last seen, in seconds since the epoch (0 when it carries no time).

    Events written through events.k8s.io/v1, as the scheduler does, leave ``lastTimestamp``
    empty and carry ``eventTime`` and ``series`` instead.
    """
    series = event.series
    candidates: list[datetime | None] = [
        series.last_observed_time if series else None,
        event.last_timestamp,
        event.event_time,
        event.metadata.creation_timestamp if event.metadata else None,
    ]
    return next((t.timestamp() for t in candidates if t is not None), 0.0)


def pending_pod_reasons(
    api_client: ApiClient, namespace: str, label_selector: str | None = None
) -> list[PendingPodReasons]:
    """Every Pending Pod not yet bound to a node in ``namespace``, with why it is not.

    The reason is the latest ``FailedScheduling`` event of that very Pod (matched by uid);
    without one (events expire after an hour) the Pod's ``PodScheduled`` condition carries
    the same message. Raises ProbeError when the API cannot be read.
    """
    core = CoreV1Api(api_client)
    try:
        pods = core.list_namespaced_pod(
            namespace, label_selector=label_selector or None, field_selector="status.phase=Pending"
        ).items
        events = core.list_namespaced_event(
            namespace, field_selector="involvedObject.kind=Pod,reason=FailedScheduling"
        ).items
    except ApiException as e:
        raise ProbeError(f"could not read Pending Pods in {namespace}: HTTP {e.status} {e.reason}") from e
    except HTTPError as e:
        raise ProbeError(f"could not read Pending Pods in {namespace}: {e}") from e
    latest: dict[tuple[str, str | None], Any] = {}
    for event in events:
        key = (event.involved_object.name, event.involved_object.uid)
        known = latest.get(key)
        if known is None or _event_time(event) >= _event_time(known):
            latest[key] = event
    result = []
    for pod in sorted(pods, key=lambda p: p.metadata.name):
        if pod.spec and pod.spec.node_name:
            continue  # bound: Pending while its containers start, not for want of a node
        event = latest.get((pod.metadata.name, pod.metadata.uid)) or latest.get((pod.metadata.name, None))
        message = event.message if event is not None else _unschedulable_condition_message(pod)
        result.append(PendingPodReasons.from_message(namespace, pod.metadata.name, message or ""))
    return result


def _unschedulable_condition_message(pod: Any) -> str:
    for condition in (pod.status.conditions if pod.status else None) or []:
        if condition.type == "PodScheduled" and condition.status == "False":
            return condition.message or ""
    return ""


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

    async def read(self) -> list[Sample]:
        """Read the cluster now, off the event loop (the kubernetes client blocks)."""
        return await asyncio.to_thread(self.read_now)

    def read_now(self) -> list[Sample]:
        """The blocking read behind :meth:`read`; raises ProbeError when the API cannot be read."""
        try:
            return [*self._nodes(), *self._deployments(), *self._pods(), *self._rayclusters()]
        except ApiException as e:
            raise ProbeError(f"could not read the Kubernetes layer: HTTP {e.status} {e.reason}") from e
        except HTTPError as e:
            raise ProbeError(f"could not read the Kubernetes layer: {e}") from e

    def _nodes(self) -> list[Sample]:
        nodes = CoreV1Api(self.api_client).list_node(label_selector=self.node_selector or None).items
        ready = [n for n in nodes if _condition_true(n.status.conditions if n.status else None, "Ready")]
        schedulable = [n for n in ready if not (n.spec and n.spec.unschedulable)]
        return [
            Sample("k8s.nodes_ready", float(len(ready))),
            Sample("k8s.nodes_schedulable", float(len(schedulable))),
        ]

    def _deployments(self) -> list[Sample]:
        samples = []
        for d in AppsV1Api(self.api_client).list_namespaced_deployment(self.namespace).items:
            labels = {"deployment": d.metadata.name}
            status = d.status
            samples.append(Sample("k8s.deployment_ready_replicas", float(status.ready_replicas or 0), labels))
            samples.append(
                Sample("k8s.deployment_available_replicas", float(status.available_replicas or 0), labels)
            )
        return samples

    def _pods(self) -> list[Sample]:
        pods = CoreV1Api(self.api_client).list_namespaced_pod(self.namespace).items
        pending = sum(1 for p in pods if p.status and p.status.phase == "Pending")
        samples = [Sample("k8s.pods_pending", float(pending), {"namespace": self.namespace})]
        samples += self._unschedulable() if pending else []
        for pod in pods:
            restarts = sum(
                s.restart_count for s in (pod.status.container_statuses if pod.status else None) or []
            )
            samples.append(Sample("k8s.pod_restarts", float(restarts), {"pod": pod.metadata.name}))
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
        try:
            listing = CustomObjectsApi(self.api_client).list_namespaced_custom_object(
                RAY_GROUP, RAY_VERSION, self.namespace, RAY_PLURAL
            )
        except ApiException as e:
            if e.status == 404:
                return []  # KubeRay's CRD is not installed: there is no Ray layer on Kubernetes here
            raise
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


def _condition_true(conditions: list[Any] | None, kind: str) -> bool:
    return any(c.type == kind and c.status == "True" for c in conditions or [])


def _flag(conditions: list[dict[str, Any]], kind: str) -> float:
    return 1.0 if any(c.get("type") == kind and c.get("status") == "True" for c in conditions) else 0.0
