"""kill_pods against the fake cluster."""

from __future__ import annotations

import pytest

from inferchaos.errors import ConfigError
from inferchaos.faults.k8s.pod import KillPods
from inferchaos.faults.ledger import Ledger
from tests.fakes.apiserver import FakeCluster
from tests.fakes.k8s_doubles import KindEnv
from tests.fakes.k8s_objects import NS, VLLM_RS, pod, vllm_pods

VLLM = {"namespace": NS, "label_selector": "app=vllm"}


def test_kill_pods_deletes_the_planned_count(env: KindEnv, cluster: FakeCluster, ledger: Ledger) -> None:
    fault = KillPods()
    before = vllm_pods(cluster)
    planned = fault.plan(env, {**VLLM, "count": 2, "seed": 3}).targets
    handle = fault.inject(env, {**VLLM, "count": 2, "seed": 3}, ledger)

    survivors = vllm_pods(cluster)
    assert len(survivors) == len(before) - 2
    assert {f"pod/{NS}/{p}" for p in set(before) - set(survivors)} == set(planned)
    deletes = [r for r in cluster.requests if r.method == "DELETE"]
    assert all(r.body["gracePeriodSeconds"] == 0 and r.body["preconditions"]["uid"] for r in deletes)
    evidence = fault.evidence(env, handle)
    assert evidence.bit and sorted(evidence.symptoms["killed"]) == sorted(set(before) - set(survivors))


def test_kill_pods_by_percent_rounds_up(env: KindEnv, cluster: FakeCluster) -> None:
    assert len(KillPods().plan(env, {**VLLM, "percent": 50}).targets) == 2  # 50 % of 3
    assert len(KillPods().plan(env, {**VLLM, "percent": 1}).targets) == 1


def test_kill_pods_choice_is_reproducible_with_a_seed(env: KindEnv, cluster: FakeCluster) -> None:
    choices = {tuple(KillPods().plan(env, {**VLLM, "count": 1, "seed": s}).targets) for s in range(20)}
    assert len(choices) > 1  # the seed does choose
    assert KillPods().plan(env, {**VLLM, "count": 1, "seed": 5}) == KillPods().plan(
        env, {**VLLM, "count": 1, "seed": 5}
    )


def test_kill_pods_skips_terminating_pods_and_refuses_too_many(env: KindEnv, cluster: FakeCluster) -> None:
    terminating = vllm_pods(cluster)[0]
    cluster.update(
        "pods",
        terminating,
        NS,
        metadata={"deletionTimestamp": "2025-11-29T10:05:00Z", "deletionGracePeriodSeconds": 30},
    )
    targets = KillPods().plan(env, {**VLLM, "percent": 100}).targets
    assert f"pod/{NS}/{terminating}" not in targets and len(targets) == 2
    with pytest.raises(ConfigError, match="asked for 3 Pod.*but 2 match"):
        KillPods().plan(env, {**VLLM, "count": 3})


@pytest.mark.parametrize(
    "params",
    [
        {**VLLM, "count": 1, "percent": 10},
        {**VLLM},
        {**VLLM, "percent": 0},
        {"namespace": NS, "label_selector": "", "count": 1},
    ],
)
def test_kill_pods_refuses_ambiguous_amounts_and_empty_selectors(
    env: KindEnv, cluster: FakeCluster, params: dict
) -> None:
    with pytest.raises(ConfigError, match="kill_pods"):
        KillPods().plan(env, params)


def test_evidence_sees_a_same_named_replacement_as_killed(
    env: KindEnv, cluster: FakeCluster, ledger: Ledger
) -> None:
    fault = KillPods()
    handle = fault.inject(env, {**VLLM, "count": 1}, ledger)
    (victim,) = handle.state["pods"]
    # A StatefulSet recreates its Pod under the same name, with a new uid.
    cluster.add(
        pod(
            victim["name"],
            node_name=victim["node"],
            gpus=1,
            labels={"app": "vllm"},
            owner=("ReplicaSet", VLLM_RS),
        )
    )
    evidence = fault.evidence(env, handle)
    assert evidence.bit and evidence.symptoms["replaced_by_same_name"] == [victim["name"]]


def test_evidence_says_not_bit_while_the_pod_still_runs(
    env: KindEnv, cluster: FakeCluster, ledger: Ledger
) -> None:
    fault = KillPods()
    handle = fault.inject(env, {**VLLM, "count": 1}, ledger)
    (victim,) = handle.state["pods"]
    survivor = pod(victim["name"], node_name=victim["node"], gpus=1, labels={"app": "vllm"})
    survivor["metadata"]["uid"] = victim["uid"]
    cluster.add(survivor)  # as if the delete had never landed
    evidence = fault.evidence(env, handle)
    assert not evidence.bit and evidence.symptoms["still_running"] == [victim["name"]]
