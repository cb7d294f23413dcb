"""Blast-radius refusals of the Ray faults, and reverts driven from the ledger alone."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from inferchaos.environments.local.config import LocalEnvConfig
from inferchaos.environments.local.state import LocalEnvState
from inferchaos.errors import ConfigError
from inferchaos.faults.base import FaultHandle
from inferchaos.faults.ledger import Ledger
from inferchaos.faults.ray.actors import LeakActors
from inferchaos.faults.ray.kill_node import KillNode
from inferchaos.faults.ray.placement import StallPlacementGroup
from inferchaos.faults.registry import get_fault
from inferchaos.layers import Layer
from inferchaos.primitives.env_status import NodeStatus
from inferchaos.primitives.ray_nodes import NodePorts, RayNodeRecord
from inferchaos.primitives.replica_slots import ReplicaRecord

PORTS = NodePorts(0, 0, 0, 0, 0, 0, 0, 0)


def _node(name: str, pid: int, head: bool = False) -> RayNodeRecord:
    return RayNodeRecord(
        name=name, pid=pid, is_head=head, num_cpus=2, num_gpus=0 if head else 2, ports=PORTS, log_path=""
    )


def _replica(name: str, node_id: str, state: str = "healthy") -> ReplicaRecord:
    return ReplicaRecord(
        name,
        int(name[-1]),
        "http://127.0.0.1:1",
        "http://127.0.0.1:1/metrics",
        1,
        1,
        1,
        node_id,
        state,
        0.0,
        1.0,
        "",
    )


@dataclass
class FakeRayEnv:
    """The process records and Ray's node view of a 2-worker environment, without Ray."""

    name: str = "local"
    replica_states: tuple[str, str] = ("healthy", "healthy")
    added: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)

    def load_state(self) -> LocalEnvState:
        return LocalEnvState(
            env_id="e",
            created_at=0,
            config=LocalEnvConfig(),
            state_dir="/nonexistent",
            ray_temp_dir="/nonexistent",
            ray_address="",
            dashboard_url="",
            front_door_url="",
            model_dir="",
            served_model_name="tiny-llama",
            nodes=[
                _node("head", 10, head=True),
                _node("worker-1", 11),
                _node("worker-2", 12),
                *[_node(n, 13) for n in self.added],
            ],
        )

    def ray_nodes(self) -> list[NodeStatus]:
        nodes = [
            NodeStatus("h" * 56, True, True, 0, 1, "head"),
            NodeStatus("a" * 56, True, False, 2, 2, "worker-1"),
            NodeStatus("b" * 56, True, False, 2, 2, "worker-2"),
        ]
        nodes += [NodeStatus("c" * 56, True, False, 2, 2, name) for name in self.added]
        return nodes

    def replica_records(self) -> list[ReplicaRecord]:
        return [
            _replica("replica-0", "a" * 56, self.replica_states[0]),
            _replica("replica-1", "b" * 56, self.replica_states[1]),
        ]

    def connect_ray(self) -> None:
        raise AssertionError("a refusal must be decided before Ray is contacted")

    def add_worker(self) -> RayNodeRecord:
        self.added.append(f"worker-{3 + len(self.added)}")
        return _node(self.added[-1], 13)

    def mark_node_lost(self, name: str) -> None:
        self.lost.append(name)


def test_kill_node_plan_lists_exactly_the_node_its_processes_and_its_replica() -> None:
    plan = KillNode().plan(FakeRayEnv(), {"replica": "replica-1"})
    assert plan.targets == ["ray-node:worker-2:" + "b" * 56, "process-tree:12", "replica:replica-1"]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"node_id": "h" * 56}, "refusing the head node"),
        ({"node_id": "z" * 56}, "no ALIVE Ray node"),
        ({"replica": "replica-9"}, "no replica named"),
        ({"replica": 1, "max_nodes": 0}, "max_nodes 0"),
        ({"replica": 1, "blast": 1}, "unknown parameter"),
        ({"replica": 1, "wait_dead_s": "soon"}, "wait_dead_s"),
    ],
)
def test_kill_node_refuses(params: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        KillNode().plan(FakeRayEnv(), params)


def test_kill_node_refuses_a_total_outage_unless_allowed() -> None:
    env = FakeRayEnv(replica_states=("starting", "healthy"))
    with pytest.raises(ConfigError, match="no healthy replica; set allow_total_outage"):
        KillNode().plan(env, {"replica": 1})
    assert KillNode().plan(env, {"replica": 1, "allow_total_outage": True}).targets


def test_kill_node_revert_from_the_ledger_starts_one_replacement_however_often_it_runs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    env = FakeRayEnv()
    ledger = Ledger(tmp_path)
    # What a crashed runner of an older release left (the fault's old name): the node was
    # killed, nothing replaced it yet.
    handle = FaultHandle(
        fault="kill_node",
        layer=Layer.RAY,
        params={"replica": 1},
        env="local",
        state={"node_name": "worker-2", "node_id": "b" * 56, "pid": 12},
    )
    ledger.record(handle)
    (from_disk,) = Ledger(tmp_path).entries()
    with caplog.at_level(logging.WARNING, logger="inferchaos.faults.registry"):
        fault = get_fault(from_disk.fault)
    assert fault.name == "ray.kill_node"
    assert [r.getMessage() for r in caplog.records] == [
        "fault name 'kill_node' is deprecated: use 'ray.kill_node'"
    ]
    fault.revert(env, from_disk, ledger)
    fault.revert(env, from_disk, ledger)
    assert env.added == ["worker-3"]
    assert ledger.is_empty()


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"count": 20, "max_actors": 16}, "exceed max_actors 16"),
        ({"count": 2, "rate_per_s": 0}, "rate_per_s must be positive"),
        ({"count": 2, "num_gpus": 0, "num_cpus": 0}, "must hold some"),
        ({"count": 2, "colour": "red"}, "unknown parameter"),
    ],
)
def test_leak_actors_refuses(params: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        LeakActors().plan(FakeRayEnv(), params)


def test_stall_placement_group_refuses_an_unknown_mode_before_touching_ray() -> None:
    with pytest.raises(ConfigError, match="mode 'loose'"):
        StallPlacementGroup().plan(FakeRayEnv(), {"mode": "loose"})


@dataclass
class ClusterEnv:
    """An environment without the embedded environment's process records (as a KubeRay cluster)."""

    name: str = "cluster"


@pytest.mark.parametrize("fault", [KillNode, LeakActors, StallPlacementGroup])
def test_ray_faults_refuse_other_environments(fault: type) -> None:
    with pytest.raises(ConfigError, match="local environment only.*not on 'cluster'"):
        fault().plan(ClusterEnv(), {})
