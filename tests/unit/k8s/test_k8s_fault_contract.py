"""The contract every Kubernetes fault keeps (faults/base.py, README "Architecture"):
plans refuse anything outside the allow-list, the ledger entry is written before the first
write to the cluster, and revert is idempotent and restores the cluster."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from inferchaos.errors import ConfigError, FaultError
from inferchaos.faults.ledger import Ledger
from inferchaos.faults.registry import fault_names, get_fault
from inferchaos.primitives.kube.allowlist import AllowList
from tests.fakes.apiserver import FakeCluster, RecordedRequest
from tests.fakes.k8s_doubles import KindEnv
from tests.fakes.k8s_objects import CONTROL_PLANE, FAULT_PARAMS, NS, WORKERS, node

ALL_FAULTS = sorted(FAULT_PARAMS)

REFUSED = [
    ("k8s.cordon_node", {"node": CONTROL_PLANE}, CONTROL_PLANE),
    ("k8s.cordon_node", {"node": "no-such-node"}, "no-such-node"),
    ("k8s.drain_node", {"node": WORKERS[0], "namespace": "kube-system"}, "kube-system"),
    ("k8s.drain_node", {"node": CONTROL_PLANE, "namespace": NS}, CONTROL_PLANE),
    ("k8s.delete_node", {"node": CONTROL_PLANE}, CONTROL_PLANE),
    ("k8s.stop_node_container", {"node": CONTROL_PLANE}, CONTROL_PLANE),
    (
        "k8s.kill_pods",
        {"namespace": "kube-system", "label_selector": "k8s-app=kube-dns", "count": 1},
        "kube-system",
    ),
    ("k8s.squat_gpu_ledger", {"namespace": "kube-system"}, "kube-system"),
    ("k8s.squat_gpu_ledger", {"namespace": NS, "nodes": [CONTROL_PLANE]}, CONTROL_PLANE),
    ("k8s.taint_gpu_nodes", {"label_selector": "kubernetes.io/os=linux"}, "gpu-outside"),
    (
        "k8s.force_anti_affinity_deadlock",
        {"namespace": "kube-system", "deployment": "coredns"},
        "kube-system",
    ),
]


def test_every_fault_is_covered_here() -> None:
    assert sorted(n for n in fault_names() if n.startswith("k8s.")) == ALL_FAULTS


@pytest.mark.parametrize(("fault", "params", "offender"), REFUSED, ids=[f"{f}-{o}" for f, _, o in REFUSED])
def test_plan_refuses_outside_the_allow_list(
    env: KindEnv, cluster: FakeCluster, ledger: Ledger, fault: str, params: dict, offender: str
) -> None:
    # A GPU node outside the allow-list's node selector, which a loose label selector also picks.
    cluster.add(node("gpu-outside", gpus=2))
    with pytest.raises(ConfigError) as refused:
        get_fault(fault).plan(env, params)
    message = str(refused.value)
    assert offender in message and "\n" not in message
    with pytest.raises(ConfigError):
        get_fault(fault).inject(env, params, ledger)
    assert cluster.mutating_requests() == []
    assert ledger.is_empty()


@pytest.mark.parametrize("fault", ALL_FAULTS)
def test_plan_refuses_a_kube_context_outside_the_allow_list(
    env: KindEnv, cluster: FakeCluster, ledger: Ledger, fault: str
) -> None:
    env.k8s.context = "prod-gpu-cluster"
    with pytest.raises(ConfigError, match="prod-gpu-cluster"):
        get_fault(fault).inject(env, FAULT_PARAMS[fault], ledger)
    assert cluster.mutating_requests() == []


@pytest.mark.parametrize(
    ("fault", "params"),
    [
        ("k8s.kill_pods", {"namespace": NS, "label_selector": "app=vllm", "count": 2}),
        ("k8s.kill_pods", {"namespace": NS, "label_selector": "app=vllm", "percent": 100}),
        ("k8s.squat_gpu_ledger", {"namespace": NS}),
        ("k8s.taint_gpu_nodes", {"label_selector": "inferchaos.io/pool=gpu"}),
    ],
)
def test_plan_refuses_more_targets_than_allowed(
    env: KindEnv, cluster: FakeCluster, fault: str, params: dict
) -> None:
    env.k8s.allow = dataclasses.replace(env.k8s.allow, max_targets=1)
    with pytest.raises(ConfigError, match="max_targets 1"):
        get_fault(fault).plan(env, params)
    assert cluster.mutating_requests() == []


def test_an_empty_allow_list_allows_nothing(env: KindEnv, cluster: FakeCluster) -> None:
    env.k8s.allow = AllowList(contexts=["kind-inferchaos"], namespaces=[], node_selector=None, max_targets=5)
    with pytest.raises(ConfigError, match="allowed: none"):
        get_fault("k8s.kill_pods").plan(env, FAULT_PARAMS["k8s.kill_pods"])


@pytest.mark.parametrize(
    ("params", "complaint"),
    [
        ({}, "missing required parameter"),
        ({"nodes": WORKERS[0]}, "unknown parameter"),
        ({"node": WORKERS[0], "force": True}, "unknown parameter"),
        ({"node": 3}, "must be str"),
    ],
)
def test_bad_parameters_are_refused_before_any_read(
    env: KindEnv, cluster: FakeCluster, params: dict, complaint: str
) -> None:
    with pytest.raises(ConfigError, match=complaint):
        get_fault("k8s.cordon_node").plan(env, params)
    assert cluster.requests == []


@pytest.mark.parametrize("fault", ALL_FAULTS)
def test_inject_writes_the_ledger_entry_before_the_first_write(
    env: KindEnv, cluster: FakeCluster, ledger: Ledger, fault: str, fake_runtime
) -> None:
    entries_at_first_write: list[int] = []

    def note(request: RecordedRequest) -> None:
        entries_at_first_write.append(len(ledger.entries()))

    cluster.observers.append(note)
    handle = get_fault(fault).inject(env, FAULT_PARAMS[fault], ledger)
    if fault == "k8s.stop_node_container":
        assert fake_runtime.calls()[-1].startswith("stop")  # acts through the runtime, not the API
    else:
        assert entries_at_first_write and entries_at_first_write[0] == 1
    (entry,) = ledger.entries()
    assert entry.id == handle.id and entry.injected_at is not None and entry.state == handle.state


@pytest.mark.parametrize("fault", ALL_FAULTS)
def test_inject_does_not_act_when_the_ledger_cannot_be_written(
    env: KindEnv, cluster: FakeCluster, unwritable_ledger: Ledger, fault: str, fake_runtime
) -> None:
    with pytest.raises(FaultError, match="ledger"):
        get_fault(fault).inject(env, FAULT_PARAMS[fault], unwritable_ledger)
    assert cluster.mutating_requests() == []
    assert not any(call.startswith("stop") for call in fake_runtime.calls())


def _without(snapshot: dict, keys: set[str]) -> dict:
    return {k: v for k, v in snapshot.items() if k not in keys}


@pytest.mark.parametrize("fault", ALL_FAULTS)
def test_revert_twice_restores_the_cluster(
    env: KindEnv, cluster: FakeCluster, ledger: Ledger, fault: str, fake_runtime
) -> None:
    implementation = get_fault(fault)
    before = cluster.snapshot()
    handle = implementation.inject(env, FAULT_PARAMS[fault], ledger)
    assert cluster.snapshot() != before or fault == "k8s.stop_node_container"

    implementation.revert(env, handle, ledger)
    implementation.revert(env, handle, ledger)

    assert ledger.is_empty()
    after = cluster.snapshot()
    if fault in ("k8s.drain_node", "k8s.kill_pods"):
        # Nothing recreates Pods in the fake: their controllers do that in a cluster.
        gone = {f"pods/{NS}/{p['name']}" for p in handle.state.get("evict", handle.state.get("pods", []))}
        assert gone and _without(before, gone) == after
    elif fault == "k8s.delete_node":
        key = f"nodes//{FAULT_PARAMS[fault]['node']}"
        for snapshot in (before, after):
            for server_set in ("uid", "creationTimestamp"):
                snapshot[key]["metadata"].pop(server_set)
        assert after == before
    else:
        assert after == before
    if fault == "k8s.stop_node_container":
        assert fake_runtime.running(WORKERS[1])


@pytest.mark.parametrize("fault", ALL_FAULTS)
def test_revert_works_from_the_ledger_alone(
    env: KindEnv, cluster: FakeCluster, tmp_path: Path, fault: str, fake_runtime
) -> None:
    """What `inferchaos cleanup` does after a crash: a new process, only the ledger folder."""
    before = cluster.snapshot()
    get_fault(fault).inject(env, FAULT_PARAMS[fault], Ledger(tmp_path / "ledger"))
    reopened = Ledger(tmp_path / "ledger")
    (handle,) = reopened.entries()
    get_fault(handle.fault).revert(env, handle, reopened)
    assert reopened.is_empty()
    if fault in (
        "k8s.cordon_node",
        "k8s.taint_gpu_nodes",
        "k8s.squat_gpu_ledger",
        "k8s.force_anti_affinity_deadlock",
    ):
        assert cluster.snapshot() == before
