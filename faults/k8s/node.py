"""Node faults: a node stops taking Pods, is emptied, disappears, or its machine stops.

- ``k8s.cordon_node``: mark a node unschedulable; running Pods stay. Revert uncordons.
- ``k8s.drain_node``: cordon, then evict one namespace's Pods through the Eviction API
  (``policy/v1``), as ``kubectl drain`` does, so PodDisruptionBudgets are honoured.
  DaemonSet Pods and mirror Pods are skipped. Revert uncordons; controllers recreate the Pods.
- ``k8s.delete_node``: delete the Node object. Revert recreates it from the saved manifest.
- ``k8s.stop_node_container``: kind only, stop the node's container (the machine is gone at
  once). Revert starts it again.

Nodes that are already cordoned are refused: cordoning them proves nothing, and reverting
would uncordon a node someone else had cordoned.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from inferchaos.errors import ConfigError
from inferchaos.faults.base import Evidence, FaultHandle, JsonObject, Planned, timestamps
from inferchaos.faults.k8s.container_runtime import ContainerRuntime, resolve_runtime
from inferchaos.faults.k8s.k8s_fault import K8sFault
from inferchaos.faults.k8s.node_steps import (
    DAEMONSET_KIND,
    is_mirror_pod,
    is_unschedulable,
    owner_kinds,
    read_node,
    ready_status,
    set_unschedulable,
)
from inferchaos.faults.ledger import Ledger
from inferchaos.faults.registry import register
from inferchaos.primitives.kube.api import api_errors, read_if_exists, read_raw
from inferchaos.primitives.kube.client import K8sTarget
from inferchaos.primitives.kube.kube_errors import K8sError
from inferchaos.primitives.kube.scheduling import ReasonKind, pending_pod_reasons

if TYPE_CHECKING:
    from kubernetes.client import V1Node

logger = logging.getLogger(__name__)

EVICTION_RETRY_S = 1.0
# What the node lifecycle controller taints a silent node with.
LOST_NODE_TAINTS = ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")
POLL_S = 0.5
# Set by the API server: a recreated node gets new ones, so the saved manifest must not carry them.
SERVER_SET_METADATA = (
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "generation",
    "managedFields",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "selfLink",
)


@dataclass
class NodeParams:
    """A single node, by name."""

    node: str

    def __post_init__(self) -> None:
        if not self.node:
            raise ConfigError("node must be a non-empty node name")


@dataclass
class DrainParams:
    """The node to drain and the namespace whose Pods are evicted from it."""

    node: str
    namespace: str
    grace_period_s: int | None = None
    timeout_s: float = 120.0

    def __post_init__(self) -> None:
        if not self.node or not self.namespace:
            raise ConfigError("drain_node needs a node and a namespace")
        if self.timeout_s < 0:
            raise ConfigError(f"drain_node timeout_s must be >= 0, got {self.timeout_s}")


@dataclass
class StopContainerParams:
    """The kind node whose container is stopped, and how long it may shut down cleanly."""

    node: str
    grace_s: int = 0

    def __post_init__(self) -> None:
        if not self.node:
            raise ConfigError("stop_node_container needs a node")
        if self.grace_s < 0:
            raise ConfigError(f"stop_node_container grace_s must be >= 0, got {self.grace_s}")


def _schedulable_node(fault: str, target: K8sTarget, name: str) -> V1Node:
    target.allow.ensure_nodes(fault, target.core, [name])
    node = read_node(target.core, name)
    if is_unschedulable(node):
        raise ConfigError(f"{fault}: node {name!r} is already cordoned; uncordon it or choose another node")
    return node


def _uncordon_if_present(target: K8sTarget, name: str) -> None:
    if read_if_exists(f"read node {name}", target.core.read_node, name) is None:
        logger.warning("node %s no longer exists; nothing to uncordon", name)
        return
    set_unschedulable(target.core, name, False)


@register
class CordonNode(K8sFault[NodeParams]):
    """Mark a node unschedulable: new Pods avoid it, running Pods stay."""

    name = "k8s.cordon_node"
    params_type = NodeParams
    rollback_keys = ("node",)

    def _plan(self, target: K8sTarget, params: NodeParams) -> Planned:
        _schedulable_node(self.name, target, params.node)
        target.allow.ensure_max_targets(self.name, "node(s)", [params.node])
        return Planned(
            f"cordon node {params.node}: new Pods avoid it, running Pods stay", [f"node/{params.node}"]
        )

    def _act(self, target: K8sTarget, params: NodeParams, handle: FaultHandle, ledger: Ledger) -> None:
        set_unschedulable(target.core, params.node, True)

    def _undo(self, target: K8sTarget, params: NodeParams, handle: FaultHandle, ledger: Ledger) -> None:
        _uncordon_if_present(target, params.node)

    def _evidence(self, target: K8sTarget, params: NodeParams, handle: FaultHandle) -> Evidence:
        cordoned = is_unschedulable(read_node(target.core, params.node))
        reason = f"node {params.node} is {'unschedulable' if cordoned else 'schedulable'}"
        return Evidence(
            cordoned, reason, {"node": params.node, "unschedulable": cordoned}, timestamps(handle)
        )


@register
class DrainNode(K8sFault[DrainParams]):
    """Cordon a node and evict one namespace's Pods from it through the Eviction API."""

    name = "k8s.drain_node"
    params_type = DrainParams
    rollback_keys = ("node",)

    def _plan(self, target: K8sTarget, params: DrainParams) -> Planned:
        target.allow.ensure_namespace(self.name, params.namespace)
        _schedulable_node(self.name, target, params.node)
        target.allow.ensure_max_targets(self.name, "node(s)", [params.node])
        with api_errors(f"list the Pods on node {params.node}"):
            pods: list[Any] = target.core.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={params.node}"
            ).items
        evict: list[JsonObject] = []
        skipped: JsonObject = {}
        for pod in pods:
            key = f"{pod.metadata.namespace}/{pod.metadata.name}"
            if pod.metadata.namespace != params.namespace:
                skipped[key] = "outside the drained namespace"
            elif DAEMONSET_KIND in owner_kinds(pod):
                skipped[key] = "DaemonSet Pod"
            elif is_mirror_pod(pod):
                skipped[key] = "mirror Pod"
            elif pod.metadata.deletion_timestamp is not None:
                skipped[key] = "already terminating"
            else:
                evict.append({"name": pod.metadata.name, "uid": pod.metadata.uid})
        description = (
            f"cordon node {params.node} and evict {len(evict)} Pod(s) of namespace {params.namespace} "
            f"through the Eviction API; {len(skipped)} Pod(s) left in place"
        )
        targets = [f"node/{params.node}", *(f"pod/{params.namespace}/{p['name']}" for p in evict)]
        return Planned(description, targets, {"evict": list(evict), "skipped": skipped})

    def _act(self, target: K8sTarget, params: DrainParams, handle: FaultHandle, ledger: Ledger) -> None:
        set_unschedulable(target.core, params.node, True)
        deadline = time.monotonic() + params.timeout_s
        for pod in handle.state["evict"]:
            self._evict(target, params, pod, deadline)
        self._wait_gone(target, params, handle.state["evict"], deadline)

    def _evict(self, target: K8sTarget, params: DrainParams, pod: dict[str, str], deadline: float) -> None:
        from kubernetes.client import V1DeleteOptions, V1Eviction, V1ObjectMeta, V1Preconditions
        from kubernetes.client.exceptions import ApiException

        body = V1Eviction(
            api_version="policy/v1",
            kind="Eviction",
            metadata=V1ObjectMeta(name=pod["name"], namespace=params.namespace),
            # The uid precondition stops a same-named replacement (a StatefulSet's) being evicted too.
            delete_options=V1DeleteOptions(
                grace_period_seconds=params.grace_period_s, preconditions=V1Preconditions(uid=pod["uid"])
            ),
        )
        what = f"evict pod {params.namespace}/{pod['name']} from node {params.node}"
        while True:
            blocked = False
            # 404/409: gone already, or replaced by a Pod this drain never planned.
            with api_errors(what, tolerate=(404, 409)):
                try:
                    target.core.create_namespaced_pod_eviction(pod["name"], params.namespace, body)
                except ApiException as e:
                    # 429: a PodDisruptionBudget says not now; kubectl drain retries the same way.
                    if e.status != 429 or time.monotonic() >= deadline:
                        raise
                    blocked = True
            if not blocked:
                return
            time.sleep(EVICTION_RETRY_S)

    def _wait_gone(
        self, target: K8sTarget, params: DrainParams, pods: list[dict[str, str]], deadline: float
    ) -> None:
        remaining = list(pods)
        while True:
            remaining = [p for p in remaining if _pod_exists(target, params.namespace, p)]
            if not remaining:
                return
            if time.monotonic() >= deadline:
                names = ", ".join(p["name"] for p in remaining)
                raise K8sError(
                    f"{self.name}: evicted Pods still terminating after {params.timeout_s} s: {names}"
                )
            time.sleep(POLL_S)

    def _undo(self, target: K8sTarget, params: DrainParams, handle: FaultHandle, ledger: Ledger) -> None:
        _uncordon_if_present(target, params.node)

    def _evidence(self, target: K8sTarget, params: DrainParams, handle: FaultHandle) -> Evidence:
        cordoned = is_unschedulable(read_node(target.core, params.node))
        evicted = handle.state["evict"]
        still = [p["name"] for p in evicted if _pod_exists(target, params.namespace, p)]
        bit = cordoned and not still
        reason = (
            f"node {params.node} is {'unschedulable' if cordoned else 'schedulable'}; "
            f"{len(evicted) - len(still)}/{len(evicted)} planned Pod(s) evicted"
        )
        symptoms: JsonObject = {
            "node": params.node,
            "unschedulable": cordoned,
            "evicted": [p["name"] for p in evicted if p["name"] not in still],
            "still_on_node": still,
            "skipped": handle.state["skipped"],
        }
        return Evidence(bit, reason, symptoms, timestamps(handle))


def _pod_exists(target: K8sTarget, namespace: str, pod: dict[str, str]) -> bool:
    """Whether the very Pod (same uid) still exists, terminating or not."""
    live: Any = read_if_exists(
        f"read pod {namespace}/{pod['name']}", target.core.read_namespaced_pod, pod["name"], namespace
    )
    return live is not None and live.metadata.uid == pod["uid"]


@register
class DeleteNode(K8sFault[NodeParams]):
    """Delete a Node object: the control plane forgets the machine."""

    name = "k8s.delete_node"
    params_type = NodeParams
    rollback_keys = ("node",)

    def _plan(self, target: K8sTarget, params: NodeParams) -> Planned:
        target.allow.ensure_nodes(self.name, target.core, [params.node])
        target.allow.ensure_max_targets(self.name, "node(s)", [params.node])
        with api_errors(f"read node {params.node}"):
            manifest = read_raw(target.core.read_node, params.node)
        for key in SERVER_SET_METADATA:
            manifest["metadata"].pop(key, None)
        manifest.update(apiVersion="v1", kind="Node")
        description = f"delete the Node object {params.node}; revert recreates it from its saved manifest"
        return Planned(description, [f"node/{params.node}"], {"manifest": manifest})

    def _act(self, target: K8sTarget, params: NodeParams, handle: FaultHandle, ledger: Ledger) -> None:
        with api_errors(f"delete node {params.node}"):
            target.core.delete_node(params.node)

    def _undo(self, target: K8sTarget, params: NodeParams, handle: FaultHandle, ledger: Ledger) -> None:
        from kubernetes.client import V1Node

        if read_if_exists(f"read node {params.node}", target.core.read_node, params.node) is not None:
            return  # still there, or the kubelet registered it again
        # 409: the kubelet registered the node between our read and our create.
        with api_errors(f"recreate node {params.node}", tolerate=(409,)):
            node: Any = V1Node.from_dict(handle.state["manifest"])
            target.core.create_node(node)

    def _evidence(self, target: K8sTarget, params: NodeParams, handle: FaultHandle) -> Evidence:
        present = read_if_exists(f"read node {params.node}", target.core.read_node, params.node) is not None
        reason = f"node {params.node} is {'still registered' if present else 'gone from the API'}"
        return Evidence(not present, reason, {"node": params.node, "registered": present}, timestamps(handle))


@register
class StopNodeContainer(K8sFault[StopContainerParams]):
    """kind: stop the container that is the node, as if the machine lost power."""

    name = "k8s.stop_node_container"
    params_type = StopContainerParams
    rollback_keys = ("node",)

    def _plan(self, target: K8sTarget, params: StopContainerParams) -> Planned:
        target.allow.ensure_nodes(self.name, target.core, [params.node])
        target.allow.ensure_max_targets(self.name, "node(s)", [params.node])
        runtime = resolve_runtime(target.runtime)
        try:
            running = runtime.is_running(params.node)
        except K8sError as e:
            raise ConfigError(f"{self.name}: node {params.node!r} has no container to stop: {e}") from e
        if not running:
            raise ConfigError(f"{self.name}: the container of node {params.node!r} is not running")
        description = f"{runtime.binary} stop -t {params.grace_s} {params.node}: the node's machine stops"
        return Planned(description, [f"node/{params.node}"], {"runtime": runtime.binary})

    def _act(
        self, target: K8sTarget, params: StopContainerParams, handle: FaultHandle, ledger: Ledger
    ) -> None:
        ContainerRuntime(handle.state["runtime"]).stop(params.node, params.grace_s)

    def _undo(
        self, target: K8sTarget, params: StopContainerParams, handle: FaultHandle, ledger: Ledger
    ) -> None:
        ContainerRuntime(handle.state["runtime"]).start(params.node)

    def _evidence(self, target: K8sTarget, params: StopContainerParams, handle: FaultHandle) -> Evidence:
        running = ContainerRuntime(handle.state["runtime"]).is_running(params.node)
        ready = ready_status(read_node(target.core, params.node))
        # The node controller marks a silent node Unknown only after its grace period (40 s by default).
        bit = not running and ready != "True"
        # Replacements the lost node cannot take: the scheduler names its unreachable/not-ready taint.
        waiting = [
            p.describe()
            for namespace in target.allow.namespaces
            for p in pending_pod_reasons(target.api_client, namespace)
            if any(p.blocked_by(ReasonKind.UNTOLERATED_TAINT, key) for key in LOST_NODE_TAINTS)
        ]
        reason = (
            f"container {'running' if running else 'stopped'}; node {params.node} Ready={ready}; "
            f"{len(waiting)} Pod(s) Pending that the lost node cannot take"
        )
        symptoms: JsonObject = {
            "node": params.node,
            "container_running": running,
            "node_ready": ready,
            "pending": list(waiting),
        }
        return Evidence(bit, reason, symptoms, timestamps(handle))
