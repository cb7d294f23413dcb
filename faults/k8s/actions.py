"""The Kubernetes faults as Chaos Toolkit actions, each with its rollback.

Use them as python providers of ``faults.k8s.actions``; ``configuration`` is described in
:mod:`faults.k8s.configuration`. An action plans (refusing anything outside the allow-list),
writes the ledger entry, injects and returns the handle. Its rollback reverts every live
ledger entry of that fault whose parameters match the rollback's arguments, so it works in
a later process and after a crash, and returns the ids it reverted (none when nothing is left).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from inferchaos.faults.k8s import ledger as gpu_ledger
from inferchaos.faults.k8s import node as node_faults
from inferchaos.faults.k8s import pod as pod_faults
from inferchaos.faults.k8s.configuration import env_from_configuration, ledger_from_configuration
from inferchaos.faults.registry import get_fault

Configuration = dict[str, Any] | None
Secrets = dict[str, Any] | None

# Chaos Toolkit function -> registered fault: how the inferchaos runner reads a `method`.
FAULT_OF = {
    func: f"k8s.{func}"
    for func in (
        "cordon_node",
        "drain_node",
        "delete_node",
        "stop_node_container",
        "kill_pods",
        "squat_gpu_ledger",
        "taint_gpu_nodes",
        "force_anti_affinity_deadlock",
    )
}


def _inject(
    fault: str, params: dict[str, Any], configuration: Configuration, secrets: Secrets
) -> dict[str, Any]:
    env = env_from_configuration(configuration, secrets)
    try:
        handle = get_fault(fault).inject(env, params, ledger_from_configuration(configuration))
    finally:
        env.k8s.api_client.close()
    return asdict(handle)


def _rollback(fault: str, match: dict[str, Any], configuration: Configuration, secrets: Secrets) -> list[str]:
    env = env_from_configuration(configuration, secrets)
    ledger = ledger_from_configuration(configuration)
    implementation = get_fault(fault)
    reverted = []
    try:
        for handle in ledger.entries():
            if handle.fault == fault and all(handle.params.get(k) == v for k, v in match.items()):
                implementation.revert(env, handle, ledger)
                reverted.append(handle.id)
    finally:
        env.k8s.api_client.close()
    return reverted


def cordon_node(node: str, configuration: Configuration = None, secrets: Secrets = None) -> dict[str, Any]:
    """Mark ``node`` unschedulable."""
    return _inject(node_faults.CordonNode.name, {"node": node}, configuration, secrets)


def rollback_cordon_node(
    node: str, configuration: Configuration = None, secrets: Secrets = None
) -> list[str]:
    """Uncordon ``node`` where a cordon_node of it is still in the ledger."""
    return _rollback(node_faults.CordonNode.name, {"node": node}, configuration, secrets)


def uncordon_node(node: str, configuration: Configuration = None, secrets: Secrets = None) -> list[str]:
    """The verb-noun name of :func:`rollback_cordon_node`, for experiments that read better with it."""
    return rollback_cordon_node(node, configuration, secrets)


def drain_node(
    node: str,
    namespace: str,
    grace_period_s: int | None = None,
    timeout_s: float = 120.0,
    configuration: Configuration = None,
    secrets: Secrets = None,
) -> dict[str, Any]:
    """Cordon ``node`` and evict the Pods of ``namespace`` on it through the Eviction API."""
    params = {"node": node, "namespace": namespace, "grace_period_s": grace_period_s, "timeout_s": timeout_s}
    return _inject(node_faults.DrainNode.name, params, configuration, secrets)


def rollback_drain_node(node: str, configuration: Configuration = None, secrets: Secrets = None) -> list[str]:
    """Uncordon a drained ``node``."""
    return _rollback(node_faults.DrainNode.name, {"node": node}, configuration, secrets)


def delete_node(node: str, configuration: Configuration = None, secrets: Secrets = None) -> dict[str, Any]:
    """Delete the Node object ``node``."""
    return _inject(node_faults.DeleteNode.name, {"node": node}, configuration, secrets)


def rollback_delete_node(
    node: str, configuration: Configuration = None, secrets: Secrets = None
) -> list[str]:
    """Recreate a deleted ``node`` from its saved manifest."""
    return _rollback(node_faults.DeleteNode.name, {"node": node}, configuration, secrets)


def stop_node_container(
    node: str, grace_s: int = 0, configuration: Configuration = None, secrets: Secrets = None
) -> dict[str, Any]:
    """kind: stop the container of ``node``."""
    return _inject(
        node_faults.StopNodeContainer.name, {"node": node, "grace_s": grace_s}, configuration, secrets
    )


def rollback_stop_node_container(
    node: str, configuration: Configuration = None, secrets: Secrets = None
) -> list[str]:
    """kind: start the container of ``node`` again."""
    return _rollback(node_faults.StopNodeContainer.name, {"node": node}, configuration, secrets)


def kill_pods(
    namespace: str,
    label_selector: str,
    count: int | None = None,
    percent: float | None = None,
    grace_period_s: int = 0,
    seed: int | None = None,
    configuration: Configuration = None,
    secrets: Secrets = None,
) -> dict[str, Any]:
    """Delete ``count`` (or ``percent`` %) of the Pods ``label_selector`` picks in ``namespace``."""
    params = {"namespace": namespace, "label_selector": label_selector, "count": count, "percent": percent,
              "grace_period_s": grace_period_s, "seed": seed}  # fmt: skip
    return _inject(pod_faults.KillPods.name, params, configuration, secrets)


def rollback_kill_pods(
    namespace: str, label_selector: str, configuration: Configuration = None, secrets: Secrets = None
) -> list[str]:
    """Close the ledger entries of kill_pods (controllers replace the Pods themselves)."""
    match = {"namespace": namespace, "label_selector": label_selector}
    return _rollback(pod_faults.KillPods.name, match, configuration, secrets)


def squat_gpu_ledger(
    namespace: str,
    nodes: list[str] | None = None,
    gpus_per_node: int | None = None,
    resource: str = gpu_ledger.GPU,
    image: str = gpu_ledger.PAUSE_IMAGE,
    canary: bool = False,
    configuration: Configuration = None,
    secrets: Secrets = None,
) -> dict[str, Any]:
    """Hold the free GPUs of the allowed nodes with idle pause Pods in ``namespace``.

    With ``canary``, one more pause Pod asks for a GPU anywhere: it stays Pending while the squat holds.
    """
    params = {"namespace": namespace, "nodes": nodes, "gpus_per_node": gpus_per_node, "resource": resource,
              "image": image, "canary": canary}  # fmt: skip
    return _inject(gpu_ledger.SquatGpuLedger.name, params, configuration, secrets)


def rollback_squat_gpu_ledger(
    namespace: str, configuration: Configuration = None, secrets: Secrets = None
) -> list[str]:
    """Delete the squatter Pods in ``namespace``."""
    return _rollback(gpu_ledger.SquatGpuLedger.name, {"namespace": namespace}, configuration, secrets)


def taint_gpu_nodes(
    label_selector: str,
    key: str = "inferchaos.io/chaos",
    value: str = "gpu-unavailable",
    effect: str = "NoSchedule",
    resource: str = gpu_ledger.GPU,
    configuration: Configuration = None,
    secrets: Secrets = None,
) -> dict[str, Any]:
    """Taint the GPU nodes ``label_selector`` picks."""
    params = {
        "label_selector": label_selector,
        "key": key,
        "value": value,
        "effect": effect,
        "resource": resource,
    }
    return _inject(gpu_ledger.TaintGpuNodes.name, params, configuration, secrets)


def rollback_taint_gpu_nodes(
    label_selector: str,
    key: str = "inferchaos.io/chaos",
    configuration: Configuration = None,
    secrets: Secrets = None,
) -> list[str]:
    """Remove the taint from the nodes it was added to."""
    match = {"label_selector": label_selector, "key": key}
    return _rollback(gpu_ledger.TaintGpuNodes.name, match, configuration, secrets)


def force_anti_affinity_deadlock(
    namespace: str,
    deployment: str,
    extra_replicas: int = 1,
    configuration: Configuration = None,
    secrets: Secrets = None,
) -> dict[str, Any]:
    """Give ``deployment`` a hostname anti-affinity and more replicas than nodes."""
    params = {"namespace": namespace, "deployment": deployment, "extra_replicas": extra_replicas}
    return _inject(gpu_ledger.ForceAntiAffinityDeadlock.name, params, configuration, secrets)


def rollback_force_anti_affinity_deadlock(
    namespace: str, deployment: str, configuration: Configuration = None, secrets: Secrets = None
) -> list[str]:
    """Restore the Deployment's affinity and replicas."""
    match = {"namespace": namespace, "deployment": deployment}
    return _rollback(gpu_ledger.ForceAntiAffinityDeadlock.name, match, configuration, secrets)
