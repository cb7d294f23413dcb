"""What every network fault reads first: that the workers have links of their own, and which worker."""

from __future__ import annotations

from inferchaos.errors import ConfigError, Unsupported
from inferchaos.faults.base import capability_error, replica_name
from inferchaos.primitives.capabilities import NetworkEnvironment
from inferchaos.primitives.env_status import NetworkStatus
from inferchaos.primitives.ray_nodes import RayNodeRecord


def open_network(fault: str, env: object) -> NetworkEnvironment:
    """``env`` as a NetworkEnvironment; ConfigError for an environment that has none."""
    if not isinstance(env, NetworkEnvironment):
        raise capability_error(fault, env, "the embedded local environment only (its workers' namespaces)")
    return env


def require_links(fault: str, env: NetworkEnvironment) -> NetworkStatus:
    """The environment's network; Unsupported (the run is skipped, saying why) on loopback."""
    network = env.network()
    if network.mode != "netns":
        raise Unsupported(
            f"{fault}: this environment's nodes share loopback, so there is no link to act on "
            f"({network.reason}); start it with `inferchaos env up --network netns`"
        )
    return network


def target_worker(
    fault: str, env: NetworkEnvironment, node: str | None, replica: int | str | None
) -> RayNodeRecord:
    """The live worker named ``node``, or the one hosting ``replica`` (replica-0 by default)."""
    workers = [n for n in env.load_state().nodes if not n.is_head and not n.lost]
    if node is not None:
        found = [n for n in workers if n.name == node]
        if not found:
            known = ", ".join(n.name for n in workers) or "none"
            raise ConfigError(f"{fault}: no live worker node named {node!r}; workers: {known}")
        return found[0]
    wanted = replica_name(replica if replica is not None else 0)
    records = [r for r in env.replica_records() if r.name == wanted]
    if not records:
        raise ConfigError(f"{fault}: no replica named {wanted!r}")
    hosts = {n.node_id: n.name for n in env.ray_nodes() if n.alive}
    found = [n for n in workers if n.name == hosts.get(records[0].node_id)]
    if not found:
        raise ConfigError(f"{fault}: the node hosting {wanted} is not a live worker of this environment")
    return found[0]
