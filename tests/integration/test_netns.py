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
from collections.abc import Iterator
from pathlib import Path

import pytest
from netns_hosts import skip_unless_netns_can_be_made, worker_hosts

from inferchaos.primitives.netns import (
    Direction,
    NetnsPlan,
    host_names,
    in_namespace_argv,
    parse_routes,
    partition_commands,
    partition_ruleset,
    run_commands,
)
from tests.skips import host_lacks

pytestmark = pytest.mark.integration

SUBNET = "10.213.250.0/29"
PORT = 39_917


@pytest.fixture
def plan() -> Iterator[NetnsPlan]:
    with worker_hosts(SUBNET) as made:
        yield made


def _in_namespace(namespace: str, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ip", "netns", "exec", namespace, sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=20,
    )


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
    child = subprocess.Popen(
        ["ip", "netns", "exec", plan.namespace(worker), sys.executable, "-c", listen],
        stdout=subprocess.PIPE,
        text=True,
    )
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
    skip_unless_netns_can_be_made(SUBNET)
    routes = parse_routes(
        subprocess.run(
            ["ip", "-j", "-4", "route", "show", "table", "all"], capture_output=True, text=True
        ).stdout
    )
    taken = next((network for network, dev in routes if network.prefixlen <= 29 and dev != "lo"), None)
    if taken is None:
        host_lacks("the host has no route of its own to collide with")
    before = sorted(host_names())
    home = tmp_path / "home"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "inferchaos.cli.main",
            "env",
            "up",
            "--network",
            "netns",
            "--subnet",
            str(taken),
            "--front-door-port",
            "18397",
        ],
        env={**os.environ, "INFERCHAOS_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr[-2000:]
    assert len(lines) == 1 and f"--subnet {taken} overlaps the host route" in lines[0], result.stderr
    assert sorted(host_names()) == before
    assert not (home / "env" / "local" / "state.json").exists(), "nothing may be recorded"


def test_a_process_started_in_a_workers_namespace_has_its_address_and_still_sees_the_cgroup_tree(
    plan: NetnsPlan,
) -> None:
    """Replicas start inside the namespace and need the host's cgroups (memory budgets, CPU quotas)."""
    code = "import os; print(sorted(os.listdir('/sys/fs/cgroup')))"
    listed = subprocess.run(
        in_namespace_argv(plan.namespace(0), [sys.executable, "-c", code]),
        capture_output=True,
        text=True,
        timeout=20,
        check=True,
    )
    assert listed.stdout.splitlines()[0] == str(sorted(os.listdir("/sys/fs/cgroup")))
    addresses = subprocess.run(
        in_namespace_argv(plan.namespace(0), ["ip", "-4", "-br", "addr"]),
        capture_output=True,
        text=True,
        timeout=20,
        check=True,
    )
    assert str(plan.address(0)) in addresses.stdout
