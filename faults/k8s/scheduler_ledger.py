"""Scheduler-ledger faults: the scheduler's books, not the hardware, say no.

Kubernetes schedules GPUs by what Pods *declare*, never by what a card is doing, so its ledger
can be full while the cards idle. These faults make the books lie:

- ``k8s.squat_gpu_ledger``: a pause Pod per node requests the free ``nvidia.com/gpu`` and does
  nothing; the next Pod that needs a GPU goes Pending with ``Insufficient nvidia.com/gpu``.
  With ``canary`` the fault also asks for that next GPU itself (one more pause Pod, unpinned),
  so the experiment shows the refusal without waiting for a rollout to need a card.
- ``k8s.taint_gpu_nodes``: taint the GPU nodes; new Pods without a toleration go Pending with
  ``untolerated taint``.
- ``k8s.force_anti_affinity_deadlock``: give a Deployment a required podAntiAffinity on
  ``kubernetes.io/hostname`` and more replicas than there are nodes; the extras stay Pending.

(Not to be confused with :mod:`faults.ledger`, the on-disk ledger of live injections.)
"""

from __future__ import annotations

import copy
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

from inferchaos.errors import ConfigError
from inferchaos.faults.base import Evidence, FaultHandle, JsonObject, Planned, timestamps
from inferchaos.faults.k8s.k8s_fault import K8sFault
from inferchaos.faults.ledger import Ledger
from inferchaos.faults.registry import register
from inferchaos.primitives.kube.api import api_errors, read_if_exists, read_raw
from inferchaos.primitives.kube.client import K8sTarget
from inferchaos.primitives.kube.kube_errors import K8sError
from inferchaos.primitives.kube.scheduling import PendingPodReasons, ReasonKind, pending_pod_reasons

if TYPE_CHECKING:
    from kubernetes.client import V1Pod

logger = logging.getLogger(__name__)

GPU = "nvidia.com/gpu"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
SQUAT_LABEL = "inferchaos.io/squat"
HOSTNAME_KEY = "kubernetes.io/hostname"
CONFLICT_RETRIES = 5
SQUAT_BIND_TIMEOUT_S = 30.0
POLL_S = 0.2
TERMINAL_PHASES = ("Succeeded", "Failed")


@dataclass
class SquatParams:
    """Where to squat: a namespace for the squatters, which nodes, how many GPUs on each.

    ``canary``: also create a scheduling canary, a pause Pod asking for one GPU on any node.
    """

    namespace: str
    nodes: list[str] | None = None
    gpus_per_node: int | None = None
    resource: str = GPU
    image: str = PAUSE_IMAGE
    canary: bool = False

    def __post_init__(self) -> None:
        if not self.namespace:
            raise ConfigError("squat_gpu_ledger needs a namespace")
        if self.gpus_per_node is not None and self.gpus_per_node < 1:
            raise ConfigError(f"squat_gpu_ledger gpus_per_node must be at least 1, got {self.gpus_per_node}")


@dataclass
class TaintParams:
    """Which nodes (label selector; only those with GPUs are tainted) and the taint."""

    label_selector: str
    key: str = "inferchaos.io/chaos"
    value: str = "gpu-unavailable"
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"
    resource: str = GPU

    def __post_init__(self) -> None:
        if not self.label_selector:
            raise ConfigError("taint_gpu_nodes needs a non-empty label_selector")

    def taint(self) -> JsonObject:
        """The taint as the API writes it."""
        return {"key": self.key, "value": self.value, "effect": self.effect}

    def is_ours(self, taint: Mapping[str, object]) -> bool:
        """Whether ``taint`` (API JSON) is the one this fault adds: same key and effect."""
        return taint.get("key") == self.key and taint.get("effect") == self.effect


@dataclass
class AntiAffinityParams:
    """The Deployment to deadlock and how many replicas beyond one per node."""

    namespace: str
    deployment: str
    extra_replicas: int = 1

    def __post_init__(self) -> None:
        if not self.namespace or not self.deployment:
            raise ConfigError("force_anti_affinity_deadlock needs a namespace and a deployment")
        if self.extra_replicas < 1:
            raise ConfigError(
                f"force_anti_affinity_deadlock extra_replicas must be >= 1, got {self.extra_replicas}"
            )


def pod_requests(pod: Any, resource: str) -> int:
    """What a V1Pod holds of an extended ``resource`` in the scheduler's ledger.

    Extended resources are whole numbers; a limit without a request counts as the request,
    and init containers run one at a time, so the Pod holds the larger of the two sums.
    """

    def declared(container: Any) -> int:
        res = container.resources
        if res is None:
            return 0
        quantity = (res.requests or {}).get(resource) or (res.limits or {}).get(resource)
        return int(str(quantity)) if quantity is not None else 0

    spec = pod.spec
    main = sum(declared(c) for c in spec.containers or [])
    init = max((declared(c) for c in spec.init_containers or []), default=0)
    return max(main, init)


def allocatable(node: Any, resource: str) -> int:
    """The node's allocatable ``resource`` (0 when it has none)."""
    value = ((node.status.allocatable if node.status else None) or {}).get(resource)
    return int(str(value)) if value is not None else 0


def _pending_for(target: K8sTarget, kind: ReasonKind, detail: str | None) -> list[PendingPodReasons]:
    """Pending Pods in every allowed namespace that ``kind`` (and ``detail``) keeps off nodes."""
    found = []
    for namespace in target.allow.namespaces:
        found += [p for p in pending_pod_reasons(target.api_client, namespace) if p.blocked_by(kind, detail)]
    return found


@register
class SquatGpuLedger(K8sFault[SquatParams]):
    """Idle pause Pods hold every free GPU in the scheduler's ledger."""

    name = "k8s.squat_gpu_ledger"
    params_type = SquatParams
    rollback_keys = ("namespace",)

    def _plan(self, target: K8sTarget, params: SquatParams) -> Planned:
        target.allow.ensure_namespace(self.name, params.namespace)
        if params.nodes is not None:
            target.allow.ensure_nodes(self.name, target.core, params.nodes)
        with api_errors("list nodes and Pods to count free GPUs"):
            nodes: list[Any] = target.core.list_node(label_selector=target.allow.node_selector or None).items
            pods: list[Any] = target.core.list_pod_for_all_namespaces(
                field_selector=",".join(f"status.phase!={phase}" for phase in TERMINAL_PHASES)
            ).items
        used: dict[str, int] = {}
        for pod in pods:
            if pod.spec.node_name:
                used[pod.spec.node_name] = used.get(pod.spec.node_name, 0) + pod_requests(
                    pod, params.resource
                )
        suffix = uuid.uuid4().hex[:5]
        squats, full = [], []
        for node in sorted(nodes, key=lambda n: n.metadata.name):
            name = node.metadata.name
            capacity = allocatable(node, params.resource)
            if (params.nodes is not None and name not in params.nodes) or (
                params.nodes is None and not capacity
            ):
                continue
            free = max(capacity - used.get(name, 0), 0)
            if params.gpus_per_node is None and free == 0:
                full.append(name)  # already full in the ledger: nothing left to squat
                continue
            gpus = params.gpus_per_node or free
            if gpus > free:
                raise ConfigError(
                    f"{self.name}: node {name!r} has {free} free {params.resource}, cannot squat {gpus}"
                )
            squats.append({"name": f"inferchaos-squat-{name}-{suffix}", "node": name, "gpus": gpus})
        if not squats:
            raise ConfigError(f"{self.name}: no allowed node has a free {params.resource} to squat on")
        target.allow.ensure_max_targets(self.name, "node(s)", [s["node"] for s in squats])
        held = ", ".join(f"{s['gpus']} on {s['node']}" for s in squats)
        description = f"create idle pause Pod(s) in {params.namespace} holding {params.resource}: {held}"
        if full:
            description += f"; already full: {', '.join(full)}"
        targets = [f"pod/{params.namespace}/{s['name']}" for s in squats]
        state: dict[str, Any] = {"pods": squats}
        if params.canary:
            state["canary"] = f"inferchaos-squat-canary-{suffix}"
            targets.append(f"pod/{params.namespace}/{state['canary']}")
            description += f"; then a canary Pod asks for 1 {params.resource}"
        return Planned(description, targets, state)

    def _act(self, target: K8sTarget, params: SquatParams, handle: FaultHandle, ledger: Ledger) -> None:
        for squat in handle.state["pods"]:
            pod = _squatter(squat["name"], params, squat["node"], squat["gpus"], handle.id)
            with api_errors(f"create squatter pod {params.namespace}/{squat['name']}"):
                target.core.create_namespaced_pod(params.namespace, pod)
        if handle.state.get("canary"):
            # Ask only once the squat holds: a canary the scheduler saw first would take a free card itself.
            _wait_bound(target, params.namespace, [s["name"] for s in handle.state["pods"]])
            canary = _squatter(handle.state["canary"], params, None, 1, handle.id)
            with api_errors(f"create canary pod {params.namespace}/{handle.state['canary']}"):
                target.core.create_namespaced_pod(params.namespace, canary)

    def _undo(self, target: K8sTarget, params: SquatParams, handle: FaultHandle, ledger: Ledger) -> None:
        names = [s["name"] for s in handle.state["pods"]]
        if handle.state.get("canary"):
            names.append(handle.state["canary"])
        for name in names:
            with api_errors(f"delete squatter pod {params.namespace}/{name}", tolerate=(404,)):
                target.core.delete_namespaced_pod(name, params.namespace, grace_period_seconds=0)

    def _evidence(self, target: K8sTarget, params: SquatParams, handle: FaultHandle) -> Evidence:
        holding: dict[str, int] = {}
        for squat in handle.state["pods"]:
            what = f"read squatter pod {params.namespace}/{squat['name']}"
            pod: Any = read_if_exists(what, target.core.read_namespaced_pod, squat["name"], params.namespace)
            if pod is not None and pod.spec.node_name == squat["node"]:
                holding[squat["name"]] = squat["gpus"]
        squatters = {s["name"] for s in handle.state["pods"]}
        waiting = [
            p
            for p in _pending_for(target, ReasonKind.INSUFFICIENT_RESOURCE, params.resource)
            if p.pod not in squatters
        ]
        all_held = len(holding) == len(squatters)
        reason = (
            f"{len(holding)}/{len(squatters)} squatter(s) bound, holding {sum(holding.values())} {params.resource}; "
            f"{len(waiting)} Pod(s) Pending for Insufficient {params.resource}"
        )
        symptoms: JsonObject = {
            "squatters_bound": dict(holding),
            "gpus_held": sum(holding.values()),
            "pending": [p.describe() for p in waiting],
        }
        return Evidence(all_held and bool(waiting), reason, symptoms, timestamps(handle))


def _wait_bound(
    target: K8sTarget, namespace: str, names: list[str], timeout_s: float = SQUAT_BIND_TIMEOUT_S
) -> None:
    """Wait until every Pod in ``names`` is bound to a node; log and go on after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    waiting = list(names)
    while waiting:
        waiting = [
            name
            for name in waiting
            if not getattr(
                getattr(
                    read_if_exists(
                        f"read pod {namespace}/{name}", target.core.read_namespaced_pod, name, namespace
                    ),
                    "spec",
                    None,
                ),
                "node_name",
                None,
            )
        ]
        if not waiting:
            return
        if time.monotonic() >= deadline:
            logger.warning("squatters still unbound after %.0f s: %s", timeout_s, ", ".join(waiting))
            return
        time.sleep(POLL_S)


def _squatter(name: str, params: SquatParams, node: str | None, gpus: int, fault_id: str) -> V1Pod:
    """A pause Pod pinned to ``node`` (anywhere when None) that declares ``gpus`` and never touches them."""
    from kubernetes.client import (
        V1Affinity,
        V1Capabilities,
        V1Container,
        V1NodeAffinity,
        V1NodeSelector,
        V1NodeSelectorRequirement,
        V1NodeSelectorTerm,
        V1ObjectMeta,
        V1Pod,
        V1PodSpec,
        V1ResourceRequirements,
        V1SecurityContext,
        V1Toleration,
    )

    # requests == limits: Guaranteed QoS, and extended resources must not overcommit anyway.
    amounts = {params.resource: str(gpus), "cpu": "10m", "memory": "16Mi"}
    # matchFields on metadata.name pins by node name, as the DaemonSet controller does.
    pin = (
        V1Affinity(
            node_affinity=V1NodeAffinity(
                required_during_scheduling_ignored_during_execution=V1NodeSelector(
                    node_selector_terms=[
                        V1NodeSelectorTerm(
                            match_fields=[
                                V1NodeSelectorRequirement(key="metadata.name", operator="In", values=[node])
                            ]
                        )
                    ]
                )
            )
        )
        if node is not None
        else None
    )
    return V1Pod(
        api_version="v1",
        kind="Pod",
        metadata=V1ObjectMeta(
            name=name,
            namespace=params.namespace,
            labels={"app.kubernetes.io/managed-by": "inferchaos", SQUAT_LABEL: fault_id},
            annotations={"inferchaos.io/purpose": "holds GPUs in the scheduler's ledger while idle"},
        ),
        spec=V1PodSpec(
            affinity=pin,
            tolerations=[V1Toleration(key=params.resource, operator="Exists", effect="NoSchedule")],
            containers=[
                V1Container(
                    name="squat",
                    image=params.image,
                    resources=V1ResourceRequirements(requests=amounts, limits=dict(amounts)),
                    security_context=V1SecurityContext(
                        allow_privilege_escalation=False,
                        read_only_root_filesystem=True,
                        run_as_non_root=True,
                        run_as_user=65535,
                        capabilities=V1Capabilities(drop=["ALL"]),
                    ),
                )
            ],
            automount_service_account_token=False,
            enable_service_links=False,
            termination_grace_period_seconds=0,
        ),
    )


@register
class TaintGpuNodes(K8sFault[TaintParams]):
    """Taint every GPU node a label selector picks."""

    name = "k8s.taint_gpu_nodes"
    params_type = TaintParams
    rollback_keys = ("label_selector", "key")

    def _plan(self, target: K8sTarget, params: TaintParams) -> Planned:
        with api_errors(f"list nodes {params.label_selector!r}"):
            picked: list[Any] = target.core.list_node(label_selector=params.label_selector).items
        gpu_nodes = sorted(
            (n for n in picked if allocatable(n, params.resource)), key=lambda n: n.metadata.name
        )
        if not gpu_nodes:
            raise ConfigError(
                f"{self.name}: no node matching {params.label_selector!r} has {params.resource}"
            )
        names = [n.metadata.name for n in gpu_nodes]
        target.allow.ensure_nodes(self.name, target.core, names)
        target.allow.ensure_max_targets(self.name, "node(s)", names)
        tainted: JsonObject = {}
        for node in gpu_nodes:
            taints = (node.spec.taints if node.spec else None) or []
            if any(t.key == params.key and t.effect == params.effect for t in taints):
                raise ConfigError(
                    f"{self.name}: node {node.metadata.name!r} already has taint {params.key}:{params.effect}"
                )
            tainted[node.metadata.name] = {"had_taints": bool(taints)}
        description = f"taint {', '.join(names)} with {params.key}={params.value}:{params.effect}"
        return Planned(description, [f"node/{n}" for n in names], {"nodes": tainted})

    def _act(self, target: K8sTarget, params: TaintParams, handle: FaultHandle, ledger: Ledger) -> None:
        for node in handle.state["nodes"]:
            _change_taints(target, node, lambda taints: [*(taints or []), params.taint()])

    def _undo(self, target: K8sTarget, params: TaintParams, handle: FaultHandle, ledger: Ledger) -> None:
        for node, before in handle.state["nodes"].items():
            _change_taints(target, node, partial(_drop_taint, params, before["had_taints"]))

    def _evidence(self, target: K8sTarget, params: TaintParams, handle: FaultHandle) -> Evidence:
        tainted = []
        for name in handle.state["nodes"]:
            with api_errors(f"read node {name}"):
                node: Any = target.core.read_node(name)
            if any(t.key == params.key and t.effect == params.effect for t in (node.spec.taints or [])):
                tainted.append(name)
        waiting = _pending_for(target, ReasonKind.UNTOLERATED_TAINT, params.key)
        all_tainted = len(tainted) == len(handle.state["nodes"])
        reason = (
            f"{len(tainted)}/{len(handle.state['nodes'])} node(s) carry {params.key}:{params.effect}; "
            f"{len(waiting)} Pod(s) Pending for the untolerated taint"
        )
        symptoms: JsonObject = {"tainted": tainted, "pending": [p.describe() for p in waiting]}
        return Evidence(all_tainted and bool(waiting), reason, symptoms, timestamps(handle))


def _drop_taint(
    params: TaintParams, had_taints: bool, taints: list[JsonObject] | None
) -> list[JsonObject] | None:
    """``taints`` without this fault's taint."""
    kept = [t for t in taints or [] if not params.is_ours(t)]
    # No empty list where there was no field before: the node reads back exactly as it was.
    return kept if kept or had_taints else None


def _change_taints(
    target: K8sTarget, node: str, change: Callable[[list[JsonObject] | None], list[JsonObject] | None]
) -> None:
    """Rewrite ``node``'s taints with ``change``, retrying when someone else wrote first.

    The node lifecycle controller adds its own taints while we work (a NotReady node gets
    ``node.kubernetes.io/not-ready``); carrying ``resourceVersion`` makes a stale write a 409
    instead of silently dropping its taint.
    """
    from kubernetes.client.exceptions import ApiException

    for _ in range(CONFLICT_RETRIES):
        live = read_if_exists(f"read node {node}", read_raw, target.core.read_node, node)
        if live is None:
            logger.warning("node %s no longer exists; its taints cannot be changed", node)
            return
        current = live.get("spec", {}).get("taints")
        wanted = change(current)
        if wanted == current:
            return
        body = {
            "metadata": {"resourceVersion": live["metadata"]["resourceVersion"]},
            "spec": {"taints": wanted},
        }
        conflicted = False
        with api_errors(f"change the taints of node {node}"):
            try:
                target.core.patch_node(node, body)
            except ApiException as e:
                if e.status != 409:
                    raise
                conflicted = True
        if not conflicted:
            return
        logger.info("node %s changed while its taints were rewritten; retrying", node)
    raise K8sError(f"node {node} kept changing; gave up rewriting its taints after {CONFLICT_RETRIES} tries")


@register
class ForceAntiAffinityDeadlock(K8sFault[AntiAffinityParams]):
    """More replicas than nodes, each repelling its siblings: the extras can never be placed."""

    name = "k8s.force_anti_affinity_deadlock"
    params_type = AntiAffinityParams
    rollback_keys = ("namespace", "deployment")

    def _plan(self, target: K8sTarget, params: AntiAffinityParams) -> Planned:
        target.allow.ensure_namespace(self.name, params.namespace)
        ref = f"deployment/{params.namespace}/{params.deployment}"
        target.allow.ensure_max_targets(self.name, "Deployment(s)", [ref])
        deployment = read_if_exists(
            f"read {ref}",
            read_raw,
            target.apps.read_namespaced_deployment,
            params.deployment,
            params.namespace,
        )
        if deployment is None:
            raise ConfigError(f"{self.name}: no deployment {params.deployment!r} in {params.namespace!r}")
        with api_errors("count the nodes"):
            nodes = len(target.core.list_node().items)
        # Every node counts, tainted ones too: at most one replica fits per node, so this many always leaves extras.
        replicas = nodes + params.extra_replicas
        original = deployment["spec"]
        description = (
            f"give {ref} a required podAntiAffinity on {HOSTNAME_KEY} and {replicas} replicas "
            f"({nodes} node(s)): at least {params.extra_replicas} stay Pending"
        )
        return Planned(description, [ref], {"original_spec": original, "replicas": replicas})

    def _act(
        self, target: K8sTarget, params: AntiAffinityParams, handle: FaultHandle, ledger: Ledger
    ) -> None:
        original = handle.state["original_spec"]
        affinity = copy.deepcopy(original["template"]["spec"].get("affinity") or {})
        anti = affinity.setdefault("podAntiAffinity", {})
        required = anti.setdefault("requiredDuringSchedulingIgnoredDuringExecution", [])
        required.append({"labelSelector": original["selector"], "topologyKey": HOSTNAME_KEY})
        ops = [
            {"op": "add", "path": "/spec/template/spec/affinity", "value": affinity},
            {"op": "add", "path": "/spec/replicas", "value": handle.state["replicas"]},
        ]
        with api_errors(f"patch deployment {params.namespace}/{params.deployment}"):
            target.apps.patch_namespaced_deployment(params.deployment, params.namespace, ops)

    def _undo(
        self, target: K8sTarget, params: AntiAffinityParams, handle: FaultHandle, ledger: Ledger
    ) -> None:
        what = f"read deployment {params.namespace}/{params.deployment}"
        live = read_if_exists(
            what, read_raw, target.apps.read_namespaced_deployment, params.deployment, params.namespace
        )
        if live is None:
            logger.warning(
                "deployment %s/%s is gone; nothing to restore", params.namespace, params.deployment
            )
            return
        original = handle.state["original_spec"]
        current = live["spec"]
        # Only the two fields this fault changed go back: a rollout made meanwhile must survive.
        ops: list[JsonObject] = []
        was, now = original["template"]["spec"].get("affinity"), current["template"]["spec"].get("affinity")
        if now != was:
            path = "/spec/template/spec/affinity"
            ops.append(
                {"op": "remove", "path": path} if was is None else {"op": "add", "path": path, "value": was}
            )
        if current.get("replicas") != original.get("replicas"):
            ops.append({"op": "add", "path": "/spec/replicas", "value": original.get("replicas", 1)})
        if ops:
            with api_errors(f"restore deployment {params.namespace}/{params.deployment}"):
                target.apps.patch_namespaced_deployment(params.deployment, params.namespace, ops)

    def _evidence(self, target: K8sTarget, params: AntiAffinityParams, handle: FaultHandle) -> Evidence:
        selector = selector_string(handle.state["original_spec"]["selector"])
        pending = pending_pod_reasons(target.api_client, params.namespace, selector)
        stuck = [p for p in pending if p.blocked_by(ReasonKind.POD_ANTI_AFFINITY)]
        with api_errors(f"read deployment {params.namespace}/{params.deployment}"):
            status: Any = target.apps.read_namespaced_deployment(params.deployment, params.namespace).status
        ready = status.ready_replicas or 0
        reason = (
            f"{len(stuck)} Pod(s) of {params.deployment} Pending for pod anti-affinity; "
            f"{ready}/{handle.state['replicas']} replicas ready"
        )
        symptoms: JsonObject = {
            "ready_replicas": ready,
            "replicas": handle.state["replicas"],
            "pending": [p.describe() for p in stuck],
        }
        return Evidence(bool(stuck), reason, symptoms, timestamps(handle))


def selector_string(selector: dict[str, Any]) -> str:
    """A LabelSelector (API JSON shape) as the ``labelSelector`` query string."""
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], ",".join(expr.get("values") or [])
        parts.append(
            {
                "In": f"{key} in ({values})",
                "NotIn": f"{key} notin ({values})",
                "Exists": key,
                "DoesNotExist": f"!{key}",
            }[op]
        )
    return ",".join(parts)
