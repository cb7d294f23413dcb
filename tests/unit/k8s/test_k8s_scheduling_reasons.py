"""Why Pods are Pending: the FailedScheduling parser and pending_pod_reasons."""

from __future__ import annotations

import pytest
from kubernetes.client import ApiClient

from inferchaos.primitives.kube.scheduling import (
    PendingPodReasons,
    ReasonKind,
    parse_failed_scheduling,
    pending_pod_reasons,
)
from tests.fakes.apiserver import FakeCluster
from tests.fakes.k8s_objects import NS, failed_scheduling, pending_pod, pod

GPU_SHORT = (
    "0/4 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, "
    "3 Insufficient nvidia.com/gpu. preemption: 0/4 nodes are available: 1 Preemption is not helpful for "
    "scheduling, 3 No preemption victims found for incoming pod."
)


def test_parses_a_gpu_shortage_and_drops_the_preemption_part() -> None:
    failure = parse_failed_scheduling(GPU_SHORT)
    assert failure is not None
    assert (failure.nodes_available, failure.nodes_total) == (0, 4)
    assert {r.text: r.nodes for r in failure.reasons} == {
        "node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }": 1,
        "Insufficient nvidia.com/gpu": 3,
    }
    reasons = PendingPodReasons.from_message(NS, "vllm-0", GPU_SHORT)
    assert reasons.blocked_by(ReasonKind.INSUFFICIENT_RESOURCE, "nvidia.com/gpu") == 3
    assert reasons.blocked_by(ReasonKind.INSUFFICIENT_RESOURCE, "cpu") == 0
    assert reasons.blocked_by(ReasonKind.UNTOLERATED_TAINT, "node-role.kubernetes.io/control-plane") == 1


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (
            "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules. preemption: 0/3 nodes are "
            "available: 3 No preemption victims found for incoming pod..",
            {ReasonKind.POD_ANTI_AFFINITY: 3},
        ),
        (
            "0/5 nodes are available: 2 Insufficient cpu, 3 node(s) had taint {nvidia.com/gpu: present}, that the "
            "pod didn't tolerate.",
            {ReasonKind.INSUFFICIENT_RESOURCE: 2, ReasonKind.UNTOLERATED_TAINT: 3},
        ),
        (
            "0/3 nodes are available: 1 node(s) were unschedulable, 2 Insufficient memory.",
            {ReasonKind.UNSCHEDULABLE_NODE: 1, ReasonKind.INSUFFICIENT_RESOURCE: 2},
        ),
        (
            "0/4 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/unschedulable: }, "
            "3 Insufficient nvidia.com/gpu.",
            {ReasonKind.UNSCHEDULABLE_NODE: 1, ReasonKind.INSUFFICIENT_RESOURCE: 3},
        ),
        (
            "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/3 nodes are "
            "available: 3 Preemption is not helpful for scheduling.",
            {ReasonKind.VOLUME: 3},
        ),
        (
            "0/6 nodes are available: 2 node(s) didn't match Pod's node affinity/selector, 1 node(s) didn't satisfy "
            "existing pods anti-affinity rules, 3 Too many pods.",
            {
                ReasonKind.NODE_AFFINITY: 2,
                ReasonKind.POD_ANTI_AFFINITY: 1,
                ReasonKind.INSUFFICIENT_RESOURCE: 3,
            },
        ),
        (
            "0/4 nodes are available: 4 node(s) didn't match pod topology spread constraints.",
            {ReasonKind.TOPOLOGY_SPREAD: 4},
        ),
        (
            "0/2 nodes are available: 2 node(s) didn't have free ports for the requested pod ports.",
            {ReasonKind.OTHER: 2},
        ),
    ],
)
def test_classifies_each_reason(message: str, expected: dict[ReasonKind, int]) -> None:
    assert PendingPodReasons.from_message(NS, "p", message).kinds == expected


@pytest.mark.parametrize(
    "message", ["Back-off restarting failed container", "no nodes available to schedule pods", ""]
)
def test_other_messages_are_not_scheduling_failures(message: str) -> None:
    assert parse_failed_scheduling(message) is None
    assert PendingPodReasons.from_message(NS, "p", message).reasons == {}


def test_pending_pod_reasons_takes_the_latest_event_of_that_very_pod(
    api_client: ApiClient, cluster: FakeCluster
) -> None:
    stale = "0/4 nodes are available: 4 Insufficient cpu."
    waiting = cluster.add(pending_pod("vllm-new", stale))
    cluster.add(failed_scheduling(waiting, stale, seen="2025-11-29T10:00:00Z", legacy=True, suffix="a"))
    cluster.add(failed_scheduling(waiting, GPU_SHORT, seen="2025-11-29T10:05:00Z", suffix="b"))
    earlier_pod = pod("vllm-new", phase="Pending")  # an earlier Pod of the same name
    earlier_pod["metadata"].update(uid="0d4c6a9e-0000-4000-8000-000000000001", resourceVersion="7")
    cluster.add(
        failed_scheduling(
            earlier_pod,
            "0/4 nodes are available: 4 node(s) didn't match pod anti-affinity rules.",
            seen="2025-11-29T10:09:00Z",
            suffix="c",
        )
    )
    cluster.add(pending_pod("vllm-condition-only", "0/4 nodes are available: 4 node(s) were unschedulable."))
    cluster.add(pod("vllm-pulling", node_name="inferchaos-worker", phase="Pending", labels={"app": "vllm"}))

    found = {p.pod: p for p in pending_pod_reasons(api_client, NS)}
    assert sorted(found) == ["vllm-condition-only", "vllm-new"]  # a bound Pod waits for its image, not a node
    assert found["vllm-new"].message == GPU_SHORT
    assert found["vllm-new"].reasons["Insufficient nvidia.com/gpu"] == 3
    assert found["vllm-condition-only"].kinds == {ReasonKind.UNSCHEDULABLE_NODE: 4}
    assert found["vllm-new"].describe() == f"{NS}/vllm-new Pending: {GPU_SHORT}"


def test_pending_pod_reasons_narrows_by_label_selector(api_client: ApiClient, cluster: FakeCluster) -> None:
    cluster.add(pending_pod("router-1", GPU_SHORT, labels={"app": "router"}))
    cluster.add(pending_pod("vllm-1", GPU_SHORT, labels={"app": "vllm"}))
    assert [p.pod for p in pending_pod_reasons(api_client, NS, "app=router")] == ["router-1"]
