"""The controllers a real cluster runs, simulated over a :class:`FakeCluster`.

The fake API server only stores what clients write. The Kubernetes scenarios also need what
the control plane does on its own: the scheduler places Pods or says why not, the Deployment
controller keeps the replica count, the node lifecycle controller notices a silent node, and
the kubelet reports back when the machine returns. One :meth:`FakeControlPlane.step` does a
round of each; :meth:`start` runs rounds from a thread.

Simplifications (each keeps the JSON shapes and messages real):

- the scheduler's filters are those the scenarios meet, in the scheduler's own order and
  wording: NodeUnschedulable, TaintToleration, NodeAffinity (``nodeSelector``, ``matchExpressions``,
  ``matchFields`` on ``metadata.name``), NodeResourcesFit for extended resources
  (``nvidia.com/gpu``) and required pod anti-affinity on ``kubernetes.io/hostname``;
- a Deployment keeps its count from its current template; a template change does not roll
  existing Pods (a real Deployment would start a rollout);
- a node is "running" while its container is (``container_running``); the lifecycle
  controller's grace period and the NoExecute toleration clocks are seconds, as configured.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tests.fakes.apiserver import FakeCluster, label_selector_matches, now_rfc3339

logger = logging.getLogger(__name__)

GPU = "nvidia.com/gpu"
HOSTNAME = "kubernetes.io/hostname"
UNREACHABLE = "node.kubernetes.io/unreachable"
CORDONED = "node(s) were unschedulable"
AFFINITY = "node(s) didn't match Pod's node affinity/selector"
ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"


@dataclass
class FakeControlPlane:
    """Scheduler, Deployment controller, node lifecycle controller and kubelet, in one loop."""

    cluster_of: Callable[[], FakeCluster]
    # Whether a node's machine runs (kind: its container); None: every node always runs.
    container_running: Callable[[str], bool] | None = None
    node_grace_s: float = 1.0
    interval_s: float = 0.2
    # The address a Pod gets when it is bound (tests map replicas onto real local servers).
    pod_ip_for: Callable[[dict[str, Any]], str] = lambda pod: "10.244.1.9"
    _silent_since: dict[str, float] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="fake-control-plane", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.step()

    def step(self) -> None:
        """One round of every controller, under the cluster's lock."""
        cluster = self.cluster_of()
        with cluster.lock:
            now = time.time()
            self._node_lifecycle(cluster, now)
            self._taint_eviction(cluster, now)
            self._deployments(cluster)
            self._schedule(cluster)
            self._deployment_status(cluster)

    # -- nodes ------------------------------------------------------------------------------
    def _node_lifecycle(self, cluster: FakeCluster, now: float) -> None:
        if self.container_running is None:
            return
        for (_, name), node in list(cluster.objects["nodes"].items()):
            ready = _ready(node)
            if self.container_running(name):
                self._silent_since.pop(name, None)
                if ready != "True":  # the kubelet is back: it posts Ready, the taints go
                    taints = [t for t in node["spec"].get("taints", []) if t["key"] != UNREACHABLE]
                    _set_ready(node, "True", "KubeletReady", "kubelet is posting ready status")
                    _set_taints(node, taints)
                    self._finish_deletions(cluster, name)
                    _bump(cluster, node)
                continue
            since = self._silent_since.setdefault(name, now)
            if ready == "True" and now - since >= self.node_grace_s:
                _set_ready(node, "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.")
                stamp = now_rfc3339()
                _set_taints(
                    node,
                    [
                        *node["spec"].get("taints", []),
                        {"key": UNREACHABLE, "effect": "NoSchedule", "timeAdded": stamp},
                        {"key": UNREACHABLE, "effect": "NoExecute", "timeAdded": stamp},
                    ],
                )
                for pod in _pods_on(cluster, name):
                    _set_pod_ready(pod, False)
                    _bump(cluster, pod)
                _bump(cluster, node)

    def _taint_eviction(self, cluster: FakeCluster, now: float) -> None:
        """NoExecute taints evict Pods whose toleration ran out; on a silent node they stay Terminating."""
        for (_, name), node in cluster.objects["nodes"].items():
            for taint in node["spec"].get("taints", []):
                if taint.get("effect") != "NoExecute":
                    continue
                added = _parse_time(taint.get("timeAdded"))
                for pod in _pods_on(cluster, name):
                    if pod["metadata"].get("deletionTimestamp") or _daemon(pod):
                        continue
                    limit = _toleration_seconds(pod, taint)
                    if limit is not None and (limit == float("inf") or now - added < limit):
                        continue
                    pod["metadata"]["deletionTimestamp"] = now_rfc3339()
                    pod["metadata"]["deletionGracePeriodSeconds"] = 30
                    _bump(cluster, pod)

    def _finish_deletions(self, cluster: FakeCluster, node: str) -> None:
        for pod in _pods_on(cluster, node):
            if pod["metadata"].get("deletionTimestamp"):
                cluster.objects["pods"].pop((pod["metadata"]["namespace"], pod["metadata"]["name"]))

    # -- Deployments ------------------------------------------------------------------------
    def _deployments(self, cluster: FakeCluster) -> None:
        for (ns, name), deployment in list(cluster.objects["deployments"].items()):
            spec = deployment["spec"]
            selector = _selector(spec["selector"])
            live = [p for p in _owned(cluster, ns, selector) if not p["metadata"].get("deletionTimestamp")]
            wanted = spec.get("replicas", 1)
            for _ in range(wanted - len(live)):
                cluster.add(_pod_from_template(name, ns, spec["template"]))
            # A ReplicaSet scales down the Pods that are not placed yet first.
            extra = sorted(live, key=lambda p: (bool(p["spec"].get("nodeName")), p["metadata"]["name"]))
            for pod in extra[: max(0, len(live) - wanted)]:
                cluster.objects["pods"].pop((ns, pod["metadata"]["name"]))

    def _deployment_status(self, cluster: FakeCluster) -> None:
        for (ns, _), deployment in cluster.objects["deployments"].items():
            pods = _owned(cluster, ns, _selector(deployment["spec"]["selector"]))
            ready = sum(1 for p in pods if _pod_ready(p) and not p["metadata"].get("deletionTimestamp"))
            status = deployment.setdefault("status", {})
            wanted = {
                "replicas": len(pods),
                "readyReplicas": ready,
                "availableReplicas": ready,
                "updatedReplicas": len(pods),
                "observedGeneration": deployment["metadata"].get("generation", 1),
            }
            if any(status.get(k) != v for k, v in wanted.items()):
                status.update(wanted)
                _bump(cluster, deployment)

    # -- the scheduler ----------------------------------------------------------------------
    def _schedule(self, cluster: FakeCluster) -> None:
        nodes = [n for _, n in sorted(cluster.objects["nodes"].items(), key=lambda kv: kv[0])]
        for _, pod in sorted(cluster.objects["pods"].items(), key=lambda kv: kv[0]):
            if pod["spec"].get("nodeName") or pod["metadata"].get("deletionTimestamp"):
                continue
            reasons: dict[str, int] = {}
            placed = None
            for node in nodes:
                reason = self._filter(cluster, pod, node)
                if reason is None:
                    placed = node
                    break
                reasons[reason] = reasons.get(reason, 0) + 1
            if placed is not None:
                self._bind(cluster, pod, placed)
            else:
                self._unschedulable(cluster, pod, len(nodes), reasons)

    def _filter(self, cluster: FakeCluster, pod: dict[str, Any], node: dict[str, Any]) -> str | None:
        """The first filter ``node`` fails for ``pod``, in the default scheduler's order, or None."""
        spec, name = pod["spec"], node["metadata"]["name"]
        if node["spec"].get("unschedulable"):
            return CORDONED
        for taint in node["spec"].get("taints", []):
            if taint.get("effect") in ("NoSchedule", "NoExecute") and not _tolerates(spec, taint):
                return f"node(s) had untolerated taint {{{taint['key']}: {taint.get('value', '')}}}"
        if not _affinity_matches(spec, node):
            return AFFINITY
        for resource, amount in _extended_requests(pod).items():
            capacity = int(node.get("status", {}).get("allocatable", {}).get(resource, "0"))
            used = sum(_extended_requests(p).get(resource, 0) for p in _pods_on(cluster, name))
            if used + amount > capacity:
                return f"Insufficient {resource}"
        for term in (
            (spec.get("affinity") or {})
            .get("podAntiAffinity", {})
            .get("requiredDuringSchedulingIgnoredDuringExecution", [])
        ):
            if term.get("topologyKey") != HOSTNAME:
                continue
            selector = _selector(term.get("labelSelector") or {})
            # Terminating Pods still count: the scheduler sees them until they are gone.
            if any(
                p["metadata"]["namespace"] == pod["metadata"]["namespace"]
                and label_selector_matches(selector, p["metadata"].get("labels") or {})
                for p in _pods_on(cluster, name)
            ):
                return ANTI_AFFINITY
        return None

    def _bind(self, cluster: FakeCluster, pod: dict[str, Any], node: dict[str, Any]) -> None:
        stamp = now_rfc3339()
        pod["spec"]["nodeName"] = node["metadata"]["name"]
        address = next(
            (a["address"] for a in node["status"].get("addresses", []) if a["type"] == "InternalIP"), ""
        )
        pod["status"] = {
            "phase": "Running",
            "qosClass": pod.get("status", {}).get("qosClass", "Guaranteed"),
            "hostIP": address,
            "podIP": self.pod_ip_for(pod),
            "startTime": stamp,
            "conditions": [
                {"type": t, "status": "True", "lastTransitionTime": stamp}
                for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
            ],
            "containerStatuses": [
                {
                    "name": c["name"],
                    "image": c["image"],
                    "imageID": "",
                    "containerID": "containerd://" + uuid.uuid4().hex * 2,
                    "ready": True,
                    "started": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": stamp}},
                }
                for c in pod["spec"]["containers"]
            ],
        }
        _bump(cluster, pod)

    def _unschedulable(
        self, cluster: FakeCluster, pod: dict[str, Any], total: int, reasons: dict[str, int]
    ) -> None:
        """What the scheduler writes back: the PodScheduled condition and a FailedScheduling event."""
        body = ", ".join(sorted(f"{count} {text}" for text, count in reasons.items()))
        message = (
            f"0/{total} nodes are available: {body}. preemption: 0/{total} nodes are available: "
            f"{total} Preemption is not helpful for scheduling."
        )
        conditions = pod.setdefault("status", {}).setdefault("conditions", [])
        current = next((c for c in conditions if c["type"] == "PodScheduled"), None)
        if current is not None and current.get("message") == message:
            return
        stamp = now_rfc3339()
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": message,
            "lastTransitionTime": stamp,
        }
        pod["status"]["conditions"] = [c for c in conditions if c["type"] != "PodScheduled"] + [condition]
        _bump(cluster, pod)
        meta = pod["metadata"]
        micro = stamp.replace("Z", ".000000Z")
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{meta['name']}.{uuid.uuid4().hex[:16]}",
                "namespace": meta["namespace"],
                "creationTimestamp": stamp,
            },
            "involvedObject": {
                "kind": "Pod",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta["uid"],
                "apiVersion": "v1",
                "resourceVersion": meta["resourceVersion"],
            },
            "reason": "FailedScheduling",
            "message": message,
            "type": "Warning",
            "source": {},
            "firstTimestamp": None,
            "lastTimestamp": None,
            "eventTime": micro,
            "reportingComponent": "default-scheduler",
            "reportingInstance": "default-scheduler-inferchaos-control-plane",
            "action": "Scheduling",
            "series": {"count": 1, "lastObservedTime": micro},
        }
        cluster.add(event)


# -- helpers ----------------------------------------------------------------------------------


def _bump(cluster: FakeCluster, obj: dict[str, Any]) -> None:
    obj["metadata"]["resourceVersion"] = cluster.next_rv()


def _ready(node: dict[str, Any]) -> str:
    return next(
        (c["status"] for c in node["status"].get("conditions", []) if c["type"] == "Ready"), "Unknown"
    )


def _set_ready(node: dict[str, Any], status: str, reason: str, message: str) -> None:
    stamp = now_rfc3339()
    for condition in node["status"]["conditions"]:
        if condition["type"] == "Ready":
            condition.update(status=status, reason=reason, message=message, lastTransitionTime=stamp)


def _set_taints(node: dict[str, Any], taints: list[dict[str, Any]]) -> None:
    if taints:
        node["spec"]["taints"] = taints
    else:
        node["spec"].pop("taints", None)


def _pods_on(cluster: FakeCluster, node: str) -> list[dict[str, Any]]:
    return [p for p in cluster.objects["pods"].values() if p["spec"].get("nodeName") == node]


def _daemon(pod: dict[str, Any]) -> bool:
    return any(r["kind"] in ("DaemonSet", "Node") for r in pod["metadata"].get("ownerReferences", []))


def _pod_ready(pod: dict[str, Any]) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", [])
    )


def _set_pod_ready(pod: dict[str, Any], ready: bool) -> None:
    for condition in pod.get("status", {}).get("conditions", []):
        if condition["type"] in ("Ready", "ContainersReady"):
            condition["status"] = "True" if ready else "False"


def _parse_time(text: str | None) -> float:
    if not text:
        return 0.0
    return datetime.strptime(text[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC).timestamp()


def with_default_tolerations(spec: dict[str, Any]) -> dict[str, Any]:
    """What the DefaultTolerationSeconds admission plugin adds: 300 s on a not-ready or unreachable node."""
    tolerations = list(spec.get("tolerations") or [])
    for key in ("node.kubernetes.io/not-ready", UNREACHABLE):
        if not any(t.get("key") == key and t.get("effect") in (None, "", "NoExecute") for t in tolerations):
            tolerations.append(
                {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            )
    return {**spec, "tolerations": tolerations}


def _tolerates(spec: dict[str, Any], taint: dict[str, Any]) -> bool:
    for toleration in spec.get("tolerations", []):
        if toleration.get("effect") not in (None, "", taint.get("effect")):
            continue
        if toleration.get("operator") == "Exists" and toleration.get("key") in (None, "", taint["key"]):
            return True
        if toleration.get("key") == taint["key"] and toleration.get("value", "") == taint.get("value", ""):
            return True
    return False


def _toleration_seconds(pod: dict[str, Any], taint: dict[str, Any]) -> float | None:
    """How long ``pod`` tolerates a NoExecute ``taint``: None not at all, inf forever."""
    for toleration in pod["spec"].get("tolerations", []):
        if toleration.get("effect") not in (None, "", "NoExecute"):
            continue
        if toleration.get("key") in (None, "", taint["key"]) and (
            toleration.get("operator") == "Exists" or toleration.get("value", "") == taint.get("value", "")
        ):
            seconds = toleration.get("tolerationSeconds")
            return float("inf") if seconds is None else float(seconds)
    return None


def _affinity_matches(spec: dict[str, Any], node: dict[str, Any]) -> bool:
    labels = node["metadata"].get("labels") or {}
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if not required:
        return True
    fields = {"metadata.name": node["metadata"]["name"]}
    for term in required["nodeSelectorTerms"]:  # terms are ORed, requirements ANDed
        ok = all(_requirement(r, labels) for r in term.get("matchExpressions", [])) and all(
            _requirement(r, fields) for r in term.get("matchFields", [])
        )
        if ok:
            return True
    return False


def _requirement(req: dict[str, Any], values: dict[str, str]) -> bool:
    op, key, wanted = req["operator"], req["key"], req.get("values") or []
    return {
        "In": lambda: values.get(key) in wanted,
        "NotIn": lambda: values.get(key) not in wanted,
        "Exists": lambda: key in values,
        "DoesNotExist": lambda: key not in values,
    }[op]()


def _extended_requests(pod: dict[str, Any]) -> dict[str, int]:
    total: dict[str, int] = {}
    for container in pod["spec"].get("containers", []):
        resources = container.get("resources") or {}
        amounts = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for resource, amount in amounts.items():
            if "/" in resource:  # extended resources only: cpu and memory are not simulated
                total[resource] = total.get(resource, 0) + int(amount)
    return total


def _selector(selector: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items()))


def _owned(cluster: FakeCluster, ns: str, selector: str) -> list[dict[str, Any]]:
    return [
        p
        for (pns, _), p in cluster.objects["pods"].items()
        if pns == ns and label_selector_matches(selector, p["metadata"].get("labels") or {})
    ]


def _pod_from_template(deployment: str, ns: str, template: dict[str, Any]) -> dict[str, Any]:
    """A new Pod of ``deployment``'s ReplicaSet, as the ReplicaSet controller creates it."""
    digest = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:9]
    spec = with_default_tolerations(copy.deepcopy(template["spec"]))
    labels = {**(template.get("metadata", {}).get("labels") or {}), "pod-template-hash": digest}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{deployment}-{digest}-{uuid.uuid4().hex[:5]}",
            "namespace": ns,
            "labels": labels,
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": f"{deployment}-{digest}",
                    "uid": str(uuid.uuid5(uuid.NAMESPACE_OID, digest)),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
        "status": {"phase": "Pending", "qosClass": "Guaranteed"},
    }
