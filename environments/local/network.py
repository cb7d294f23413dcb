"""Where the local environment's Ray nodes live on the network: loopback, or a namespace each.

With ``netns`` every worker node is a network host of its own (inferchaos/primitives/netns.py):
its raylet, its Ray workers and its vLLM server run inside a namespace, on an address of the
environment's subnet, joined to the head by a real kernel link that a network fault can cut
or slow. The head stays in the host's namespace, on the bridge's address, so the front door,
the dashboard and Prometheus answer on 127.0.0.1 as before. With ``loopback`` every node
shares the host's loopback, and the network scenarios are skipped with the reason recorded.

Everything made is named after the environment's id, so `env down` (and a later `env down`
after a crash) removes what a host listing shows of it, not only what the record lists.
"""

from __future__ import annotations

import logging
import os
import subprocess
from dataclasses import dataclass

from inferchaos.errors import ConfigError
from inferchaos.primitives.env_status import NetworkStatus
from inferchaos.primitives.netns import (
    NetnsError,
    NetnsPlan,
    colliding_route,
    host_names,
    missing_tools,
    parse_routes,
    parse_subnet,
    run_commands,
)

logger = logging.getLogger(__name__)

NETNS, LOOPBACK, AUTO = "netns", "loopback", "auto"
NETWORK_MODES = (AUTO, NETNS, LOOPBACK)
# Ray replaces 127.0.0.1 and "localhost" with the host's outward address, but takes any other
# loopback address as it is: on loopback this keeps every byte of the cluster's traffic there.
LOOPBACK_NODE_IP = "127.0.0.2"
# Each port slot (a developer's environment, the tests') gets a subnet of its own, so the
# two never see each other's bridge as a colliding route.
SUBNET_TEMPLATE = "10.213.{slot}.0/24"
# Node indexes run to ray_cluster.MAX_NODE_INDEX; a plan holds one more (worker-N is worker N).
PLAN_WORKERS = 13
# What every process of a node reads to know which address its services listen on.
SERVICE_HOST_VAR = "INFERCHAOS_SERVICE_HOST"


@dataclass
class NetworkRecord:
    """The network the environment chose, and why, recorded before anything is made."""

    mode: str
    subnet: str = ""
    # Why the environment is on loopback when netns was not asked for: the network scenarios
    # are skipped with it.
    reason: str = ""


@dataclass(frozen=True)
class NodeNetwork:
    """One node's place on the network: Ray's node address, where its services listen, its namespace."""

    node_ip: str
    service_host: str
    namespace: str = ""


def default_subnet(port_slot: int) -> str:
    return SUBNET_TEMPLATE.format(slot=port_slot)


def netns_unavailable() -> str | None:
    """Why worker namespaces cannot be made on this host, in one line; None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if missing := missing_tools():
        return f"network namespaces need {', '.join(missing)} (apt-get install {' '.join(missing)})"
    try:
        probe = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"`ip netns` could not run: {e}"
    if probe.returncode != 0:
        return f"`ip netns` does not work here: {' '.join(probe.stderr.split())}"
    return None


def _host_routes() -> str:
    try:
        done = subprocess.run(
            ["ip", "-j", "-4", "route", "show", "table", "all"], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ConfigError(f"could not read the host's routes (`ip -j route`): {e}") from e
    return done.stdout


def choose_network(mode: str, subnet: str, port_slot: int, env_id: str) -> NetworkRecord:
    """The network to build, decided completely before anything starts.

    ``auto`` is netns where namespaces work here, else loopback with the reason. ``netns``
    where they do not, or a subnet that overlaps one of the host's routes, is a ConfigError
    in one line (exit 2), before anything is made.
    """
    if mode not in NETWORK_MODES:
        raise ConfigError(f"--network must be one of {', '.join(NETWORK_MODES)}, got {mode!r}")
    if mode == LOOPBACK:
        return NetworkRecord(LOOPBACK, reason="the environment was started with --network loopback")
    why = netns_unavailable()
    if why is not None:
        if mode == NETNS:
            raise ConfigError(f"--network netns: {why}; use --network loopback")
        logger.info("network namespaces unavailable (%s); using loopback", why)
        return NetworkRecord(LOOPBACK, reason=why)
    chosen = subnet or default_subnet(port_slot)
    network = parse_subnet(chosen)
    plan = NetnsPlan(env_id, network, PLAN_WORKERS)
    collision = colliding_route(network, parse_routes(_host_routes()), own_bridge=plan.bridge)
    if collision is not None:
        raise ConfigError(
            f"--subnet {chosen} overlaps the host route {collision[0]} on {collision[1]}; "
            "choose another with --subnet"
        )
    return NetworkRecord(NETNS, subnet=str(network))


def plan_of(env_id: str, record: NetworkRecord) -> NetnsPlan | None:
    """The namespace plan of a netns environment; None on loopback."""
    if record.mode != NETNS:
        return None
    return NetnsPlan(env_id, parse_subnet(record.subnet), PLAN_WORKERS)


def node_network(env_id: str, record: NetworkRecord | None, index: int, is_head: bool) -> NodeNetwork:
    """Where node ``index`` lives: the head on the bridge's address (in the host's namespace),
    worker N in namespace ``...-wN``; everything on loopback without netns."""
    plan = plan_of(env_id, record) if record is not None else None
    if plan is None:
        return NodeNetwork(node_ip=LOOPBACK_NODE_IP, service_host="127.0.0.1")
    if is_head:
        return NodeNetwork(node_ip=str(plan.head_address), service_host="127.0.0.1")
    address = str(plan.address(index))
    return NodeNetwork(node_ip=address, service_host=address, namespace=plan.namespace(index))


def make_bridge(env_id: str, record: NetworkRecord) -> None:
    """Create the bridge the workers' links hang off (nothing on loopback)."""
    plan = plan_of(env_id, record)
    if plan is not None:
        run_commands(plan.bridge_up_commands())


def make_worker_host(env_id: str, record: NetworkRecord | None, index: int) -> None:
    """Create worker ``index``'s namespace and link (nothing on loopback); a namespace left by a
    worker that died is made afresh."""
    plan = plan_of(env_id, record) if record is not None else None
    if plan is None:
        return
    run_commands(plan.worker_down_commands(index), tolerate_gone=True)
    run_commands(plan.worker_up_commands(index))


def remove_network(env_id: str, record: NetworkRecord | None) -> list[str]:
    """Remove every namespace and link of the environment that the host still lists; the names removed."""
    plan = plan_of(env_id, record) if record is not None else None
    if plan is None:
        return []
    try:
        present = [name for name in host_names() if plan.owns(name)]
    except NetnsError as e:
        logger.warning("could not list the host's links to remove the environment's: %s", e)
        present = []
    workers = sorted(
        {i for i in range(PLAN_WORKERS) if {plan.namespace(i), plan.host_veth(i)} & set(present)}
    )
    for worker in workers:
        run_commands(plan.worker_down_commands(worker), tolerate_gone=True)
    if plan.bridge in present:
        run_commands(plan.bridge_down_commands(), tolerate_gone=True)
    return present


def network_status(env_id: str, record: NetworkRecord | None) -> NetworkStatus:
    """What `env status` and the network faults read; a record from before networks were chosen is loopback."""
    if record is None:
        return NetworkStatus(LOOPBACK, reason="the environment was started before --network existed")
    plan = plan_of(env_id, record)
    if plan is None:
        return NetworkStatus(LOOPBACK, reason=record.reason)
    return NetworkStatus(NETNS, subnet=record.subnet, head_address=str(plan.head_address))
