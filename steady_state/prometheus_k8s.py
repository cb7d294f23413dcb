"""The Kubernetes probe read from Prometheus: kube-state-metrics' ``kube_*`` series, by PromQL.

kube-state-metrics turns the API server's objects into series
(https://github.com/kubernetes/kube-state-metrics/tree/main/docs/metrics). Read through the
Prometheus that scrapes it, a tick is a fixed set of queries whatever the cluster's size and
needs no kube credentials where the suite runs. The samples are named and labelled as
steady_state/k8s.py's, from these series (names and labels checked against kube-state-metrics'
docs/metrics/{cluster/node,workload/deployment,workload/pod}-metrics.md and internal/store/*.go):

- ``k8s.nodes_ready``: nodes with ``kube_node_status_condition{condition="Ready",status="true"}``
  at 1; ``k8s.nodes_schedulable``: those of them whose ``kube_node_spec_unschedulable`` is not
  1 (not cordoned);
- ``k8s.deployment_ready_replicas{deployment}``, ``k8s.deployment_available_replicas{deployment}``:
  ``kube_deployment_status_replicas_ready`` and ``kube_deployment_status_replicas_available``;
- ``k8s.pods_pending{namespace}``: Pods whose ``kube_pod_status_phase{phase="Pending"}`` is 1;
- ``k8s.pod_restarts{pod}``: ``kube_pod_container_status_restarts_total`` summed over the Pod's
  containers (0 for a Pod with no container status yet, as the API probe reads it);
- ``k8s.pods_unschedulable{namespace,reason}``: Pending Pods with ``kube_pod_status_unschedulable``,
  which kube-state-metrics sets for every Pod whose ``PodScheduled`` condition is False
  (``kube_pod_status_scheduled{condition="false"}`` carries the same fact, so it is not queried).

What the reason says: kube-state-metrics exports neither the ``PodScheduled`` condition's
message nor the scheduler's ``FailedScheduling`` events, so the scheduler's own words
(``0/4 nodes are available: 3 Insufficient nvidia.com/gpu``), which the API probe puts in the
``reason`` label, are not there. The one reason it does carry for a Pod not yet placed is
``kube_pod_status_reason{reason="SchedulingGated"}`` (a Pod held back by its schedulingGates);
every other unschedulable Pod is one the scheduler tried and refused, the condition's reason
``Unschedulable``. Those two words are the ``reason`` label here: triage can name the macro
layer and the namespace, not the resource or taint that ruled the nodes out.

Not read: the ``k8s.raycluster_*`` samples (kube-state-metrics exports KubeRay's RayClusters
only through a custom-resource-state config the suite cannot assume).

The allow-list's ``node_selector`` narrows the node counts, as it narrows the API probe's, by
a join on ``kube_node_labels``. kube-state-metrics exports a node label there only when its
``--metric-labels-allowlist=nodes=[...]`` names the key (as ``label_<key>``, sanitized); where
it does not, each read is a ProbeError naming the flag, never a reading of 0 nodes. A selector
PromQL cannot express is a ConfigError when the probe is built.

Deployments and Pods are scoped by kube-state-metrics' own ``namespace`` label: Prometheus
must keep it (``honor_labels``, as kube-prometheus-stack's ServiceMonitor for it does; without
it that label names kube-state-metrics' own namespace and these queries find nothing). Every
series is read as ``max`` per object, so two kube-state-metrics replicas scraped side by side
do not count a Pod twice. The readings lag the API server by a scrape interval.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass

import httpx

from inferchaos.errors import ConfigError, ProbeError
from inferchaos.layers import Layer
from inferchaos.primitives.prometheus_api import PromSeries, finite
from inferchaos.steady_state.probe_base import Sample
from inferchaos.steady_state.prometheus_queries import PromQueries

logger = logging.getLogger(__name__)

NODES_READY, NODES_CORDONED, NODE_LABELS = "nodes_ready", "nodes_cordoned", "node_labels"
DEPLOYMENTS_READY, DEPLOYMENTS_AVAILABLE = "deployments_ready", "deployments_available"
POD_PHASES, POD_RESTARTS, PODS_UNSCHEDULABLE, PODS_GATED = "pod_phases", "restarts", "unschedulable", "gated"

# kube_pod_status_reason's value for a Pod its schedulingGates hold back (internal/store/pod.go).
GATED_REASON = "SchedulingGated"
# The PodScheduled condition's reason for a Pod the scheduler refused; kube-state-metrics does
# not export it, only that the condition is False.
UNSCHEDULABLE_REASON = "Unschedulable"

# Kubernetes label keys (prefix/name) and values: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/
_KEY = r"[A-Za-z0-9][-A-Za-z0-9_./]*"
_VALUE = r"[-A-Za-z0-9_.]*"
# One requirement of a label selector and the comma after it, in the order they must be tried.
_REQUIREMENT = re.compile(
    rf"\s*(?:!\s*(?P<absent>{_KEY})"
    rf"|(?P<set_key>{_KEY})\s+(?P<set_op>notin|in)\s*\((?P<values>[^()]*)\)"
    rf"|(?P<eq_key>{_KEY})\s*(?P<eq_op>==|!=|=)\s*(?P<value>{_VALUE})"
    rf"|(?P<exists>{_KEY})"
    r")\s*(?:,|$)"
)


def ksm_label_name(key: str) -> str:
    """The label kube-state-metrics gives a Kubernetes label key on ``kube_node_labels``.

    ``label_``, then the key with every character outside ``[a-zA-Z0-9_]`` made ``_`` and
    camelCase made snake_case, lowercased (internal/store/utils.go: labelName): the key
    ``inferchaos.io/pool`` is ``label_inferchaos_io_pool``. Two keys that come out the same get
    ``_conflictN`` suffixes there; such keys are not told apart here.
    """
    sanitized = re.sub(r"[^a-zA-Z0-9_]", "_", key)
    return "label_" + re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", sanitized).lower()


def _quoted(text: str) -> str:
    """A PromQL string literal."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass(frozen=True)
class NodeRequirement:
    """One requirement of a Kubernetes label selector, as a matcher on ``kube_node_labels``.

    ``op`` is ``=``, ``!=``, ``in``, ``notin``, ``exists`` or ``!`` (does not exist). A label
    absent from a series reads as ``""`` in PromQL, so ``!=``, ``notin`` and ``!`` hold for a
    node without the label, as they do in Kubernetes.
    """

    key: str
    op: str
    values: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return ksm_label_name(self.key)

    @property
    def positive(self) -> bool:
        """Whether only a node that has the label can meet it."""
        return self.op in ("=", "in", "exists")

    def matcher(self) -> str:
        """This requirement as a PromQL label matcher."""
        if self.op in ("in", "notin"):
            # PromQL regexes are anchored; a value's '.' and '-' must match only themselves.
            alternatives = _quoted("|".join(re.escape(v) for v in self.values))
            return f"{self.label}{'=~' if self.op == 'in' else '!~'}{alternatives}"
        if self.op in ("exists", "!"):
            return f'{self.label}{"!=" if self.op == "exists" else "="}""'
        return f"{self.label}{self.op}{_quoted(self.values[0] if self.values else '')}"


def node_requirements(node_selector: str | None) -> tuple[NodeRequirement, ...]:
    """A Kubernetes label selector (``pool=gpu,zone in (a,b),!spot``) as requirements on node labels.

    ConfigError, in one line, for a selector that is not one.
    """
    text = (node_selector or "").strip()
    requirements: list[NodeRequirement] = []
    position = 0
    while position < len(text):
        m = _REQUIREMENT.match(text, position)
        if m is None or m.end() == position:
            raise ConfigError(
                f"allow.node_selector: {node_selector!r} is not a Kubernetes label selector "
                f"(at {text[position:]!r}); the Prometheus k8s probe reads it against kube_node_labels"
            )
        if m["absent"]:
            requirements.append(NodeRequirement(m["absent"], "!"))
        elif m["set_key"]:
            values = tuple(v.strip() for v in m["values"].split(",") if v.strip())
            requirements.append(NodeRequirement(m["set_key"], m["set_op"], values))
        elif m["eq_key"]:
            op = "=" if m["eq_op"] == "==" else m["eq_op"]
            requirements.append(NodeRequirement(m["eq_key"], op, (m["value"],)))
        else:
            requirements.append(NodeRequirement(m["exists"], "exists"))
        position = m.end()
    return tuple(requirements)


@dataclass(frozen=True)
class PromKubeSelector:
    """Which series are the cluster's kube-state-metrics', and which objects are the environment's.

    ``namespace`` scopes Deployments and Pods; ``matchers`` select the kube-state-metrics job
    (``job="kube-state-metrics"``) where Prometheus scrapes more than one cluster's;
    ``node_selector`` (the allow-list's) narrows the node counts, read against
    ``kube_node_labels``, which kube-state-metrics exports only for the label keys its
    ``--metric-labels-allowlist=nodes=[...]`` names.
    """

    namespace: str
    matchers: str = ""
    node_selector: str | None = None

    def selector(self, metric: str, *extra: str) -> str:
        inner = ",".join(m for m in (self.matchers, *extra) if m)
        return f"{metric}{{{inner}}}" if inner else metric

    def namespaced(self, metric: str, *extra: str) -> str:
        return self.selector(metric, f"namespace={_quoted(self.namespace)}", *extra)

    def queries(self) -> dict[str, str]:
        """Every query of one tick, by key; ConfigError when the node selector is not one."""
        requirements = node_requirements(self.node_selector)
        node_labels = self.selector("kube_node_labels", *(r.matcher() for r in requirements))
        # Only the nodes whose labels meet the selector; kube_node_labels is one series per node.
        of_selected = f" and on (node) {node_labels}" if requirements else ""
        ready = self.selector("kube_node_status_condition", 'condition="Ready"', 'status="true"')
        queries = {
            NODES_READY: f"max by (node) ({ready}){of_selected}",
            NODES_CORDONED: f"max by (node) ({self.selector('kube_node_spec_unschedulable')}){of_selected}",
            DEPLOYMENTS_READY: f"max by (deployment) ({self.namespaced('kube_deployment_status_replicas_ready')})",
            DEPLOYMENTS_AVAILABLE: (
                f"max by (deployment) ({self.namespaced('kube_deployment_status_replicas_available')})"
            ),
            # Each Pod's current phase: one series of the five is 1.
            POD_PHASES: f"max by (pod, phase) ({self.namespaced('kube_pod_status_phase')}) == 1",
            POD_RESTARTS: (
                "sum by (pod) (max by (pod, container) "
                f"({self.namespaced('kube_pod_container_status_restarts_total')}))"
            ),
            PODS_UNSCHEDULABLE: f"max by (pod) ({self.namespaced('kube_pod_status_unschedulable')})",
            PODS_GATED: (
                f"max by (pod) ({self.namespaced('kube_pod_status_reason', f'reason={_quoted(GATED_REASON)}')})"
            ),
        }
        if requirements:
            labels = ", ".join(sorted({r.label for r in requirements}))
            queries[NODE_LABELS] = f"count by ({labels}) ({self.selector('kube_node_labels')})"
        return queries


def _set_of(series: list[PromSeries], label: str) -> set[str]:
    """The objects (by ``label``) whose series is 1."""
    return {s.labels[label] for s in finite(series) if s.value == 1.0 and s.labels.get(label)}


def _check_node_labels(
    results: Mapping[str, list[PromSeries]], requirements: tuple[NodeRequirement, ...]
) -> None:
    """ProbeError when kube-state-metrics does not export the node labels the selector needs.

    Without them the join keeps no node, and a made-up 0 would read as a cluster that lost
    every node. A label only a negative requirement names may be on no node at all, so only
    the positive ones are checked.
    """
    exported = results.get(NODE_LABELS, [])
    keys = sorted({r.key for r in requirements})
    if not exported:
        raise ProbeError(
            "Prometheus has no kube_node_labels for the node selector: kube-state-metrics exports it "
            f"only with --metric-labels-allowlist=nodes=[{','.join(keys)}] (or it is not scraped yet)"
        )
    seen = {name for s in exported for name in s.labels}
    missing = sorted({r.key for r in requirements if r.positive and r.label not in seen})
    if missing:
        raise ProbeError(
            f"kube_node_labels has no {', '.join(ksm_label_name(k) for k in missing)} on any node: "
            f"add {', '.join(missing)} to kube-state-metrics' --metric-labels-allowlist=nodes=[...]"
        )


def k8s_samples_of(results: Mapping[str, list[PromSeries]], selector: PromKubeSelector) -> list[Sample]:
    """The ``k8s.*`` samples (named as steady_state/k8s.py names them) of one tick's query results.

    ProbeError when Prometheus holds no node of the cluster: kube-state-metrics is not scraped
    (yet), ``matchers`` select nothing, or the node selector's labels are not exported.
    """
    requirements = node_requirements(selector.node_selector)
    if requirements:
        _check_node_labels(results, requirements)
    elif not finite(results.get(NODES_READY, [])):
        raise ProbeError(
            "Prometheus has no kube_node_status_condition for the cluster (kube-state-metrics not scraped yet?)"
        )
    ready = _set_of(results.get(NODES_READY, []), "node")
    cordoned = _set_of(results.get(NODES_CORDONED, []), "node")
    samples = [
        Sample("k8s.nodes_ready", float(len(ready))),
        Sample("k8s.nodes_schedulable", float(len(ready - cordoned))),
    ]
    available = {
        s.labels.get("deployment", ""): s.value for s in finite(results.get(DEPLOYMENTS_AVAILABLE, []))
    }
    for s in sorted(finite(results.get(DEPLOYMENTS_READY, [])), key=lambda s: s.labels.get("deployment", "")):
        name = s.labels.get("deployment", "")
        if not name:
            continue
        samples.append(Sample("k8s.deployment_ready_replicas", s.value, {"deployment": name}))
        samples.append(
            Sample("k8s.deployment_available_replicas", available.get(name, 0.0), {"deployment": name})
        )
    phases = {
        s.labels["pod"]: s.labels.get("phase", "")
        for s in finite(results.get(POD_PHASES, []))
        if s.value == 1.0 and s.labels.get("pod")
    }
    restarts = {
        s.labels["pod"]: s.value for s in finite(results.get(POD_RESTARTS, [])) if s.labels.get("pod")
    }
    pending = {pod for pod, phase in phases.items() if phase == "Pending"}
    namespace = selector.namespace
    samples.append(Sample("k8s.pods_pending", float(len(pending)), {"namespace": namespace}))
    unschedulable = _set_of(results.get(PODS_UNSCHEDULABLE, []), "pod") & pending
    gated = _set_of(results.get(PODS_GATED, []), "pod")
    by_reason = {
        GATED_REASON: len(unschedulable & gated),
        UNSCHEDULABLE_REASON: len(unschedulable - gated),
    }
    samples += [
        Sample("k8s.pods_unschedulable", float(count), {"namespace": namespace, "reason": reason})
        for reason, count in sorted(by_reason.items())
        if count
    ]
    samples += [
        Sample("k8s.pod_restarts", restarts.get(pod, 0.0), {"pod": pod})
        for pod in sorted(phases.keys() | restarts.keys())
    ]
    return samples


class PrometheusK8sProbe:
    """The Kubernetes layer's readings from the Prometheus that scrapes the cluster's kube-state-metrics."""

    name = "k8s"
    layer = Layer.K8S

    def __init__(
        self,
        url: str,
        selector: PromKubeSelector,
        *,
        timeout_s: float = 2.0,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.selector = selector
        # Built now, so a node selector PromQL cannot express is a ConfigError before the run starts.
        self.source = PromQueries(url, selector.queries(), timeout_s=timeout_s, client=client)

    async def read(self) -> list[Sample]:
        """Samples named as steady_state/k8s.py names them (``k8s.*``, no RayCluster ones);
        ProbeError when Prometheus could not answer or holds no kube-state-metrics series."""
        return k8s_samples_of(await self.source.answers(), self.selector)

    async def aclose(self) -> None:
        """Close the HTTP client if this probe created it; idempotent."""
        await self.source.aclose()
