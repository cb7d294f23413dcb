"""GCS loss: SIGKILL Ray's GCS server on the head, as a crash would, and start it again from its Redis.

The GCS is Ray's control plane: node membership, the actor and placement-group tables, the
jobs, the internal KV that Serve checkpoints into. With GCS fault tolerance (KubeRay's, here
``inferchaos env up --gcs-ft``) it keeps those tables in Redis, so a GCS started again finds the
cluster as it was, while raylets, workers and Serve's proxy and replicas keep running and
serving meanwhile: the promise of KubeRay's end-to-end Serve fault tolerance. Without external
storage a GCS started again knows nothing of the cluster, so the plan refuses such an
environment.

The plan reads the live gcs_server process of the environment (found by its command line and
the environment's marker, so no other cluster's GCS is ever touched) and records how it was
started (command line, working folder, environment less the auth token) in the ledger entry
before anything acts: `inferchaos cleanup` in another process can start it again from that alone.

Inject SIGKILLs it and starts a thread in the injecting process that sends small streaming
completions through the front door until the GCS is back, as ``ray.kill_serve_controller`` does.

Revert starts the recorded command again, the way Ray's own tests restart a GCS
(``Node.start_gcs_server``: the same executable, flags and port), detached in a session of its
own so that it outlives the runner; then it waits until the GCS answers Ray's state API with
every node that was ALIVE before ALIVE again, and records the nodes and Serve's actors as they
are then. It starts nothing when a GCS of the environment already runs (a second revert, or the
kill never happened), so two GCS never serve one cluster. It raises PlatformDidNotRecover (a
platform failure, which fails the run), leaving the ledger entry, when the GCS does not answer
within ``recover_timeout_s``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

from inferchaos.errors import ConfigError, EnvironmentError_, FaultError, PlatformDidNotRecover
from inferchaos.faults.base import (
    Evidence,
    FaultHandle,
    JsonObject,
    Planned,
    RevertWait,
    TypedFault,
    capability_error,
    set_times,
    wait_until,
)
from inferchaos.faults.ledger import Ledger
from inferchaos.faults.ray.outage import FrontDoorRequests
from inferchaos.faults.registry import register
from inferchaos.layers import Layer
from inferchaos.params import seconds
from inferchaos.primitives.capabilities import GcsEnvironment
from inferchaos.primitives.gcs_state import GcsStorage, is_gcs_server
from inferchaos.primitives.processes import (
    ProcessLaunch,
    pid_alive,
    processes_with_marker,
    read_launch,
    relaunch,
    same_process,
    wait_for_port,
)

logger = logging.getLogger(__name__)

NAME = "ray.kill_gcs"
# The token a GCS needs to accept its cluster's calls; kept out of the ledger, read again on revert.
TOKEN_VARIABLE = "RAY_AUTH_TOKEN"
ALIVE = "ALIVE"
# Serve's own actors: its controller, its proxies (the front door) and the replicas of every
# deployment (ray/serve/_private/constants.py names them so).
SERVE_ACTOR_CLASSES = ("ServeController", "ProxyActor")
SERVE_REPLICA_PREFIX = "ServeReplica:"
# One state-API read may take this long (the dashboard is an HTTP round trip to the GCS).
STATE_API_TIMEOUT_S = 5
POLL_INTERVAL_S = 0.5
# SIGKILL is delivered at once; the process is gone when its parent has reaped it.
KILL_CONFIRM_S = 5.0
# Part of the raylets' reconnect budget an outage may use up before the revert starts the GCS:
# the rest is for the restart itself.
OUTAGE_SHARE_OF_RECONNECT = 0.5


@dataclass
class KillGcsParams:
    """How long the revert waits for the restarted GCS to answer with every node back."""

    recover_timeout_s: float = 60.0

    def __post_init__(self) -> None:
        seconds(self.recover_timeout_s, "recover_timeout_s")


@dataclass
class ClusterView:
    """The cluster as one read of Ray's state API shows it: node ids and Serve's live actors."""

    # node id -> state (ALIVE, DEAD)
    nodes: dict[str, str]
    # actor id -> [class name, pid], ALIVE actors of Serve only
    serve_actors: dict[str, list[str | int]]

    @property
    def alive_nodes(self) -> set[str]:
        return {node for node, state in self.nodes.items() if state == ALIVE}


def is_serve_actor(class_name: str) -> bool:
    """Whether an actor class is Serve's own: its controller, a proxy or a deployment's replica."""
    return class_name in SERVE_ACTOR_CLASSES or class_name.startswith(SERVE_REPLICA_PREFIX)


def read_cluster(dashboard_url: str, timeout_s: int = STATE_API_TIMEOUT_S) -> ClusterView:
    """Nodes and Serve's ALIVE actors from Ray's state API; EnvironmentError_ when it does not answer
    (as it cannot while the GCS is down)."""
    from ray.exceptions import AuthenticationError
    from ray.util.state import list_actors, list_nodes
    from ray.util.state.exception import RayStateApiException

    try:
        nodes = list_nodes(address=dashboard_url, timeout=timeout_s, raise_on_missing_output=False)
        actors = list_actors(
            address=dashboard_url,
            filters=[("state", "=", ALIVE)],
            timeout=timeout_s,
            raise_on_missing_output=False,
        )
    except (RayStateApiException, AuthenticationError, ConnectionError, OSError) as e:
        raise EnvironmentError_(f"Ray's state API at {dashboard_url} did not answer: {e}") from e
    return ClusterView(
        nodes={n.node_id: str(n.state) for n in nodes},
        serve_actors={
            a.actor_id: [a.class_name, int(a.pid or 0)] for a in actors if is_serve_actor(a.class_name or "")
        },
    )


def gcs_processes(storage: GcsStorage) -> list[psutil.Process]:
    """The live gcs_server processes of the environment ``storage`` describes (one, or none while it is down)."""
    found = []
    for proc in processes_with_marker(storage.env_id):
        try:
            if is_gcs_server(proc.cmdline(), storage.gcs_port) and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def intact(before: dict[str, Any], after: dict[str, Any] | None) -> JsonObject:
    """How the cluster after the outage compares with before: the same nodes ALIVE, the same Serve
    actors ALIVE in the same processes (none restarted, none lost)."""
    if after is None:
        return {"nodes_intact": None, "serve_intact": None, "nodes_lost": [], "serve_actors_lost": []}
    was, now = ClusterView(**before), ClusterView(**after)
    nodes_lost = sorted(was.alive_nodes - now.alive_nodes)
    serve_lost = sorted(
        f"{cls}:{actor_id[:12]}"
        for actor_id, (cls, pid) in was.serve_actors.items()
        if now.serve_actors.get(actor_id, [None, None])[1] != pid
    )
    return {
        "nodes_intact": not nodes_lost,
        "serve_intact": bool(was.serve_actors) and not serve_lost,
        "nodes_lost": list(nodes_lost),
        "serve_actors_lost": list(serve_lost),
    }


def gcs_evidence(
    state: dict[str, Any],
    outage: JsonObject | None,
    running_now: list[int],
    injected_at: float | None,
    reverted_at: float | None,
) -> Evidence:
    """Whether the kill bit and what the outage did, from the handle's state, the front-door tally
    (None where no request thread ran in this process) and the gcs_server pids running now."""
    pid = int(state["pid"])
    killed_at, back_at, restarted_at = state.get("killed_at"), state.get("back_at"), state.get("restarted_at")
    gone = state.get("pid_gone_at") is not None or pid not in running_now
    bit = killed_at is not None and gone
    outage = outage or {}
    comparison = intact(state["before"], state.get("after"))
    before = ClusterView(**state["before"])
    after = ClusterView(**state["after"]) if state.get("after") else None
    symptoms: JsonObject = {
        "gcs_pid_before": pid,
        "gcs_pid_after": state.get("restarted_pid") or next((p for p in running_now if p != pid), None),
        "gcs_running_now": list(running_now),
        "gcs_back": back_at is not None,
        # From the kill: until the revert started it again, and until it answered with every node.
        "restarted_after_s": round(restarted_at - killed_at, 2) if restarted_at and killed_at else None,
        "down_s": round(back_at - killed_at, 2) if back_at and killed_at else None,
        "nodes_alive_before": len(before.alive_nodes),
        "nodes_alive_after": len(after.alive_nodes) if after else None,
        "serve_actors_before": len(before.serve_actors),
        "serve_actors_after": len(after.serve_actors) if after else None,
        **comparison,
        "front_door_requests_during_outage": outage.get("sent"),
        "front_door_served_during_outage": outage.get("served"),
        "front_door_failed_during_outage": outage.get("failed"),
        "front_door_served_by": outage.get("served_by"),
        "front_door_errors": outage.get("errors", []),
    }
    timestamps = set_times(
        {
            "injected_at": injected_at,
            "pid_gone_at": state.get("pid_gone_at"),
            "restarted_at": restarted_at,
            "gcs_back_at": back_at,
            "reverted_at": reverted_at,
        }
    )
    return Evidence(bit=bit, reason=_reason(state, symptoms, bit), symptoms=symptoms, timestamps=timestamps)


def _reason(state: dict[str, Any], symptoms: JsonObject, bit: bool) -> str:
    pid = symptoms["gcs_pid_before"]
    if state.get("killed_at") is None:
        return f"the GCS (pid {pid}) was never killed: the injector stopped before its SIGKILL"
    if not bit:
        return f"the GCS's process {pid} still runs after SIGKILL"
    parts = [f"the GCS's process {pid} died"]
    if symptoms["gcs_back"]:
        parts.append(
            f"started again as pid {symptoms['gcs_pid_after']}, it answered with every node after "
            f"{symptoms['down_s']:g} s down"
        )
        parts.append("nodes intact" if symptoms["nodes_intact"] else f"nodes lost: {symptoms['nodes_lost']}")
        if symptoms["serve_intact"]:
            parts.append(f"Serve's {symptoms['serve_actors_before']} actors intact")
        else:
            parts.append(
                f"Serve's actors lost or restarted: {symptoms['serve_actors_lost'] or 'none seen before'}"
            )
    else:
        parts.append("it is not back yet")
    if symptoms["front_door_requests_during_outage"] is not None:
        parts.append(
            f"the front door served {symptoms['front_door_served_during_outage']} of "
            f"{symptoms['front_door_requests_during_outage']} requests sent meanwhile"
        )
    return "; ".join(parts)


# Request threads by handle id, for every fault object of this process: revert and evidence may
# run on another instance than inject (get_fault makes a new one per call).
_REQUESTS: dict[str, FrontDoorRequests] = {}


@register
class KillGcs(TypedFault[KillGcsParams, GcsEnvironment]):
    """SIGKILL the head's GCS; revert starts it again from its Redis. Needs ``env up --gcs-ft``."""

    name = NAME
    layer = Layer.RAY
    params_type = KillGcsParams

    def revert_wait(self, params: KillGcsParams) -> RevertWait:
        # Counted from the restart, which the revert does first.
        return RevertWait(params.recover_timeout_s, "recover_timeout_s")

    def _open(self, env: object) -> GcsEnvironment:
        if not isinstance(env, GcsEnvironment):
            raise capability_error(
                self.name,
                env,
                "the embedded local environment only (the GCS must run on this host)",
            )
        return env

    def _plan(self, env: GcsEnvironment, params: KillGcsParams) -> Planned:
        storage = env.gcs_storage()
        if storage is None:
            raise ConfigError(
                f"{self.name} needs GCS fault tolerance: start the environment with `inferchaos env up --gcs-ft` "
                "(a GCS without external storage comes back knowing nothing of the cluster)"
            )
        if not pid_alive(storage.redis_pid):
            raise ConfigError(
                f"{self.name}: the GCS's Redis (pid {storage.redis_pid}, {storage.redis_address}) is not running, "
                "so a GCS started again could not recover the cluster; restart the environment"
            )
        running = gcs_processes(storage)
        if len(running) != 1:
            raise ConfigError(
                f"{self.name}: expected one gcs_server of this environment serving port {storage.gcs_port} "
                f"on this host, found {len(running)} ({[p.pid for p in running]})"
            )
        proc = running[0]
        try:
            launch = read_launch(proc, withhold=(TOKEN_VARIABLE,))
            created = proc.create_time()
        except psutil.NoSuchProcess as e:
            raise ConfigError(f"{self.name}: the gcs_server (pid {proc.pid}) ended while it was read") from e
        except psutil.AccessDenied as e:
            raise ConfigError(
                f"{self.name}: cannot read how gcs_server (pid {proc.pid}) was started: {e}"
            ) from e
        if params.recover_timeout_s >= storage.reconnect_timeout_s * OUTAGE_SHARE_OF_RECONNECT:
            raise ConfigError(
                f"{self.name}: recover_timeout_s {params.recover_timeout_s:g} s must stay below half the raylets' "
                f"GCS reconnect budget ({storage.reconnect_timeout_s:g} s): past it every node exits"
            )
        env.connect_ray()
        status = env.status()
        before = read_cluster(status.ray.dashboard_url)
        description = (
            f"SIGKILL the head's GCS (gcs_server pid {proc.pid}, {storage.gcs_address}) as a crash would; its "
            f"tables stay in Redis at {storage.redis_address}; {len(before.alive_nodes)} nodes and "
            f"{len(before.serve_actors)} Serve actors must keep serving while it is down; revert starts the same "
            f"command again and waits up to {params.recover_timeout_s:g} s for every node to be ALIVE in it"
        )
        state: JsonObject = {
            "pid": proc.pid,
            "create_time": created,
            "launch": asdict(launch),
            "gcs_address": storage.gcs_address,
            "gcs_port": storage.gcs_port,
            "redis_address": storage.redis_address,
            "logs_dir": storage.logs_dir,
            "dashboard_url": status.ray.dashboard_url,
            "front_door_url": status.front_door.url,
            "model": status.model.name,
            "before": asdict(before),
        }
        return Planned(description, [f"ray-gcs:{storage.gcs_address}", f"pid:{proc.pid}"], state)

    def _act(self, env: GcsEnvironment, params: KillGcsParams, handle: FaultHandle, ledger: Ledger) -> None:
        pid, created = int(handle.state["pid"]), float(handle.state["create_time"])
        proc = same_process(pid, created)
        if proc is None:
            raise FaultError(f"{self.name}: the gcs_server {pid} is gone since the plan; nothing was killed")
        try:
            proc.kill()
        except psutil.NoSuchProcess as e:
            raise FaultError(f"{self.name}: the gcs_server {pid} ended before SIGKILL") from e
        except psutil.AccessDenied as e:
            raise FaultError(f"{self.name}: could not SIGKILL the gcs_server {pid}: {e}") from e
        handle.injected_at = time.time()
        handle.state["killed_at"] = handle.injected_at
        ledger.record(handle)
        # Started at once: the front door's requests count from the kill on.
        requests = FrontDoorRequests(
            f"gcs-outage-requests-{handle.id}", handle.state["front_door_url"], handle.state["model"]
        )
        _REQUESTS[handle.id] = requests
        requests.start()
        handle.state["pid_gone_at"] = wait_until(
            lambda: same_process(pid, created) is None, KILL_CONFIRM_S, 0.05
        )
        ledger.record(handle)
        logger.info(
            "%s [%s]: SIGKILLed gcs_server %d (%s)",
            self.name,
            handle.id,
            pid,
            "gone" if handle.state["pid_gone_at"] else "still there",
        )

    def _undo(self, env: GcsEnvironment, params: KillGcsParams, handle: FaultHandle, ledger: Ledger) -> None:
        state = handle.state
        if state.get("back_at"):
            return  # a second revert: the GCS is back and recorded so
        pid, created = int(state["pid"]), float(state["create_time"])
        if state.get("killed_at") is None and same_process(pid, created) is not None:
            # The injector stopped between its ledger entry and the kill: nothing to restart.
            state["not_killed"] = True
            self._stop_requests(handle)
            ledger.record(handle)
            return
        storage = env.gcs_storage()
        if storage is None:
            raise FaultError(
                f"{self.name}: the environment no longer records its GCS storage; cannot restart it"
            )
        running = gcs_processes(storage)
        if running:
            # Started by an earlier revert (or never killed): a second GCS must never serve the cluster.
            state.setdefault("restarted_pid", next((p.pid for p in running if p.pid != pid), None))
        else:
            launch = ProcessLaunch(**state["launch"])
            log_path = Path(state["logs_dir"]) / "gcs_server-restarted.log"
            state["restarted_pid"] = relaunch(launch, {TOKEN_VARIABLE: env.ray_auth_token()}, log_path)
            state["restarted_at"] = time.time()
            ledger.record(handle)
            logger.info(
                "%s [%s]: started gcs_server again as pid %d", self.name, handle.id, state["restarted_pid"]
            )
        start = float(state.get("restarted_at") or time.time())
        self._wait_back(env, state, start + params.recover_timeout_s)
        outage = self._stop_requests(handle)
        if outage is not None:
            state["outage"] = outage
        ledger.record(handle)
        if not state.get("back_at"):
            # The restart was done: a GCS that does not come back is the platform's failure.
            raise PlatformDidNotRecover(
                f"{self.name}: the GCS did not answer with every node ALIVE within {params.recover_timeout_s:g} s "
                f"of its restart (last seen: {state.get('last_seen', 'nothing')}); the ledger entry stays for "
                "`inferchaos cleanup`"
            )
        logger.info(
            "%s [%s]: the GCS is back, %.2f s after the kill",
            self.name,
            handle.id,
            state["back_at"] - float(state.get("killed_at") or handle.created_at),
        )

    def _wait_back(self, env: GcsEnvironment, state: dict[str, Any], deadline: float) -> None:
        """Read the cluster until every node ALIVE before is ALIVE again, or ``deadline`` has passed."""
        wanted = ClusterView(**state["before"]).alive_nodes
        host, port = state["gcs_address"].rsplit(":", 1)
        # A driver connects only to a GCS that listens (a cleanup's process is not connected yet).
        if not wait_for_port(int(port), max(0.0, deadline - time.time()), host):
            state["last_seen"] = f"nothing listens on {state['gcs_address']}"
            return
        env.connect_ray()
        while True:
            try:
                now = read_cluster(state["dashboard_url"])
            except EnvironmentError_ as e:
                state["last_seen"] = f"unreadable: {str(e)[:200]}"
            else:
                missing = wanted - now.alive_nodes
                state["last_seen"] = f"{len(now.alive_nodes)} nodes ALIVE, {len(missing)} of before missing"
                if not missing:
                    state.update(back_at=time.time(), after=asdict(now))
                    return
            if time.time() + POLL_INTERVAL_S >= deadline:
                return
            time.sleep(POLL_INTERVAL_S)

    @staticmethod
    def _stop_requests(handle: FaultHandle) -> JsonObject | None:
        requests = _REQUESTS.pop(handle.id, None)
        return requests.stop() if requests is not None else None

    def _evidence(self, env: GcsEnvironment, params: KillGcsParams, handle: FaultHandle) -> Evidence:
        state = handle.state
        requests = _REQUESTS.get(handle.id)
        outage = requests.snapshot() if requests is not None else state.get("outage")
        storage = env.gcs_storage()
        running = [p.pid for p in gcs_processes(storage)] if storage is not None else []
        return gcs_evidence(state, outage, running, handle.injected_at, handle.reverted_at)
