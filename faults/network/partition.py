"""Network partition: cut one worker node off from the head, on the real kernel link between them.

The environment must run its workers in namespaces of their own (`env up --network netns`):
the cut is one nftables table inside the worker's namespace (inferchaos/primitives/netns.py),
named after the injection and recorded in the ledger with its exact ruleset before it is
applied, so revert (and `inferchaos cleanup` after a crash, from the ledger alone) deletes
exactly that table. ``direction`` ``in`` drops what the head sends, ``out`` what the worker
sends, ``both`` both; a TCP handshake needs both ways, so each of them cuts every connection.

The cut lasts until revert: the experiment's pause sets its length. Whether Ray marks the node
DEAD depends on that length against its health-check budget (environments/local/ray_cluster.py).
A node marked DEAD cannot come back: when the link heals its raylet learns the verdict and
exits, and the node's processes end with it. Revert then waits for that, ends whatever of the
node is still running (a raylet that stayed up would be a zombie holding GPUs Ray no longer
counts), and starts a replacement worker, as a node pool or the kubelet would. A node that
survived is left as it is.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
import time
from dataclasses import dataclass, field

from inferchaos.errors import ConfigError, EnvironmentNotUp
from inferchaos.faults.base import (
    NODE_DEAD_AT,
    Evidence,
    FaultHandle,
    JsonObject,
    Planned,
    TypedFault,
    set_times,
)
from inferchaos.faults.ledger import Ledger
from inferchaos.faults.network.worker_links import open_network, require_links, target_worker
from inferchaos.faults.registry import register
from inferchaos.layers import Layer
from inferchaos.params import InvalidValue, seconds
from inferchaos.primitives.capabilities import NetworkEnvironment
from inferchaos.primitives.netns import (
    Direction,
    NetnsError,
    connects_from,
    partition_commands,
    partition_ruleset,
    partition_table,
    run_commands,
)
from inferchaos.primitives.processes import kill_tree_now, pid_alive

logger = logging.getLogger(__name__)

NAME = "network.partition_node"
DEAD_POLL_S = 0.5
# How long revert waits for the confirming connect before it heals: its timeout (1 s) and a
# process start on a busy machine, with room.
CONFIRM_WAIT_S = 10.0
# How long after the heal revert watches for a DEAD mark from health checks failed during the cut.
LATE_DEATH_S = 6.0


@dataclass
class PartitionNodeParams:
    """Which worker (by name, or by the replica it hosts), which way to cut, and the fences."""

    node: str | None = None
    replica: int | str | None = None
    direction: str = "both"
    # How long revert waits, after the heal, for a node Ray marked DEAD to end by itself.
    settle_s: float = 20.0
    allow_total_outage: bool = False

    def __post_init__(self) -> None:
        if self.direction not in tuple(Direction):
            raise InvalidValue("direction", f"must be one of {', '.join(Direction)}; got {self.direction!r}")
        if self.node is not None and self.replica is not None:
            raise InvalidValue("node", "name the node or the replica it hosts, not both")
        seconds(self.settle_s, "settle_s")


@dataclass
class _DeadWatch:
    """Confirms the cut, then polls Ray for the cut node's state while the cut lasts, in the
    injecting process."""

    stop: threading.Event = field(default_factory=threading.Event)
    dead_at: float | None = None
    checked: threading.Event = field(default_factory=threading.Event)
    head_connect_failed: bool | None = None


_WATCHES: dict[str, _DeadWatch] = {}
_WATCHES_LOCK = threading.Lock()


def _watch_dead(env: NetworkEnvironment, handle: FaultHandle, watch: _DeadWatch) -> None:
    s = handle.state
    # The confirming connect runs here, not in inject: it costs a process start and its
    # timeout (1.5-2.5 s on 2 busy cores), which inject would add to the cut's declared length.
    try:
        watch.head_connect_failed = not connects_from(s["namespace"], s["head_address"], s["gcs_port"])
    except NetnsError as e:
        logger.warning("could not confirm the cut of %s: %s", s["node_name"], e)
    finally:
        watch.checked.set()
    node_id = s["node_id"]
    while not watch.stop.wait(DEAD_POLL_S):
        try:
            dead = any(n.node_id == node_id and not n.alive for n in env.ray_nodes())
        except EnvironmentNotUp as e:
            logger.debug("node state unread: %s", e)
            continue
        if dead:
            watch.dead_at = time.time()
            return


def _node_is_dead(env: NetworkEnvironment, node_id: str) -> bool:
    return any(n.node_id == node_id and not n.alive for n in env.ray_nodes())


def _dead_within(env: NetworkEnvironment, node_id: str, seconds: float) -> float | None:
    """When Ray marked the node DEAD, if it does within ``seconds``; else None."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            if _node_is_dead(env, node_id):
                return time.time()
        except EnvironmentNotUp as e:
            logger.debug("node state unread: %s", e)
        if time.monotonic() >= deadline:
            return None
        time.sleep(DEAD_POLL_S)


@register
class PartitionNode(TypedFault[PartitionNodeParams, NetworkEnvironment]):
    """Cut one Ray worker node off from the head until revert."""

    name = NAME
    layer = Layer.NETWORK
    params_type = PartitionNodeParams

    def _open(self, env: object) -> NetworkEnvironment:
        return open_network(self.name, env)

    def _plan(self, env: NetworkEnvironment, params: PartitionNodeParams) -> Planned:
        network = require_links(self.name, env)
        record = target_worker(self.name, env, params.node, params.replica)
        ray_nodes = {n.name: n for n in env.ray_nodes()}
        node = ray_nodes.get(record.name)
        if node is None or not node.alive:
            raise ConfigError(f"{self.name}: worker node {record.name} is not ALIVE in Ray")
        replicas = env.replica_records()
        hit = [r.name for r in replicas if r.node_id == node.node_id]
        survivors = [r.name for r in replicas if r.node_id != node.node_id and r.state == "healthy"]
        if hit and not survivors and not params.allow_total_outage:
            raise ConfigError(
                f"{self.name}: cutting {record.name} off would leave no healthy replica reachable; "
                "set allow_total_outage to allow it"
            )
        head = env.load_state().nodes[0]
        description = (
            f"cut worker node {record.name} ({record.address}, netns {record.namespace}) off from the head "
            f"{network.head_address} ({params.direction}), hosting {', '.join(hit) or 'no replica'}; "
            "revert heals the link and replaces the node if Ray marked it DEAD"
        )
        state: JsonObject = {
            "node_name": record.name,
            "node_id": node.node_id,
            "pid": record.pid,
            "namespace": record.namespace,
            "node_address": record.address,
            "head_address": network.head_address,
            "gcs_port": head.ports.gcs,
            "replicas": list(hit),
        }
        return Planned(
            description, [f"netns:{record.namespace}", f"ray-node:{record.name}:{node.node_id}"], state
        )

    def _act(
        self, env: NetworkEnvironment, params: PartitionNodeParams, handle: FaultHandle, ledger: Ledger
    ) -> None:
        s = handle.state
        head = ipaddress.IPv4Address(s["head_address"])
        s["head_reachable_before"] = connects_from(s["namespace"], str(head), s["gcs_port"])
        ruleset = partition_ruleset(handle.id, head, Direction(params.direction))
        apply, _ = partition_commands(s["namespace"], handle.id)
        # The exact rules, in the ledger before they exist: cleanup deletes this table and nothing else.
        s["nft_table"] = partition_table(handle.id)
        s["nft_ruleset"] = ruleset
        ledger.record(handle)
        run_commands([apply], stdin=ruleset)
        handle.injected_at = time.time()
        ledger.record(handle)
        watch = _DeadWatch()
        with _WATCHES_LOCK:
            _WATCHES[handle.id] = watch
        threading.Thread(
            target=_watch_dead, args=(env, handle, watch), daemon=True, name=f"partition-{handle.id}"
        ).start()
        logger.info("cut %s off from the head (%s)", s["node_name"], params.direction)

    def _undo(
        self, env: NetworkEnvironment, params: PartitionNodeParams, handle: FaultHandle, ledger: Ledger
    ) -> None:
        s = handle.state
        with _WATCHES_LOCK:
            watch = _WATCHES.pop(handle.id, None)
        if watch is not None:
            # The confirming connect must end while the link is still cut.
            watch.checked.wait(CONFIRM_WAIT_S)
            watch.stop.set()
            if watch.head_connect_failed is not None:
                s["head_connect_failed"] = watch.head_connect_failed
            if watch.dead_at is not None:
                s["node_dead_at"] = watch.dead_at
        if s.get("healed_at") is None:
            # Was it DEAD before the heal? Cleanup after a crash has no watch to say: read Ray now.
            # With a watch, its last poll says it, and a state API call here would lengthen the cut.
            if watch is None and s.get("node_dead_at") is None and _node_is_dead(env, s["node_id"]):
                s["node_dead_at"] = time.time()
            _, revert = partition_commands(s["namespace"], handle.id)
            run_commands([revert], tolerate_gone=True)
            s["healed_at"] = time.time()
            ledger.record(handle)
            s["head_reachable_after"] = connects_from(s["namespace"], s["head_address"], s["gcs_port"])
            if s.get("node_dead_at") is None:
                # Health checks that failed during the cut can still add up to DEAD after the
                # heal (2.4 s after a 3 s cut on 2 busy cores). Ray never takes such a node back,
                # so the revert replaces it, as it replaces one that died during the cut.
                s["node_dead_at"] = _dead_within(env, s["node_id"], LATE_DEATH_S)
        if s.get("node_dead_at") is None:
            return
        replacement = s.get("replacement")
        if replacement is not None and replacement in {n.name for n in env.ray_nodes() if n.alive}:
            return
        self._retire(env, params, handle)
        record = env.add_worker()
        s["replacement"] = record.name
        handle.reverted_at = time.time()
        # Recorded before the entry goes, so a crash here never starts a second replacement.
        ledger.record(handle)
        logger.info(
            "started replacement worker %s for %s, which Ray marked DEAD", record.name, s["node_name"]
        )

    def _retire(self, env: NetworkEnvironment, params: PartitionNodeParams, handle: FaultHandle) -> None:
        """Wait for a node Ray marked DEAD to end by itself after the heal; end what is left."""
        s = handle.state
        deadline = time.monotonic() + params.settle_s
        while pid_alive(s["pid"]) and time.monotonic() < deadline:
            time.sleep(0.2)
        if not pid_alive(s["pid"]):
            s.setdefault("node_ended_after_heal_s", round(time.time() - s["healed_at"], 2))
        else:
            s["node_ended_after_heal_s"] = None
            s["ended_by_revert"] = kill_tree_now(s["pid"])
            logger.warning(
                "%s was still running %g s after the heal; ended it", s["node_name"], params.settle_s
            )
        env.mark_node_lost(s["node_name"])

    def _evidence(
        self, env: NetworkEnvironment, params: PartitionNodeParams, handle: FaultHandle
    ) -> Evidence:
        s = handle.state
        injected = handle.injected_at or s.get("healed_at") or time.time()
        dead_at = s.get("node_dead_at")
        if dead_at is None and s.get("healed_at") is None:
            with _WATCHES_LOCK:
                watch = _WATCHES.get(handle.id)
            dead_at = watch.dead_at if watch is not None else None
        connect_failed = s.get("head_connect_failed")
        if connect_failed is None:
            with _WATCHES_LOCK:
                live = _WATCHES.get(handle.id)
            connect_failed = live.head_connect_failed if live is not None else None
        cut = bool(connect_failed) and bool(s.get("head_reachable_before"))
        symptoms = {
            "node": s["node_name"],
            "direction": params.direction,
            "head_reachable_before": s.get("head_reachable_before"),
            "head_connect_failed_while_cut": connect_failed,
            "node_marked_dead": dead_at is not None,
            "node_dead_after_s": round(dead_at - injected, 2) if dead_at else None,
            "head_reachable_after_heal": s.get("head_reachable_after"),
            "node_ended_after_heal_s": s.get("node_ended_after_heal_s"),
            "processes_ended_by_revert": len(s.get("ended_by_revert", [])),
            "replacement_node": s.get("replacement"),
            "replicas_cut_off": s["replicas"],
        }
        reason = (
            f"a TCP connect from {s['node_name']}'s namespace to the head failed while the link was cut"
            + (
                f"; Ray marked the node DEAD {symptoms['node_dead_after_s']} s in"
                if dead_at
                else "; Ray kept the node ALIVE"
            )
            if cut
            else f"{s['node_name']} still reached the head after the cut (or never did before it)"
        )
        times = set_times(
            {"injected_at": handle.injected_at, NODE_DEAD_AT: dead_at, "healed_at": s.get("healed_at")}
        )
        return Evidence(bit=cut, reason=reason, symptoms=symptoms, timestamps=times)
