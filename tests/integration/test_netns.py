"""Worker network hosts on real kernel links: namespaces off a bridge, and partitions that cut them.

Runs as root with iproute2 and nftables (`.ci/run` installs nftables where it is missing) and
skips, saying why, elsewhere. Everything it makes is named after a test-only environment id
and is compared against the host's `ip -j` listings before and after.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from inferchaos.primitives.netns import (
    Direction,
    NetnsPlan,
    colliding_route,
    host_names,
    missing_tools,
    parse_routes,
    parse_subnet,
    partition_commands,
    partition_ruleset,
    run_commands,
)

pytestmark = pytest.mark.integration

SUBNET = "10.213.250.0/29"
PORT = 39_917


def _unavailable() -> str | None:
    if os.geteuid() != 0:
        return "network namespaces need root"
    if missing := missing_tools():
        return f"install {', '.join(missing)}"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"`ip netns` does not work here: {probe.stderr.strip()}"
    routes = subprocess.run(
        ["ip", "-j", "-4", "route", "show", "table", "all"], capture_output=True, text=True
    )
    collision = colliding_route(parse_subnet(SUBNET), parse_routes(routes.stdout))
    return (
        None
        if collision is None
        else f"the test subnet {SUBNET} overlaps the host route {collision[0]} on {collision[1]}"
    )


@pytest.fixture
def plan() -> Iterator[NetnsPlan]:
    if (why := _unavailable()) is not None:
        pytest.skip(why)
    before = set(host_names())
    made = NetnsPlan(f"t{uuid.uuid4().hex[:10]}", parse_subnet(SUBNET), workers=2)
    try:
        run_commands(made.up_commands())
        yield made
    finally:
        run_commands(made.down_commands(), tolerate_gone=True)
        assert set(host_names()) == before, "every namespace and link the plan made is gone"


def _in_namespace(namespace: str, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", "netns", "exec", namespace, sys.executable, "-c", code],
                          capture_output=True, text=True, timeout=20)  # fmt: skip


def _tcp_connects(plan: NetnsPlan, worker: int) -> bool:
    code = f"import socket; socket.create_connection(('{plan.head_address}', {PORT}), timeout=1)"
    return _in_namespace(plan.namespace(worker), code).returncode == 0


def _udp_to_head_arrives(plan: NetnsPlan, worker: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as head:
        head.bind((str(plan.head_address), PORT))
        head.settimeout(1.0)
        sent = f"import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('{plan.head_address}', {PORT}))"
        _in_namespace(plan.namespace(worker), sent)
        try:
            return head.recv(8) == b"x"
        except TimeoutError:
            return False


def _udp_from_head_arrives(plan: NetnsPlan, worker: int) -> bool:
    address = plan.address(worker)
    listen = (
        "import socket, sys; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
        f"s.bind(('{address}', {PORT})); s.settimeout(3); print('ready', flush=True); "
        "sys.exit(0 if s.recv(8) == b'x' else 1)"
    )
    child = subprocess.Popen(["ip", "netns", "exec", plan.namespace(worker), sys.executable, "-c", listen],
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as head:
            head.sendto(b"x", (str(address), PORT))
        return child.wait(timeout=10) == 0
    finally:
        child.kill()
        child.wait()


@pytest.mark.parametrize(
    ("direction", "to_head", "from_head"),
    [(Direction.BOTH, False, False), (Direction.IN, True, False), (Direction.OUT, False, True)],
)
def test_a_partition_cuts_the_worker_off_the_head_in_its_direction_and_its_revert_restores_the_link(
    plan: NetnsPlan, direction: Direction, to_head: bool, from_head: bool
) -> None:
    with socket.create_server((str(plan.head_address), PORT)) as head:
        head.settimeout(0.1)
        assert _tcp_connects(plan, 0) and _tcp_connects(plan, 1)
        apply, revert = partition_commands(plan.namespace(0), "test-cut")
        run_commands([apply], stdin=partition_ruleset("test-cut", plan.head_address, direction))
        try:
            # What a user sees: the worker can no longer open a connection to the head.
            assert not _tcp_connects(plan, 0)
            assert _tcp_connects(plan, 1), "only the partitioned worker is cut off"
        finally:
            run_commands([revert])
        assert _tcp_connects(plan, 0)
        # A second revert finds nothing: gone already is not an error for a cleanup.
        run_commands([revert], tolerate_gone=True)
    # One way only, where asked: datagrams show which direction was cut.
    run_commands([apply], stdin=partition_ruleset("test-cut", plan.head_address, direction))
    try:
        assert (_udp_to_head_arrives(plan, 0), _udp_from_head_arrives(plan, 0)) == (to_head, from_head)
    finally:
        run_commands([revert])
    assert _udp_to_head_arrives(plan, 0) and _udp_from_head_arrives(plan, 0)


def test_env_up_on_a_subnet_that_overlaps_a_host_route_exits_2_before_anything_starts(tmp_path: Path) -> None:
    if (why := _unavailable()) is not None:
        pytest.skip(why)
    routes = parse_routes(
        subprocess.run(
            ["ip", "-j", "-4", "route", "show", "table", "all"], capture_output=True, text=True
        ).stdout
    )
    taken = next((network for network, dev in routes if network.prefixlen <= 29 and dev != "lo"), None)
    if taken is None:
        pytest.skip("the host has no route of its own to collide with")
    before = sorted(host_names())
    home = tmp_path / "home"
    result = subprocess.run(
        [sys.executable, "-m", "inferchaos.experiments.cli", "env", "up", "--network", "netns",
         "--subnet", str(taken), "--front-door-port", "18397"],
        env={**os.environ, "INFERCHAOS_HOME": str(home)}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr[-2000:]
    assert len(lines) == 1 and f"--subnet {taken} overlaps the host route" in lines[0], result.stderr
    assert sorted(host_names()) == before
    assert not (home / "env" / "local" / "state.json").exists(), "nothing may be recorded"
