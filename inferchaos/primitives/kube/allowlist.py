"""The blast-radius fence of the Kubernetes faults.

Every ``plan()`` checks its targets here before anything is touched, and refuses with a
one-line :class:`ConfigError` naming the offending context, namespace or node. An empty
list allows nothing: forgetting to fill the allow-list must never mean "everything".
``max_targets`` bounds the primary objects a fault acts on (nodes for node faults, Pods for
``kill_pods``, Deployments for the anti-affinity fault).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubernetes.client import CoreV1Api

from inferchaos.errors import ConfigError
from inferchaos.primitives.kube.api import api_errors


@dataclass(frozen=True)
class K8sAllowList:
    """Where Kubernetes faults may act: kube contexts, namespaces, nodes, and how many at once."""

    contexts: list[str]
    namespaces: list[str]
    node_selector: str | None
    max_targets: int

    def __post_init__(self) -> None:
        if self.max_targets < 1:
            raise ConfigError(f"allow-list max_targets must be at least 1, got {self.max_targets}")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> K8sAllowList:
        """Build from the ``allow`` block of cluster.yaml or a Chaos Toolkit configuration."""
        unknown = sorted(set(data) - {"contexts", "namespaces", "node_selector", "max_targets"})
        if unknown:
            raise ConfigError(f"allow-list has unknown key(s) {', '.join(unknown)}")
        contexts, namespaces = data.get("contexts", []), data.get("namespaces", [])
        if not isinstance(contexts, list) or not isinstance(namespaces, list):
            raise ConfigError("allow-list contexts and namespaces must be lists of names")
        max_targets = data.get("max_targets", 1)
        if not isinstance(max_targets, int) or isinstance(max_targets, bool):
            raise ConfigError(f"allow-list max_targets must be an integer, got {max_targets!r}")
        return cls(
            contexts=[str(c) for c in contexts],
            namespaces=[str(n) for n in namespaces],
            node_selector=data.get("node_selector") or None,
            max_targets=max_targets,
        )

    def ensure_context(self, fault: str, context: str | None) -> None:
        """Refuse a kube context that is not listed (or unknown)."""
        if context is None or context not in self.contexts:
            raise ConfigError(
                f"{fault}: kube context {context!r} is outside the allow-list (allowed: {_names(self.contexts)})"
            )

    def ensure_namespace(self, fault: str, namespace: str) -> None:
        """Refuse a namespace that is not listed."""
        if namespace not in self.namespaces:
            raise ConfigError(
                f"{fault}: namespace {namespace!r} is outside the allow-list (allowed: {_names(self.namespaces)})"
            )

    def ensure_max_targets(self, fault: str, what: str, targets: list[str]) -> None:
        """Refuse acting on more primary targets than ``max_targets``."""
        if len(targets) > self.max_targets:
            raise ConfigError(
                f"{fault}: would act on {len(targets)} {what} ({', '.join(targets)}), "
                f"more than the allow-list's max_targets {self.max_targets}"
            )

    def allowed_nodes(self, core: CoreV1Api) -> set[str]:
        """Names of the nodes the node selector admits (every node when it is unset)."""
        with api_errors("list the allowed nodes"):
            nodes = core.list_node(label_selector=self.node_selector or None).items
        return {n.metadata.name for n in nodes}

    def ensure_nodes(self, fault: str, core: CoreV1Api, nodes: list[str]) -> None:
        """Refuse any node that does not exist or that the node selector does not admit."""
        allowed = self.allowed_nodes(core)
        for node in nodes:
            if node not in allowed:
                raise ConfigError(
                    f"{fault}: node {node!r} is outside the allow-list "
                    f"(node_selector {self.node_selector or '<none>'!r}, or no such node)"
                )


def _names(names: list[str]) -> str:
    return ", ".join(names) if names else "none"
