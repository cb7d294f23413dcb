"""Test-only worker network hosts on real namespaces, for the tests of the network primitives.

Everything is named after a fresh test-only id, and the host's `ip -j` listings must be the
same once the hosts are gone.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from inferchaos.primitives.link_delay import missing_tools as missing_link_tools
from inferchaos.primitives.netns import (
    NetnsPlan,
    colliding_route,
    host_names,
    missing_tools,
    parse_routes,
    parse_subnet,
    run_commands,
)
from tests.skips import host_lacks, require


def netns_unavailable(subnet: str, *, degraded_links: bool = False) -> str | None:
    """Why namespaces on ``subnet`` cannot be made here (``degraded_links``: with NFQUEUE
    delayers too), or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if missing := sorted({*missing_tools(), *(missing_link_tools() if degraded_links else ())}):
        return f"install {', '.join(missing)}"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"`ip netns` does not work here: {probe.stderr.strip()}"
    routes = subprocess.run(
        ["ip", "-j", "-4", "route", "show", "table", "all"], capture_output=True, text=True
    )
    collision = colliding_route(parse_subnet(subnet), parse_routes(routes.stdout))
    return (
        None
        if collision is None
        else f"the test subnet {subnet} overlaps the host route {collision[0]} on {collision[1]}"
    )


def skip_unless_netns_can_be_made(subnet: str, *, degraded_links: bool = False) -> None:
    """Skip the running test where namespaces on ``subnet`` cannot be made: naming the packages CI
    installs where they are missing (tests/skips.py), else as what this host lacks."""
    missing = tuple(sorted({*missing_tools(), *(missing_link_tools() if degraded_links else ())}))
    require(missing, not missing, f"what the namespaces need ({', '.join(missing)})")
    if (why := netns_unavailable(subnet, degraded_links=degraded_links)) is not None:
        host_lacks(why)


@contextmanager
def worker_hosts(subnet: str, *, workers: int = 2, degraded_links: bool = False) -> Iterator[NetnsPlan]:
    """``workers`` namespaces off a bridge on ``subnet``, made for the test and removed after it
    (skips, saying why, where they cannot be made); asserts that nothing of them is left."""
    skip_unless_netns_can_be_made(subnet, degraded_links=degraded_links)
    before = set(host_names())
    made = NetnsPlan(f"t{uuid.uuid4().hex[:10]}", parse_subnet(subnet), workers=workers)
    try:
        run_commands(made.up_commands())
        yield made
    finally:
        run_commands(made.down_commands(), tolerate_gone=True)
        assert set(host_names()) == before, "every namespace and link the plan made is gone"
