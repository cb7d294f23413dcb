"""network.partition_node refuses bad input before it reads anything, and the local
environment's choice of network is made (or refused) before anything starts."""

from __future__ import annotations

import asyncio
import socket

import pytest

from inferchaos.environments.local.network import (
    LOOPBACK,
    NETNS,
    NetworkRecord,
    choose_network,
    node_network,
    plan_of,
)
from inferchaos.errors import ConfigError
from inferchaos.faults.network.degrade import DegradeLink
from inferchaos.faults.network.partition import PartitionNode
from inferchaos.primitives.netns import NetnsPlan, handshake_rtt, parse_subnet
from inferchaos.steady_state.network_probe import NetworkProbe, NodeLink


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (
            {"direction": "sideways"},
            "network.partition_node: direction: must be one of both, in, out; got 'sideways'",
        ),
        (
            {"node": "worker-1", "replica": 0},
            "network.partition_node: node: name the node or the replica it hosts, not both",
        ),
        ({"settle_s": -1}, "network.partition_node: settle_s: must be more than 0 seconds, got -1"),
        (
            {"duration": 3},
            "network.partition_node: unknown parameter(s) duration; known: node, replica, direction, settle_s, allow_total_outage",
        ),
    ],
)
def test_bad_parameters_are_one_line_and_exit_2(params: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        PartitionNode().parse(params)
    assert str(raised.value) == message
    assert raised.value.exit_code == 2


def test_it_refuses_an_environment_without_worker_namespaces() -> None:
    class Elsewhere:
        name = "cluster"

    with pytest.raises(
        ConfigError, match="network.partition_node acts on the embedded local environment only"
    ):
        PartitionNode().plan(Elsewhere(), {})


def test_loopback_asked_for_is_chosen_without_touching_the_host() -> None:
    record = choose_network(LOOPBACK, "", 0, "abc")
    assert record.mode == LOOPBACK and "--network loopback" in record.reason
    assert plan_of("abc", record) is None
    assert node_network("abc", record, 1, is_head=False).node_ip == "127.0.0.2"


def test_an_unknown_network_mode_is_one_line() -> None:
    with pytest.raises(ConfigError, match=r"^--network must be one of auto, netns, loopback, got 'bridge'$"):
        choose_network("bridge", "", 0, "abc")


def test_each_node_gets_its_place_on_the_subnet() -> None:
    record = NetworkRecord(NETNS, subnet="10.213.7.0/24")
    head = node_network("0123456789ab", record, 0, is_head=True)
    # The head stays in the host's namespace, on the bridge's address; its services on loopback.
    assert (head.node_ip, head.service_host, head.namespace) == ("10.213.7.1", "127.0.0.1", "")
    worker = node_network("0123456789ab", record, 2, is_head=False)
    assert worker.node_ip == worker.service_host == "10.213.7.4"
    assert worker.namespace == "inferchaos-0123456789ab-w2"


def test_a_worker_can_be_added_and_removed_on_its_own() -> None:
    plan = NetnsPlan("0123456789ab", parse_subnet("10.213.7.0/24"), workers=4)
    up = plan.worker_up_commands(3)
    assert up[0] == ["ip", "netns", "add", plan.namespace(3)]
    assert ["ip", "link", "set", plan.host_veth(3), "master", plan.bridge] in up
    assert plan.worker_down_commands(3) == [
        ["ip", "link", "delete", plan.host_veth(3)],
        ["ip", "netns", "delete", plan.namespace(3)],
    ]
    assert plan.up_commands()[:3] == plan.bridge_up_commands()
    assert plan.down_commands()[-1] == ["ip", "link", "delete", plan.bridge]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_reset_is_an_answer_and_proves_the_link() -> None:
    rtt = handshake_rtt("127.0.0.1", _closed_port())
    assert rtt is not None and 0 <= rtt < 0.5


def test_the_probe_reports_each_link_by_node() -> None:
    samples = asyncio.run(NetworkProbe([NodeLink("worker-1", "127.0.0.1")]).read())
    by_probe = {s.probe: s for s in samples}
    assert by_probe["network.node_reachable"].value == 1.0
    assert by_probe["network.node_reachable"].labels == {"node": "worker-1"}
    assert by_probe["network.handshake_rtt_s"].value >= 0


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"delay_ms": -5}, "network.degrade_link: delay_ms: must be at least 0, got -5"),
        ({"loss_pct": 101}, "network.degrade_link: loss_pct: must be at most 100, got 101"),
        ({"loss_pct": -1}, "network.degrade_link: loss_pct: must be at least 0, got -1"),
        ({"rate_kbit": 0}, "network.degrade_link: rate_kbit: must be more than 0, got 0"),
        (
            {},
            "network.degrade_link: delay_ms: nothing to degrade: set delay_ms, jitter_ms, loss_pct or rate_kbit",
        ),
        ({"delay_ms": 2000}, "network.degrade_link: delay_ms: delay_ms + jitter_ms must be at most 1500"),
    ],
)
def test_a_bad_degradation_is_one_line_and_exit_2(params: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        DegradeLink().parse(params)
    assert str(raised.value) == message
    assert raised.value.exit_code == 2
