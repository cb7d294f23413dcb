"""Network hosts of their own for local Ray workers: namespaces, veth pairs, a bridge, and cuts.

Every local Ray node shares loopback, so there is no link between them to cut. A network
namespace per worker, joined to the host by a veth pair whose host end hangs off one bridge,
makes each worker a host with its own address and a real kernel link to the head (which stays
in the host's namespace, on the bridge's address). The builders here return argv lists; the
caller runs them (as root) and records what it made, so that a crash leaves names a later
cleanup can find: every name carries the environment's id.

A partition is an nftables table inside the worker's namespace, one per injection, named after
it: removing the table removes every rule it added, and nothing else on the host is touched.
What this kernel lacks is found out by trying it (:func:`missing_tools` for the binaries); the
machines measured here have no ``netem`` qdisc (CONFIG_NET_SCH_NETEM unset) and no tc ``gact``
drop action, but nftables, HTB, TBF and u32.
"""

from __future__ import annotations

import errno
import ipaddress
import json
import logging
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from inferchaos.errors import ConfigError, InferchaosError

logger = logging.getLogger(__name__)

# Linux interface names hold 15 characters (IFNAMSIZ 16, with its NUL).
IFNAME_MAX = 15
DEFAULT_SUBNET = "10.213.0.0/24"
# The address inside each namespace is on this interface (the veth's namespace end).
NS_IFACE = "eth0"
TOOLS = {"ip": "iproute2", "nft": "nftables", "nsenter": "util-linux"}
# Where `ip netns add` pins each namespace, for nsenter.
NETNS_RUN_DIR = "/run/netns"


class Direction(StrEnum):
    """Which way a partition cuts the traffic between a worker and the head."""

    BOTH = "both"
    # The worker hears nothing from the head; what it sends still arrives.
    IN = "in"
    # What the worker sends never reaches the head; it still hears from it.
    OUT = "out"


Command = list[str]


def in_namespace_argv(namespace: str, argv: Sequence[str]) -> Command:
    """``argv`` run inside ``namespace``'s network and nothing else, as its own process (no fork).

    Not `ip netns exec`: that also gives the command a mount namespace with /sys mounted anew
    for the network namespace, and in that /sys the cgroup filesystem is gone, so a replica
    started there could make no memory budget and read no CPU quota of its own.
    """
    return ["nsenter", f"--net={NETNS_RUN_DIR}/{namespace}", "--", *argv]


def missing_tools(tools: Sequence[str] = tuple(TOOLS)) -> list[str]:
    """The distribution packages to install for the binaries in ``tools`` that are not on PATH."""
    return [TOOLS.get(tool, tool) for tool in tools if shutil.which(tool) is None]


def parse_subnet(text: str) -> ipaddress.IPv4Network:
    """An IPv4 subnet with room for a bridge and workers; ConfigError in one line otherwise."""
    try:
        subnet = ipaddress.IPv4Network(text, strict=True)
    except ValueError as e:
        raise ConfigError(f"--subnet: {text!r} is not an IPv4 subnet like {DEFAULT_SUBNET}: {e}") from e
    if subnet.prefixlen > 29:
        raise ConfigError(f"--subnet: {text} holds too few addresses for a bridge and workers (at most /29)")
    return subnet


def parse_routes(ip_json: str) -> list[tuple[ipaddress.IPv4Network, str]]:
    """(destination, device) of every IPv4 route in ``ip -j -4 route show table all``; the
    default route is left out (every subnet is inside it)."""
    try:
        entries = json.loads(ip_json or "[]")
    except json.JSONDecodeError as e:
        raise ConfigError(f"could not read the host's routes from `ip -j route`: {e}") from e
    routes: list[tuple[ipaddress.IPv4Network, str]] = []
    for entry in entries:
        dst = str(entry.get("dst", ""))
        if not dst or dst == "default":
            continue
        try:
            network = ipaddress.IPv4Network(dst, strict=False)
        except ValueError:
            continue  # a multicast or IPv6 entry of another family's table
        routes.append((network, str(entry.get("dev", ""))))
    return routes


def colliding_route(
    subnet: ipaddress.IPv4Network, routes: Sequence[tuple[ipaddress.IPv4Network, str]], own_bridge: str = ""
) -> tuple[ipaddress.IPv4Network, str] | None:
    """The first host route that overlaps ``subnet``, or None; routes through ``own_bridge``
    (left by this environment) do not count."""
    for network, dev in routes:
        if dev != own_bridge and network.overlaps(subnet):
            return network, dev
    return None


def _name(prefix: str, env_id: str, suffix: str = "") -> str:
    name = f"{prefix}{env_id[: IFNAME_MAX - len(prefix) - len(suffix)]}{suffix}"
    if len(name) > IFNAME_MAX:
        raise ValueError(f"interface name {name!r} is longer than {IFNAME_MAX} characters")
    return name


@dataclass(frozen=True)
class NetnsPlan:
    """The namespaces, links and addresses of one environment's workers on ``subnet``.

    The bridge takes the subnet's first address (the head's, seen from the workers); worker
    ``i`` (from 0) takes the ones after it.
    """

    env_id: str
    subnet: ipaddress.IPv4Network
    workers: int

    def __post_init__(self) -> None:
        if self.workers < 0 or self.workers + 2 > self.subnet.num_addresses - 1:
            raise ConfigError(f"subnet {self.subnet} has no room for {self.workers} worker(s)")

    @property
    def bridge(self) -> str:
        return _name("icbr", self.env_id)

    @property
    def head_address(self) -> ipaddress.IPv4Address:
        """The bridge's address: where the workers reach the head."""
        return self.subnet.network_address + 1

    def namespace(self, worker: int) -> str:
        return f"inferchaos-{self.env_id}-w{worker}"

    def host_veth(self, worker: int) -> str:
        return _name("icv", self.env_id[:8], f"-{worker}")

    def address(self, worker: int) -> ipaddress.IPv4Address:
        """Worker ``worker``'s address inside its namespace."""
        return self.subnet.network_address + 2 + worker

    def bridge_up_commands(self) -> list[Command]:
        """The bridge, holding the head's address."""
        return [
            ["ip", "link", "add", self.bridge, "type", "bridge"],
            ["ip", "addr", "add", f"{self.head_address}/{self.subnet.prefixlen}", "dev", self.bridge],
            ["ip", "link", "set", self.bridge, "up"],
        ]

    def worker_up_commands(self, worker: int) -> list[Command]:
        """Worker ``worker``'s namespace, its veth pair off the bridge, its address and default route."""
        ns, veth = self.namespace(worker), self.host_veth(worker)
        return [
            ["ip", "netns", "add", ns],
            ["ip", "link", "add", veth, "type", "veth", "peer", "name", NS_IFACE, "netns", ns],
            ["ip", "link", "set", veth, "master", self.bridge],
            ["ip", "link", "set", veth, "up"],
            [
                "ip",
                "-n",
                ns,
                "addr",
                "add",
                f"{self.address(worker)}/{self.subnet.prefixlen}",
                "dev",
                NS_IFACE,
            ],
            ["ip", "-n", ns, "link", "set", NS_IFACE, "up"],
            ["ip", "-n", ns, "link", "set", "lo", "up"],
            ["ip", "-n", ns, "route", "add", "default", "via", str(self.head_address)],
        ]

    def worker_down_commands(self, worker: int) -> list[Command]:
        """What removes worker ``worker``'s namespace and link; its rules and qdiscs go with them.

        The host end of the veth is deleted first, which deletes the pair: the kernel tears a
        deleted namespace down asynchronously, and its veth would linger on the host meanwhile.
        """
        return [
            ["ip", "link", "delete", self.host_veth(worker)],
            ["ip", "netns", "delete", self.namespace(worker)],
        ]

    def bridge_down_commands(self) -> list[Command]:
        return [["ip", "link", "delete", self.bridge]]

    def up_commands(self) -> list[Command]:
        """The bridge, then every worker's namespace and link."""
        commands = self.bridge_up_commands()
        for worker in range(self.workers):
            commands += self.worker_up_commands(worker)
        return commands

    def down_commands(self) -> list[Command]:
        """What removes everything :meth:`up_commands` made, the bridge last."""
        commands: list[Command] = []
        for worker in range(self.workers):
            commands += self.worker_down_commands(worker)
        return [*commands, *self.bridge_down_commands()]

    def owns(self, name: str) -> bool:
        """Whether a link or namespace name is one this environment's plans make (any worker count)."""
        return (
            name == self.bridge
            or name.startswith(f"inferchaos-{self.env_id}-w")
            or name.startswith(_name("icv", self.env_id[:8], "-"))
        )


def partition_table(handle_id: str) -> str:
    """The nftables table of one partition: named after its injection, so its revert removes
    exactly what it added."""
    return f"inferchaos_{handle_id}".replace("-", "_")


def partition_ruleset(handle_id: str, head: ipaddress.IPv4Address, direction: Direction) -> str:
    """The ``nft -f -`` input, run inside the worker's namespace, that cuts it off from ``head``."""
    table = partition_table(handle_id)
    chains = []
    if direction in (Direction.BOTH, Direction.IN):
        chains.append(f"  chain input {{ type filter hook input priority 0; ip saddr {head} drop; }}")
    if direction in (Direction.BOTH, Direction.OUT):
        chains.append(f"  chain output {{ type filter hook output priority 0; ip daddr {head} drop; }}")
    return f"table ip {table} {{\n" + "\n".join(chains) + "\n}\n"


def partition_commands(namespace: str, handle_id: str) -> tuple[Command, Command]:
    """(apply, revert) argv for a partition inside ``namespace``; apply reads the ruleset on stdin."""
    table = partition_table(handle_id)
    return (
        ["ip", "netns", "exec", namespace, "nft", "-f", "-"],
        ["ip", "netns", "exec", namespace, "nft", "delete", "table", "ip", table],
    )


class NetnsError(InferchaosError):
    """A namespace, link or rule could not be made or removed."""


# What `ip` and `nft` say about a thing that is not there: a revert or a `down` after a crash
# finds some of what it removes gone already.
GONE = ("Cannot find device", "No such file or directory", "does not exist")


def run_commands(
    commands: Sequence[Command],
    *,
    stdin: str | None = None,
    tolerate_gone: bool = False,
    gone: Sequence[str] = GONE,
) -> None:
    """Run each argv in turn (``stdin`` to each); NetnsError in one line at the first failure,
    except, with ``tolerate_gone``, one whose error holds a phrase of ``gone`` (what the tool
    says when what it removes is gone already)."""
    for argv in commands:
        try:
            done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise NetnsError(f"`{' '.join(argv)}` could not run: {e}") from e
        if done.returncode == 0:
            continue
        error = " ".join(done.stderr.split()) or f"exit {done.returncode}"
        if tolerate_gone and any(marker in error for marker in gone):
            logger.debug("already gone: %s (%s)", " ".join(argv), error)
            continue
        raise NetnsError(f"`{' '.join(argv)}` failed: {error}")


def connects_from(namespace: str, address: str, port: int, timeout_s: float = 1.0) -> bool:
    """Whether a TCP connect from inside ``namespace`` to ``address:port`` completes (or is refused:
    a reset crossed the link too) within ``timeout_s``."""
    code = (
        "import socket,sys\n"
        f"try: socket.create_connection(({address!r}, {port}), timeout={timeout_s})\n"
        "except ConnectionRefusedError: pass\n"
        "except OSError: sys.exit(1)\n"
    )
    try:
        done = subprocess.run(
            ["ip", "netns", "exec", namespace, sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=timeout_s + 20,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise NetnsError(f"could not try a connect from namespace {namespace}: {e}") from e
    if done.returncode not in (0, 1):
        raise NetnsError(
            f"could not try a connect from namespace {namespace}: {' '.join(done.stderr.split())}"
        )
    return done.returncode == 0


# Nothing listens on the discard port of a worker's namespace, so its kernel answers a connect
# with a reset: the reset crosses the link both ways without any service to reach.
CLOSED_PORT = 9


def handshake_rtt(address: str, port: int = CLOSED_PORT, timeout_s: float = 0.5) -> float | None:
    """Seconds until ``address`` answered a TCP connect (a reset or an accept); None when it
    never did within ``timeout_s`` (a cut or lossy link, or no route)."""
    started = time.perf_counter()
    try:
        with socket.create_connection((address, port), timeout=timeout_s):
            pass
    except ConnectionRefusedError:
        pass
    except OSError as e:
        # A timeout, or an ICMP error (no route, host unreachable): nothing crossed the link.
        if isinstance(e, TimeoutError) or e.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ETIMEDOUT):
            return None
        raise
    return time.perf_counter() - started


def host_names() -> list[str]:
    """Every link and network namespace name on the host (``ip -j``), for leftovers checks."""
    names: list[str] = []
    for argv in (["ip", "-j", "link", "show"], ["ip", "-j", "netns", "list"]):
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True)
        except (OSError, subprocess.SubprocessError) as e:
            raise NetnsError(f"`{' '.join(argv)}` could not list: {e}") from e
        for entry in json.loads(done.stdout or "[]"):
            name = entry.get("ifname") or entry.get("name")
            if name:
                names.append(str(name))
    return names
