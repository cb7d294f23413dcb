"""``k8s.kill_pods``: delete Pods chosen by label selector, a count or a percentage of them.

Only Pods that are not already terminating, and (with a node selector in the allow-list) only
Pods on admitted nodes, are candidates. The choice is random but reproducible with ``seed``.
Nothing is restored on revert: the Pods' controllers replace them, which is what the
experiment watches; revert only closes the ledger entry.
"""

from __future__ import annotations

import logging
import math
import random
from dataclasses import dataclass
from typing import Any

from inferchaos.errors import ConfigError
from inferchaos.faults.base import Evidence, FaultHandle, JsonObject, Planned, timestamps
from inferchaos.faults.k8s.k8s_fault import K8sFault
from inferchaos.faults.ledger import Ledger
from inferchaos.faults.registry import register
from inferchaos.primitives.kube.api import api_errors, read_if_exists
from inferchaos.primitives.kube.client import K8sTarget

logger = logging.getLogger(__name__)


@dataclass
class KillPodsParams:
    """Which Pods (namespace + label selector) and how many (``count`` or ``percent``, not both)."""

    namespace: str
    label_selector: str
    count: int | None = None
    percent: float | None = None
    grace_period_s: int = 0
    seed: int | None = None

    def __post_init__(self) -> None:
        if not self.namespace or not self.label_selector:
            raise ConfigError("kill_pods needs a namespace and a non-empty label_selector")
        if (self.count is None) == (self.percent is None):
            raise ConfigError("kill_pods needs exactly one of count and percent")
        if self.count is not None and self.count < 1:
            raise ConfigError(f"kill_pods count must be at least 1, got {self.count}")
        if self.percent is not None and not 0 < self.percent <= 100:
            raise ConfigError(f"kill_pods percent must be in (0, 100], got {self.percent}")
        if self.grace_period_s < 0:
            raise ConfigError(f"kill_pods grace_period_s must be >= 0, got {self.grace_period_s}")

    def how_many(self, candidates: int) -> int:
        """The number of Pods to kill out of ``candidates``: at least one for a percentage."""
        if self.count is not None:
            return self.count
        return max(1, math.ceil(candidates * (self.percent or 0.0) / 100))


@register
class KillPods(K8sFault[KillPodsParams]):
    """Delete some of the Pods a label selector picks."""

    name = "k8s.kill_pods"
    params_type = KillPodsParams
    rollback_keys = ("namespace", "label_selector")

    def _plan(self, target: K8sTarget, params: KillPodsParams) -> Planned:
        target.allow.ensure_namespace(self.name, params.namespace)
        with api_errors(f"list Pods {params.label_selector!r} in {params.namespace}"):
            pods: list[Any] = target.core.list_namespaced_pod(
                params.namespace, label_selector=params.label_selector
            ).items
        allowed_nodes = target.allow.allowed_nodes(target.core) if target.allow.node_selector else None
        candidates = sorted(
            (
                p
                for p in pods
                if p.metadata.deletion_timestamp is None
                and (allowed_nodes is None or not p.spec.node_name or p.spec.node_name in allowed_nodes)
            ),
            key=lambda p: p.metadata.name,
        )
        wanted = params.how_many(len(candidates))
        if wanted > len(candidates):
            raise ConfigError(
                f"{self.name}: asked for {wanted} Pod(s) but {len(candidates)} match "
                f"{params.label_selector!r} in namespace {params.namespace!r} on allowed nodes"
            )
        chosen = random.Random(params.seed).sample(candidates, wanted)
        names = [f"pod/{params.namespace}/{p.metadata.name}" for p in chosen]
        target.allow.ensure_max_targets(self.name, "Pod(s)", names)
        state: JsonObject = {
            "pods": [
                {"name": p.metadata.name, "uid": p.metadata.uid, "node": p.spec.node_name} for p in chosen
            ]
        }
        description = (
            f"delete {wanted} of {len(candidates)} Pod(s) {params.label_selector!r} in {params.namespace} "
            f"(grace {params.grace_period_s} s)"
        )
        return Planned(description, names, state)

    def _act(self, target: K8sTarget, params: KillPodsParams, handle: FaultHandle, ledger: Ledger) -> None:
        from kubernetes.client import V1DeleteOptions, V1Preconditions

        for pod in handle.state["pods"]:
            # The uid precondition makes sure a same-named replacement is never the one deleted.
            options = V1DeleteOptions(
                grace_period_seconds=params.grace_period_s, preconditions=V1Preconditions(uid=pod["uid"])
            )
            # 404/409: gone already, or a same-named replacement this fault never planned.
            with api_errors(f"delete pod {params.namespace}/{pod['name']}", tolerate=(404, 409)):
                target.core.delete_namespaced_pod(pod["name"], params.namespace, body=options)

    def _undo(self, target: K8sTarget, params: KillPodsParams, handle: FaultHandle, ledger: Ledger) -> None:
        logger.info("%s: nothing to restore; the Pods' controllers replace them", self.name)

    def _evidence(self, target: K8sTarget, params: KillPodsParams, handle: FaultHandle) -> Evidence:
        killed, survived, replaced = [], [], []
        for pod in handle.state["pods"]:
            what = f"read pod {params.namespace}/{pod['name']}"
            live: Any = read_if_exists(what, target.core.read_namespaced_pod, pod["name"], params.namespace)
            if live is None:
                killed.append(pod["name"])
            elif live.metadata.uid != pod["uid"]:
                killed.append(pod["name"])
                replaced.append(pod["name"])
            elif live.metadata.deletion_timestamp is not None:
                killed.append(pod["name"])
            else:
                survived.append(pod["name"])
        total = len(handle.state["pods"])
        reason = f"{len(killed)}/{total} chosen Pod(s) gone or terminating"
        symptoms: JsonObject = {
            "killed": killed,
            "replaced_by_same_name": replaced,
            "still_running": survived,
        }
        return Evidence(total > 0 and not survived, reason, symptoms, timestamps(handle))
