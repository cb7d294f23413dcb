"""The scheduler-ledger faults against the fake cluster: squatters, GPU taints, anti-affinity."""

from __future__ import annotations

import copy

import pytest

from inferchaos.errors import ConfigError
from inferchaos.faults.k8s.scheduler_ledger import ForceAntiAffinityDeadlock, SquatGpuLedger, TaintGpuNodes
from inferchaos.faults.ledger import Ledger
from tests.fakes.apiserver import FakeCluster
from tests.fakes.k8s_doubles import KindEnv
from tests.fakes.k8s_objects import (
    NS,
    VLLM_NODE_AFFINITY,
    VLLM_RS,
    WORKERS,
    failed_scheduling,
    pending_pod,
    pod,
)

CONTROL_PLANE_TAINT = "1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }"
PREEMPTION = " preemption: 0/4 nodes are available: 1 Preemption is not helpful for scheduling, 3 No preemption victims found for incoming pod."
NO_GPU = f"0/4 nodes are available: {CONTROL_PLANE_TAINT}, 3 Insufficient nvidia.com/gpu.{PREEMPTION}"
TAINTED = f"0/4 nodes are available: {CONTROL_PLANE_TAINT}, 3 node(s) had untolerated taint {{inferchaos.io/chaos: gpu-unavailable}}.{PREEMPTION}"
ANTI = f"0/4 nodes are available: {CONTROL_PLANE_TAINT}, 3 node(s) didn't match pod anti-affinity rules.{PREEMPTION}"


def schedule_failed(
    cluster: FakeCluster, name: str, message: str, labels: dict[str, str] | None = None
) -> None:
    """What the scheduler leaves behind for a Pod it cannot place."""
    waiting = cluster.add(pending_pod(name, message, labels=labels or {"app": "vllm"}))
    cluster.add(failed_scheduling(waiting, message))


def test_squat_holds_exactly_the_free_gpus(env: KindEnv, cluster: FakeCluster, ledger: Ledger) -> None:
    cluster.add(
        pod("old-job", node_name=WORKERS[0], gpus=1, phase="Succeeded")
    )  # a finished Pod holds nothing
    fault = SquatGpuLedger()
    handle = fault.inject(env, {"namespace": NS}, ledger)

    created = {r.body["metadata"]["name"]: r.body for r in cluster.requests if r.method == "POST"}
    assert len(created) == 3
    for squat in handle.state["pods"]:
        spec = created[squat["name"]]["spec"]
        (container,) = spec["containers"]
        assert container["resources"]["requests"] == container["resources"]["limits"]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"  # 2 allocatable, 1 held by vLLM
        term = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ][0]
        assert term["matchFields"] == [{"key": "metadata.name", "operator": "In", "values": [squat["node"]]}]
    assert {s["node"] for s in handle.state["pods"]} == set(WORKERS)


def test_squat_bites_once_a_pod_waits_for_a_gpu(env: KindEnv, cluster: FakeCluster, ledger: Ledger) -> None:
    fault = SquatGpuLedger()
    handle = fault.inject(env, {"namespace": NS}, ledger)
    unbound = fault.evidence(env, handle)
    assert not unbound.bit and unbound.reason.startswith("0/3 squatter(s) bound")

    for squat in handle.state["pods"]:  # the scheduler binds them
        cluster.update(
            "pods", squat["name"], NS, spec={"nodeName": squat["node"]}, status={"phase": "Running"}
        )
    idle = fault.evidence(env, handle)
    assert not idle.bit and idle.symptoms["gpus_held"] == 3 and idle.symptoms["pending"] == []

    schedule_failed(cluster, f"{VLLM_RS}-zz9q", NO_GPU)
    bitten = fault.evidence(env, handle)
    assert bitten.bit
    assert bitten.symptoms["pending"] == [f"{NS}/{VLLM_RS}-zz9q Pending: {NO_GPU}"]

    fault.revert(env, handle, ledger)
    assert not [p for p in cluster.names("pods", NS) if p.startswith("inferchaos-squat-")]


def test_squat_refuses_more_gpus_than_are_free(env: KindEnv, cluster: FakeCluster) -> None:
    with pytest.raises(ConfigError, match=f"node '{WORKERS[0]}' has 1 free nvidia.com/gpu, cannot squat 2"):
        SquatGpuLedger().plan(env, {"namespace": NS, "gpus_per_node": 2})


def test_squat_skips_full_nodes_and_refuses_when_all_are_full(env: KindEnv, cluster: FakeCluster) -> None:
    cluster.add(pod("trainer-0", node_name=WORKERS[0], gpus=1, labels={"app": "trainer"}))
    plan = SquatGpuLedger().plan(env, {"namespace": NS})
    assert len(plan.targets) == 2 and plan.description.endswith(f"already full: {WORKERS[0]}")
    for worker in WORKERS[1:]:
        cluster.add(pod(f"trainer-{worker}", node_name=worker, gpus=1, labels={"app": "trainer"}))
    with pytest.raises(ConfigError, match="no allowed node has a free nvidia.com/gpu"):
        SquatGpuLedger().plan(env, {"namespace": NS})


def test_taint_writes_conditionally_and_retries_on_conflict(
    env: KindEnv, cluster: FakeCluster, ledger: Ledger
) -> None:
    cluster.conflict_next_patch["nodes"] = 1  # the node controller writes first, once
    handle = TaintGpuNodes().inject(env, {"label_selector": "inferchaos.io/pool=gpu"}, ledger)

    patches = [r for r in cluster.requests if r.method == "PATCH"]
    assert len(patches) == len(WORKERS) + 1
    assert all(p.body["metadata"]["resourceVersion"] for p in patches)
    for worker in WORKERS:
        assert {"key": "inferchaos.io/chaos", "value": "gpu-unavailable", "effect": "NoSchedule"} in (
            cluster.get("nodes", worker)["spec"]["taints"]
        )
    assert sorted(handle.state["nodes"]) == sorted(WORKERS)


def test_taint_revert_keeps_taints_that_were_there(
    env: KindEnv, cluster: FakeCluster, ledger: Ledger
) -> None:
    operator_taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    cluster.update("nodes", WORKERS[1], spec={"taints": [operator_taint]})
    fault = TaintGpuNodes()
    handle = fault.inject(env, {"label_selector": "inferchaos.io/pool=gpu", "effect": "NoExecute"}, ledger)
    assert len(cluster.get("nodes", WORKERS[1])["spec"]["taints"]) == 2

    fault.revert(env, handle, ledger)
    assert cluster.get("nodes", WORKERS[1])["spec"]["taints"] == [operator_taint]
    assert "taints" not in cluster.get("nodes", WORKERS[0])["spec"]


def test_taint_bites_once_a_pod_cannot_tolerate_it(
    env: KindEnv, cluster: FakeCluster, ledger: Ledger
) -> None:
    fault = TaintGpuNodes()
    handle = fault.inject(env, {"label_selector": "inferchaos.io/pool=gpu"}, ledger)
    assert not fault.evidence(env, handle).bit
    schedule_failed(cluster, f"{VLLM_RS}-tt1q", TAINTED)
    evidence = fault.evidence(env, handle)
    assert evidence.bit and evidence.symptoms["tainted"] == list(WORKERS)


def test_taint_refuses_nodes_that_already_carry_it(env: KindEnv, cluster: FakeCluster) -> None:
    cluster.update(
        "nodes", WORKERS[2], spec={"taints": [{"key": "inferchaos.io/chaos", "effect": "NoSchedule"}]}
    )
    with pytest.raises(ConfigError, match=f"'{WORKERS[2]}' already has taint"):
        TaintGpuNodes().plan(env, {"label_selector": "inferchaos.io/pool=gpu"})


def test_anti_affinity_adds_a_hostname_rule_and_more_replicas_than_nodes(
    env: KindEnv, cluster: FakeCluster, ledger: Ledger
) -> None:
    ForceAntiAffinityDeadlock().inject(
        env, {"namespace": NS, "deployment": "vllm", "extra_replicas": 2}, ledger
    )

    (patch,) = [r for r in cluster.requests if r.method == "PATCH"]
    assert patch.content_type.startswith("application/json-patch+json")
    spec = cluster.get("deployments", "vllm", NS)["spec"]
    assert spec["replicas"] == 4 + 2  # four nodes in the cluster
    affinity = spec["template"]["spec"]["affinity"]
    assert affinity["nodeAffinity"] == VLLM_NODE_AFFINITY["nodeAffinity"]  # kept
    assert affinity["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == [
        {"labelSelector": {"matchLabels": {"app": "vllm"}}, "topologyKey": "kubernetes.io/hostname"}
    ]


def test_anti_affinity_bites_when_the_extras_stay_pending(
    env: KindEnv, cluster: FakeCluster, ledger: Ledger
) -> None:
    fault = ForceAntiAffinityDeadlock()
    handle = fault.inject(env, {"namespace": NS, "deployment": "vllm"}, ledger)
    schedule_failed(cluster, "router-5d8f-q1", ANTI, labels={"app": "router"})  # another Deployment's Pod
    assert not fault.evidence(env, handle).bit
    schedule_failed(cluster, f"{VLLM_RS}-aa1q", ANTI)
    evidence = fault.evidence(env, handle)
    assert evidence.bit and evidence.symptoms["replicas"] == 5 and len(evidence.symptoms["pending"]) == 1


def test_anti_affinity_revert_removes_what_was_not_there_and_keeps_a_rollout(
    env: KindEnv, cluster: FakeCluster, ledger: Ledger
) -> None:
    original = cluster.get("deployments", "router", NS)["spec"]
    fault = ForceAntiAffinityDeadlock()
    handle = fault.inject(env, {"namespace": NS, "deployment": "router"}, ledger)
    rolled = copy.deepcopy(original["template"]["spec"]["containers"])
    rolled[0]["image"] = "inferchaos/vllm-cpu:0.32.1"
    cluster.update("deployments", "router", NS, spec={"template": {"spec": {"containers": rolled}}})

    fault.revert(env, handle, ledger)
    fault.revert(env, handle, ledger)
    spec = cluster.get("deployments", "router", NS)["spec"]
    assert "affinity" not in spec["template"]["spec"] and spec["replicas"] == original["replicas"]
    assert spec["template"]["spec"]["containers"] == rolled
    assert len([r for r in cluster.requests if r.method == "PATCH"]) == 2  # the second revert wrote nothing


def test_anti_affinity_refuses_an_unknown_deployment(env: KindEnv, cluster: FakeCluster) -> None:
    with pytest.raises(ConfigError, match="no deployment 'vlm'"):
        ForceAntiAffinityDeadlock().plan(env, {"namespace": NS, "deployment": "vlm"})
