"""The builders of the network hosts each local worker gets, and the host-route collision check."""

from __future__ import annotations

import ipaddress
import json

import pytest

from inferchaos.errors import ConfigError
from inferchaos.primitives.netns import (
    IFNAME_MAX,
    Direction,
    NetnsPlan,
    colliding_route,
    parse_routes,
    parse_subnet,
    partition_commands,
    partition_ruleset,
)

# `ip -j -4 route show table all` of a host with Docker's bridge and a VPN route.
ROUTES = json.dumps(
    [
        {"dst": "default", "gateway": "192.168.1.1", "dev": "eth0"},
        {"dst": "172.17.0.0/16", "dev": "docker0"},
        {"dst": "10.213.0.128/25", "dev": "tun0"},
        {"dst": "192.168.1.0/24", "dev": "eth0"},
        {"dst": "127.0.0.0/8", "dev": "lo", "table": "local"},
    ]
)


def test_a_subnet_that_overlaps_a_host_route_is_found_and_the_default_route_is_not() -> None:
    routes = parse_routes(ROUTES)
    assert (ipaddress.IPv4Network("0.0.0.0/0"), "eth0") not in routes
    # Overlapping part of a route, containing one, inside one: all collide.
    assert colliding_route(parse_subnet("10.213.0.0/24"), routes) == (
        ipaddress.IPv4Network("10.213.0.128/25"),
        "tun0",
    )
    assert colliding_route(parse_subnet("172.17.5.0/24"), routes) == (
        ipaddress.IPv4Network("172.17.0.0/16"),
        "docker0",
    )
    assert colliding_route(parse_subnet("10.0.0.0/8"), routes) is not None
    assert colliding_route(parse_subnet("10.214.0.0/24"), routes) is None
    # The environment's own bridge, left by a crash, is no collision with itself.
    assert colliding_route(parse_subnet("10.213.0.0/24"), routes, own_bridge="tun0") is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("10.213.0.0/33", "is not an IPv4 subnet"),
        ("10.213.0.1/24", "has host bits set"),
        ("fd00::/64", "is not an IPv4 subnet"),
        ("10.213.0.0/30", "too few addresses"),
    ],
)
def test_a_bad_subnet_is_one_line_naming_the_flag(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_subnet(text)
    assert str(error.value).startswith("--subnet:") and message in str(error.value)
    assert "\n" not in str(error.value)


def test_a_plan_names_fit_linux_and_addresses_follow_the_bridge() -> None:
    plan = NetnsPlan("0123456789abcdef", parse_subnet("10.213.0.0/24"), workers=3)
    names = [plan.bridge, *(plan.host_veth(w) for w in range(3))]
    assert all(len(n) <= IFNAME_MAX for n in names) and len(set(names)) == 4
    assert str(plan.head_address) == "10.213.0.1"
    assert [str(plan.address(w)) for w in range(3)] == ["10.213.0.2", "10.213.0.3", "10.213.0.4"]
    assert all(plan.owns(n) for n in [*names, plan.namespace(2)])
    assert not plan.owns("eth0") and not plan.owns("inferchaos-other-w0")
    up = plan.up_commands()
    # Every worker's route out goes through the bridge, where the head is.
    assert ["ip", "-n", plan.namespace(1), "route", "add", "default", "via", "10.213.0.1"] in up
    # Down removes what up made, the bridge after every link on it.
    down = plan.down_commands()
    assert down[-1] == ["ip", "link", "delete", plan.bridge]
    assert {c[-1] for c in down} == {plan.bridge, *names[1:], *(plan.namespace(w) for w in range(3))}


def test_a_subnet_too_small_for_its_workers_is_refused() -> None:
    with pytest.raises(ConfigError, match="no room for 7 worker"):
        NetnsPlan("abc", parse_subnet("10.213.0.0/29"), workers=7)


@pytest.mark.parametrize(
    ("direction", "chains"),
    [(Direction.BOTH, {"input", "output"}), (Direction.IN, {"input"}), (Direction.OUT, {"output"})],
)
def test_a_partition_drops_only_the_heads_traffic_in_its_direction(
    direction: Direction, chains: set[str]
) -> None:
    head = ipaddress.IPv4Address("10.213.0.1")
    ruleset = partition_ruleset("a1-b2", head, direction)
    assert ruleset.startswith("table ip inferchaos_a1_b2 {")
    assert {c for c in ("input", "output") if f"chain {c} " in ruleset} == chains
    assert ("ip saddr 10.213.0.1 drop" in ruleset) is ("input" in chains)
    assert ("ip daddr 10.213.0.1 drop" in ruleset) is ("output" in chains)
    apply, revert = partition_commands("inferchaos-x-w0", "a1-b2")
    assert apply[:4] == ["ip", "netns", "exec", "inferchaos-x-w0"] and revert[-1] == "inferchaos_a1_b2"
