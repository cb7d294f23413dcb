"""The blast-radius fence: the one allow-list type, for every environment.

It is the ``allow`` block of an environment config file (``--config``) and the ``k8s_allow``
block of a Chaos Toolkit configuration; its keys::

    allow:
      contexts: [kind-inferchaos]      # kube contexts the Kubernetes faults may act in
      namespaces: [inferchaos]         # namespaces they may act in
      node_selector: pool=gpu          # nodes they may act on (every node when unset)
      ray_addresses: [10.0.0.5:6379]   # Ray clusters a run may touch (any when empty)
      devices: ["host:0"]              # GPUs a squat may fill (any when empty)
      max_targets: 1                   # primary targets of one fault at most (default 1)

``contexts`` and ``namespaces`` guard the Kubernetes faults, and there an empty list allows
nothing: forgetting to fill the allow-list must never mean "everything" (a kind/cluster config
must list at least one of each). ``ray_addresses`` and ``devices`` guard every plan the
runner checks, and leave it open when empty, as a local run without ``--config`` is.
``max_targets`` bounds the primary objects a fault acts on (nodes for node faults, Pods for
``kill_pods``, Deployments for the anti-affinity fault, replicas and devices locally).

Every refusal is a one-line :class:`ConfigError` naming the offending context, namespace,
node or count. ``kube_contexts``, the local config's old name of ``contexts``, still reads,
with a deprecation warning.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from inferchaos.errors import ConfigError
from inferchaos.params import InvalidValue, parse_params
from inferchaos.primitives.kube.api import api_errors

if TYPE_CHECKING:
    from kubernetes.client import CoreV1Api

logger = logging.getLogger(__name__)

# Old key -> its name now.
_RENAMED = {"kube_contexts": "contexts"}


@dataclass(frozen=True)
class AllowList:
    """What a run may touch: kube contexts, namespaces, nodes, Ray clusters, devices, and how many at once."""

    contexts: tuple[str, ...] = ()
    namespaces: tuple[str, ...] = ()
    node_selector: str | None = None
    ray_addresses: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()
    max_targets: int = 1

    def __post_init__(self) -> None:
        # Callers in code pass lists too; tuples keep the list frozen and comparable.
        for name in ("contexts", "namespaces", "ray_addresses", "devices"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if isinstance(self.max_targets, bool) or self.max_targets < 1:
            raise InvalidValue("max_targets", f"must be at least 1, got {self.max_targets}")

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "allow") -> AllowList:
        """Build from an ``allow`` block (a config file's, or a Chaos Toolkit configuration's).

        ``where`` starts every error message (the file and block the mapping came from).
        """
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: the allow-list must be a mapping, got {data!r}")
        return parse_params(where, cls, with_current_keys(data, where), noun="key")
        return parse_params(where, cls, data, noun="key")

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
        return {n.metadata.name for n in nodes if n.metadata is not None and n.metadata.name}

    def ensure_nodes(self, fault: str, core: CoreV1Api, nodes: list[str]) -> None:
        """Refuse any node that does not exist or that the node selector does not admit."""
        allowed = self.allowed_nodes(core)
        for node in nodes:
            if node not in allowed:
                raise ConfigError(
                    f"{fault}: node {node!r} is outside the allow-list "
                    f"(node_selector {self.node_selector or '<none>'!r}, or no such node)"
                )


def _names(names: tuple[str, ...]) -> str:
    return ", ".join(names) if names else "none"


def with_current_keys(data: dict[str, Any], where: str) -> dict[str, Any]:
    """``data`` (an allow block) with old key names replaced by today's, each with a warning."""
    data = dict(data)
    for old, new in _RENAMED.items():
        if old in data:
            if new in data:
                raise ConfigError(f"{where}: {old} is the old name of {new}; give {new} only")
            logger.warning("%s: %s is deprecated; call it %s", where, old, new)
            data[new] = data.pop(old)
    return data
