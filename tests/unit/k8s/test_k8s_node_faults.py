"""Node faults against the fake cluster: what a user sees while they are active."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferchaos.errors import ConfigError
from inferchaos.faults.k8s import node as node_module
from inferchaos.faults.k8s.node import CordonNode, DeleteNode, DrainNode, StopNodeContainer
from inferchaos.faults.ledger import Ledger
from inferchaos.primitives.kube.kube_errors import K8sError
from tests.fakes.apiserver import FakeCluster, RecordedRequest
from tests.fakes.k8s_doubles import FakeRuntime, KindEnv
from tests.fakes.k8s_objects import NS, WORKERS, node

WORKER = WORKERS[0]


def test_cordon_makes_the_node_unschedulable_until_reverted(
    env: KindEnv, cluster: FakeCluster, ledger: Ledger
) -> None:
    fault = CordonNode()
    handle = fault.inject(env, {"node": WORKER}, ledger)
    assert cluster.get("nodes", WORKER)["spec"]["unschedulable"] is True
    evidence = fault.evidence(env, handle)
    assert evidence.bit and evidence.symptoms["unschedulable"] is True
    assert evidence.timestamps["injected_at"] >= evidence.timestamps["created_at"]

    fault.revert(env, handle, ledger)
    assert "unschedulable" not in cluster.get("nodes", WORKER)["spec"]
    assert not fault.evidence(env, handle).bit


def test_cordon_refuses_a_node_someone_already_cordoned(env: KindEnv, cluster: FakeCluster) -> None:
    cluster.update("nodes", WORKER, spec={"unschedulable": True})
    with pytest.raises(ConfigError, match="already cordoned"):
        CordonNode().plan(env, {"node": WORKER})


def test_drain_evicts_the_namespace_pods_but_not_daemonset_or_mirror_pods(
    env: KindEnv, cluster: FakeCluster, ledger: Ledger
) -> None:
    fault = DrainNode()
    plan = fault.plan(env, {"node": WORKER, "namespace": NS})
    evictable = {
        f"pod/{NS}/{p}"
        for p in cluster.names("pods", NS)
        if p.startswith(("vllm-7c9d8f6b5-a", "raycluster-"))
    }
    assert set(plan.targets) == {f"node/{WORKER}", *evictable}

    handle = fault.inject(env, {"node": WORKER, "namespace": NS}, ledger)

    evictions = [r for r in cluster.requests if r.path.endswith("/eviction")]
    assert {r.body["metadata"]["name"] for r in evictions} == {t.rsplit("/", 1)[1] for t in evictable}
    assert all(r.body["apiVersion"] == "policy/v1" and r.body["kind"] == "Eviction" for r in evictions)
    assert not [r for r in cluster.requests if r.method == "DELETE"], "drain must go through the Eviction API"
    remaining = cluster.names("pods", NS)
    assert "node-agent-0k2f" in remaining and f"static-canary-{WORKER}" in remaining
    assert "coredns-7db6d8ff4d-p2xq9" in cluster.names("pods", "kube-system")
    evidence = fault.evidence(env, handle)
    assert evidence.bit and evidence.symptoms["still_on_node"] == []
    assert evidence.symptoms["skipped"][f"{NS}/static-canary-{WORKER}"] == "mirror Pod"
    assert evidence.symptoms["skipped"][f"{NS}/node-agent-0k2f"] == "DaemonSet Pod"


def test_drain_blocked_by_a_disruption_budget_fails_and_stays_revertable(
    env: KindEnv, cluster: FakeCluster, ledger: Ledger
) -> None:
    blocked = next(p for p in cluster.names("pods", NS) if p.startswith("vllm-7c9d8f6b5-a"))
    cluster.blocked_evictions.add((NS, blocked))
    fault = DrainNode()
    with pytest.raises(K8sError, match=f"{blocked}.*disruption budget"):
        fault.inject(env, {"node": WORKER, "namespace": NS, "timeout_s": 0.0}, ledger)
    (handle,) = ledger.entries()  # the entry stays so cleanup can uncordon
    assert cluster.get("nodes", WORKER)["spec"]["unschedulable"] is True

    fault.revert(env, handle, ledger)
    assert "unschedulable" not in cluster.get("nodes", WORKER)["spec"]
    assert ledger.is_empty()


def test_drain_retries_an_eviction_until_the_budget_allows_it(
    env: KindEnv, cluster: FakeCluster, ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(node_module, "EVICTION_RETRY_S", 0.01)
    blocked = next(p for p in cluster.names("pods", NS) if p.startswith("vllm-7c9d8f6b5-a"))
    cluster.blocked_evictions.add((NS, blocked))
    attempts: list[str] = []

    def budget_recovers(request: RecordedRequest) -> None:
        if request.path.endswith(f"/{blocked}/eviction"):
            attempts.append(request.path)
            if len(attempts) == 3:  # a replacement became healthy elsewhere
                cluster.blocked_evictions.discard((NS, blocked))

    cluster.observers.append(budget_recovers)
    handle = DrainNode().inject(env, {"node": WORKER, "namespace": NS, "timeout_s": 10.0}, ledger)
    assert len(attempts) == 3 and blocked not in cluster.names("pods", NS)
    assert DrainNode().evidence(env, handle).bit


def test_delete_node_removes_it_and_revert_recreates_it(
    env: KindEnv, cluster: FakeCluster, ledger: Ledger
) -> None:
    cluster.update(
        "nodes",
        WORKER,
        spec={"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
    )
    original = cluster.get("nodes", WORKER)
    fault = DeleteNode()
    handle = fault.inject(env, {"node": WORKER}, ledger)
    assert cluster.get("nodes", WORKER) is None
    assert fault.evidence(env, handle).bit

    fault.revert(env, handle, ledger)
    restored = cluster.get("nodes", WORKER)
    assert restored["metadata"]["labels"] == original["metadata"]["labels"]
    assert restored["spec"] == original["spec"]
    assert restored["status"]["allocatable"]["nvidia.com/gpu"] == "2"
    assert not fault.evidence(env, handle).bit


def test_delete_node_revert_leaves_a_node_that_registered_again(
    env: KindEnv, cluster: FakeCluster, ledger: Ledger
) -> None:
    fault = DeleteNode()
    handle = fault.inject(env, {"node": WORKER}, ledger)
    reregistered = cluster.add(
        node(WORKER, gpus=2, labels={"inferchaos.io/pool": "gpu"})
    )  # the kubelet came back
    fault.revert(env, handle, ledger)
    assert cluster.get("nodes", WORKER)["metadata"]["uid"] == reregistered["metadata"]["uid"]


def test_stop_node_container_stops_the_machine_until_reverted(
    env: KindEnv, cluster: FakeCluster, ledger: Ledger, fake_runtime: FakeRuntime
) -> None:
    fault = StopNodeContainer()
    handle = fault.inject(env, {"node": WORKERS[1]}, ledger)
    assert fake_runtime.calls()[-1] == f"stop -t 0 {WORKERS[1]}"
    assert not fake_runtime.running(WORKERS[1])

    early = fault.evidence(env, handle)
    assert not early.bit and "Ready=True" in early.reason  # the node controller has not noticed yet
    cluster.update(
        "nodes",
        WORKERS[1],
        status={
            "conditions": [
                {
                    "type": "Ready",
                    "status": "Unknown",
                    "reason": "NodeStatusUnknown",
                    "message": "Kubelet stopped posting node status.",
                    "lastHeartbeatTime": "2025-11-29T10:00:00Z",
                    "lastTransitionTime": "2025-11-29T10:00:40Z",
                }
            ]
        },
    )
    late = fault.evidence(env, handle)
    assert late.bit and late.symptoms == {
        "node": WORKERS[1],
        "container_running": False,
        "node_ready": "Unknown",
        "pending": [],  # no replacement asked for yet: test_k8s_scenarios shows one going Pending
    }

    fault.revert(env, handle, ledger)
    fault.revert(env, handle, ledger)
    assert fake_runtime.running(WORKERS[1])
    assert fake_runtime.calls()[-2:] == [f"start {WORKERS[1]}"] * 2


def test_stop_node_container_needs_a_runtime(
    env: KindEnv, cluster: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    env.k8s.runtime = "docker"
    with pytest.raises(ConfigError, match="no container runtime found.*docker, podman"):
        StopNodeContainer().plan(env, {"node": WORKER})


def test_stop_node_container_refuses_a_node_without_a_container(
    env: KindEnv, cluster: FakeCluster, fake_runtime: FakeRuntime
) -> None:
    cluster.add(node("gpu-node-9", gpus=2, labels={"inferchaos.io/pool": "gpu"}))
    with pytest.raises(ConfigError, match="'gpu-node-9' has no container"):
        StopNodeContainer().plan(env, {"node": "gpu-node-9"})
    assert not [c for c in fake_runtime.calls() if c.startswith("stop")]
