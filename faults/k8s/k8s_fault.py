"""The Kubernetes layer of the fault base: faults act through the environment's K8sTarget.

Plans also refuse a kube context outside the allow-list, so a client pointed at the wrong
cluster acts nowhere. Inject returns as soon as the cluster accepted the change: the effect
(a Pod Pending, a node NotReady) is read later, so the Chaos Toolkit action reports no evidence.
"""

from __future__ import annotations

from typing import ClassVar, TypeVar

from inferchaos.errors import ConfigError
from inferchaos.faults.base import JsonObject, Planned, TypedFault, env_name
from inferchaos.layers import Layer
from inferchaos.primitives.capabilities import KubeEnvironment
from inferchaos.primitives.kube.client import K8sTarget

P = TypeVar("P")


class K8sFault(TypedFault[P, K8sTarget]):
    """A fault of the Kubernetes layer; subclasses set ``params_type`` and the four steps."""

    layer: ClassVar[Layer] = Layer.K8S
    evidence_at_inject: ClassVar[bool] = False

    def _open(self, env: object) -> K8sTarget:
        if not isinstance(env, KubeEnvironment) or not isinstance(env.k8s, K8sTarget):
            raise ConfigError(
                f"{self.name}: environment {env_name(env)!r} has no Kubernetes layer "
                "(Kubernetes faults need env.k8s to be a K8sTarget)"
            )
        return env.k8s

    def _checked_plan(self, opened: K8sTarget, params: JsonObject) -> Planned:
        opened.allow.ensure_context(self.name, opened.context)
        return super()._checked_plan(opened, params)
