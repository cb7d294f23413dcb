"""Reading the scheduler's own words: FailedScheduling messages and why Pods stay Pending."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING

from urllib3.exceptions import HTTPError

from inferchaos.errors import ProbeError
from inferchaos.primitives.kube.api import object_name

if TYPE_CHECKING:
    from kubernetes.client import ApiClient, CoreV1Event, V1Pod


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


def _event_time(event: CoreV1Event) -> float:
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
    from kubernetes.client import CoreV1Api
    from kubernetes.client.exceptions import ApiException

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
    # Keyed by (name, uid): an event may name no uid, and a Pod of the same name may have
    # been replaced since.
    latest: dict[tuple[str | None, str | None], CoreV1Event] = {}
    for event in events:
        key = (event.involved_object.name, event.involved_object.uid)
        known = latest.get(key)
        if known is None or _event_time(event) >= _event_time(known):
            latest[key] = event
    result = []
    for pod in sorted(pods, key=object_name):
        if pod.spec and pod.spec.node_name:
            continue  # bound: Pending while its containers start, not for want of a node
        name = object_name(pod)
        uid = pod.metadata.uid if pod.metadata else None
        failed = latest.get((name, uid)) or latest.get((name, None))
        message = failed.message if failed is not None else _unschedulable_condition_message(pod)
        result.append(PendingPodReasons.from_message(namespace, name, message or ""))
    return result


def _unschedulable_condition_message(pod: V1Pod) -> str:
    for condition in (pod.status.conditions if pod.status else None) or []:
        if condition.type == "PodScheduled" and condition.status == "False":
            return condition.message or ""
    return ""
