"""The Chaos Toolkit actions: configuration in, fault injected, rollback from the ledger."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest

from inferchaos.ctk import k8s_actions as actions
from inferchaos.errors import ConfigError
from inferchaos.faults.ledger import Ledger
from inferchaos.faults.registry import fault_names
from tests.fakes.apiserver import FakeApiServer, FakeCluster
from tests.fakes.k8s_objects import GPU_POOL, NS, WORKERS


@pytest.fixture
def configuration(fake_server: FakeApiServer, cluster: FakeCluster, tmp_path: Path) -> dict[str, Any]:
    return {
        "inferchaos_env": "kind",
        "inferchaos_ledger": str(tmp_path / "ledger"),
        "kube_context": "kind-inferchaos",
        "kube_api_url": fake_server.url,
        "k8s_allow": {
            "contexts": ["kind-inferchaos"],
            "namespaces": [NS],
            "node_selector": GPU_POOL,
            "max_targets": 2,
        },
    }


def test_every_fault_has_an_action_and_a_rollback() -> None:
    for fault in (n for n in fault_names() if n.startswith("k8s.")):
        verb = fault.removeprefix("k8s.")
        for function in (getattr(actions, verb), getattr(actions, f"rollback_{verb}")):
            parameters = inspect.signature(function).parameters
            assert parameters["configuration"].default is None and parameters["secrets"].default is None


def test_cordon_then_rollback(configuration: dict[str, Any], cluster: FakeCluster, tmp_path: Path) -> None:
    handle = actions.cordon_node(WORKERS[0], configuration=configuration)
    assert handle["fault"] == "k8s.cordon_node" and handle["env"] == "kind"
    assert cluster.get("nodes", WORKERS[0])["spec"]["unschedulable"] is True
    assert [h.id for h in Ledger(tmp_path / "ledger").entries()] == [handle["id"]]

    assert actions.rollback_cordon_node(WORKERS[1], configuration=configuration) == []  # not that node
    assert actions.rollback_cordon_node(WORKERS[0], configuration=configuration) == [handle["id"]]
    assert "unschedulable" not in cluster.get("nodes", WORKERS[0])["spec"]
    assert actions.rollback_cordon_node(WORKERS[0], configuration=configuration) == []


def test_anti_affinity_action_round_trip(configuration: dict[str, Any], cluster: FakeCluster) -> None:
    before = cluster.get("deployments", "vllm", NS)["spec"]
    actions.force_anti_affinity_deadlock(NS, "vllm", configuration=configuration)
    assert cluster.get("deployments", "vllm", NS)["spec"]["replicas"] == 5
    assert len(actions.rollback_force_anti_affinity_deadlock(NS, "vllm", configuration=configuration)) == 1
    assert cluster.get("deployments", "vllm", NS)["spec"] == before


def test_actions_refuse_outside_the_allow_list(configuration: dict[str, Any], cluster: FakeCluster) -> None:
    with pytest.raises(ConfigError, match="namespace 'kube-system' is outside the allow-list"):
        actions.kill_pods("kube-system", "k8s-app=kube-dns", count=1, configuration=configuration)
    assert cluster.mutating_requests() == []


@pytest.mark.parametrize(
    ("drop", "complaint"), [("kube_context", "kube_context"), ("k8s_allow", "k8s_allow block")]
)
def test_actions_need_a_context_and_an_allow_list(
    configuration: dict[str, Any], cluster: FakeCluster, drop: str, complaint: str
) -> None:
    del configuration[drop]
    with pytest.raises(ConfigError, match=complaint):
        actions.cordon_node(WORKERS[0], configuration=configuration)
    assert cluster.requests == []
