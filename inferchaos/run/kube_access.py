"""Every kube API access the suite makes, in one table: what a kind/cluster identity must be allowed.

Each row is a verb on a resource, where it is made, and who makes it: a Kubernetes fault
(``faults/k8s``, named as registered), the k8s probe (``steady_state/k8s.py`` with
``primitives/kube/scheduling.py``), the environment driver (``environments/k8s_env.py``) or
the preflight itself (``inferchaos/run/preflight.py``). The rows were read off those calls, and
``tests/unit/k8s/test_k8s_kube_access_table.py`` holds them to it: it runs every fault, the
probe and the driver against the fake API server and fails on a request no row of its caller
covers, or on a row that nothing asked for.

``inferchaos env check`` asks the API server about each row with a SelfSubjectAccessReview;
``deploy/gameday-cronjob.yaml`` is the RBAC that grants them (without ``delete_node``'s).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from inferchaos.environments.k8s_config import K8sEnvConfig
from inferchaos.primitives.kube.access import KubeAccess


class Scope(StrEnum):
    """Where a row's access is made."""

    # Cluster-scoped resources (nodes, CRDs), and namespaced ones listed in every namespace.
    CLUSTER = "cluster"
    # kube.namespace of the config: where the probe and the driver read the workloads.
    WORKLOADS = "workloads"
    # Every namespace of allow.namespaces: where a fault may act (its `namespace` parameter).
    FAULTS = "faults"


# Who makes an access, besides the faults (named as registered, ``k8s.<verb>``).
PROBE = "k8s probe"
DRIVER = "environment driver"
PREFLIGHT = "env check"

# The CustomResourceDefinitions of KubeRay that inferchaos reads (the probe lists RayClusters).
KUBERAY_CRDS: tuple[str, ...] = ("rayclusters.ray.io",)

_NODE_FAULTS = ("k8s.cordon_node", "k8s.drain_node", "k8s.delete_node", "k8s.stop_node_container")


@dataclass(frozen=True)
class KubeNeed:
    """One row: ``verb`` on ``resource`` (of ``group``, ``/subresource``) in ``scope``, made by ``needed_by``."""

    verb: str
    resource: str
    scope: Scope
    needed_by: tuple[str, ...]
    group: str = ""
    subresource: str = ""
    # For a row about named objects only: which (the config's token Secret, KubeRay's CRDs).
    names: str = ""


# Names a row's ``names`` may take, resolved from the config by :func:`needed_access`.
TOKEN_SECRET = "ray.auth_token_secret"
CRD_NAMES = "kuberay crds"

# fmt: off
KUBE_NEEDS: tuple[KubeNeed, ...] = (
    # Nodes: the probe's counts, every allow-list node check (node_selector), the node faults.
    KubeNeed("list", "nodes", Scope.CLUSTER, (PROBE, *_NODE_FAULTS, "k8s.kill_pods", "k8s.squat_gpu_ledger",
                                               "k8s.taint_gpu_nodes", "k8s.force_anti_affinity_deadlock")),
    KubeNeed("get", "nodes", Scope.CLUSTER, (*_NODE_FAULTS, "k8s.taint_gpu_nodes")),
    KubeNeed("patch", "nodes", Scope.CLUSTER, ("k8s.cordon_node", "k8s.drain_node", "k8s.taint_gpu_nodes")),
    # delete_node deletes the Node object and writes the same manifest back on revert.
    KubeNeed("delete", "nodes", Scope.CLUSTER, ("k8s.delete_node",)),
    KubeNeed("create", "nodes", Scope.CLUSTER, ("k8s.delete_node",)),
    # What runs on a node, in every namespace: drain's evictions, the squat's free-GPU count.
    KubeNeed("list", "pods", Scope.CLUSTER, ("k8s.drain_node", "k8s.squat_gpu_ledger")),
    KubeNeed("list", "pods", Scope.WORKLOADS, (PROBE, DRIVER)),
    KubeNeed("list", "pods", Scope.FAULTS, ("k8s.kill_pods", "k8s.squat_gpu_ledger", "k8s.taint_gpu_nodes",
                                            "k8s.force_anti_affinity_deadlock", "k8s.stop_node_container")),
    KubeNeed("get", "pods", Scope.FAULTS, ("k8s.kill_pods", "k8s.squat_gpu_ledger", "k8s.drain_node")),
    KubeNeed("create", "pods", Scope.FAULTS, ("k8s.squat_gpu_ledger",)),
    KubeNeed("delete", "pods", Scope.FAULTS, ("k8s.kill_pods", "k8s.squat_gpu_ledger")),
    KubeNeed("create", "pods", Scope.FAULTS, ("k8s.drain_node",), subresource="eviction"),
    # The scheduler's FailedScheduling reasons: the probe's, and the evidence of the faults
    # that leave Pods Pending (a stopped node's replica waits for another node).
    KubeNeed("list", "events", Scope.WORKLOADS, (PROBE,)),
    KubeNeed("list", "events", Scope.FAULTS, ("k8s.squat_gpu_ledger", "k8s.taint_gpu_nodes",
                                              "k8s.force_anti_affinity_deadlock", "k8s.stop_node_container")),
    KubeNeed("list", "deployments", Scope.WORKLOADS, (PROBE,), group="apps"),
    KubeNeed("get", "deployments", Scope.FAULTS, ("k8s.force_anti_affinity_deadlock",), group="apps"),
    KubeNeed("patch", "deployments", Scope.FAULTS, ("k8s.force_anti_affinity_deadlock",), group="apps"),
    KubeNeed("list", "rayclusters", Scope.WORKLOADS, (PROBE,), group="ray.io"),
    KubeNeed("get", "secrets", Scope.WORKLOADS, (DRIVER,), names=TOKEN_SECRET),
    KubeNeed("get", "customresourcedefinitions", Scope.CLUSTER, (PREFLIGHT,), group="apiextensions.k8s.io",
             names=CRD_NAMES),
)
# fmt: on


@dataclass(frozen=True)
class NeededAccess:
    """One access to review, and who needs it."""

    access: KubeAccess
    needed_by: tuple[str, ...]


def needed_access(config: K8sEnvConfig, faults: Iterable[str] | None = None) -> list[NeededAccess]:
    """The accesses a run against ``config`` makes, in table order, one per (row, namespace, name).

    ``faults`` narrows the faults' rows to those faults (the experiments a run or game day
    plans); None keeps every fault's. The probe's, the driver's and the preflight's rows are
    always kept. A token Secret row is dropped when the token comes from a file.
    """
    wanted = None if faults is None else set(faults)
    always = {PROBE, DRIVER, PREFLIGHT}
    merged: dict[KubeAccess, tuple[str, ...]] = {}
    for need in KUBE_NEEDS:
        by = tuple(n for n in need.needed_by if n in always or wanted is None or n in wanted)
        if not by:
            continue
        for namespace in _namespaces(need.scope, config):
            for name in _names(need.names, config):
                access = KubeAccess(need.verb, need.resource, need.group, need.subresource, namespace, name)
                # The workloads' namespace is usually one of the faults' too: one review, both callers.
                known = merged.get(access, ())
                merged[access] = known + tuple(n for n in by if n not in known)
    return [NeededAccess(access, by) for access, by in merged.items()]


def _namespaces(scope: Scope, config: K8sEnvConfig) -> tuple[str, ...]:
    if scope is Scope.CLUSTER:
        return ("",)
    if scope is Scope.WORKLOADS:
        return (config.kube.namespace,)
    return config.allow.namespaces


def _names(names: str, config: K8sEnvConfig) -> tuple[str, ...]:
    if names == TOKEN_SECRET:
        return (config.ray.auth_token_secret,) if config.ray.auth_token_secret else ()
    if names == CRD_NAMES:
        return KUBERAY_CRDS
    return ("",)
