"""Serve controller loss: SIGKILL the worker process of Ray Serve's controller actor, as a crash would.

Serve's controller is its control plane: it reconciles deployments, health-checks replicas and
tells the proxies where the replicas are. Serve creates it as a detached actor with
``max_restarts=-1``, pinned to the head node (ray/serve/_private/default_impl.py,
``get_controller_impl``), so Ray restarts it; the proxies and the replicas are detached actors
of their own and keep serving meanwhile with the routes they last heard. This fault checks
both halves of that claim.

Inject SIGKILLs the controller's worker process (in the embedded local environment its pid is
on this host) and starts two watchers in the injecting process, bounded by ``recover_timeout_s``
from the kill: one reads Ray's state API until the controller is ALIVE again in a new process
and notes when (to its poll interval and one state-API read); the other sends small streaming
completions through the front door until then. The fault cannot see the run's canary, so its
own requests are what it reports as served during the outage: those *sent* between the kill and
the moment the watcher saw the controller back.

Revert has nothing to undo, since Ray brings the controller back; it waits for that (until
``recover_timeout_s`` after the kill, and at least one read) and raises PlatformDidNotRecover (a
platform failure, which fails the run), leaving the ledger entry, when the controller is not
ALIVE in a new process by then. A revert in another
process than the inject (``inferchaos cleanup`` after a crash) has no watcher: it records the
time *it* saw the controller back (``back_seen_by: revert``), an upper bound.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Collection, Iterable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

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
from inferchaos.primitives.capabilities import ServeProcessEnvironment
from inferchaos.primitives.processes import same_process

if TYPE_CHECKING:
    from ray.util.state.common import ActorState

logger = logging.getLogger(__name__)

NAME = "ray.kill_serve_controller"
# Serve's names for its controller (ray/serve/_private/constants.py: SERVE_CONTROLLER_NAME,
# SERVE_NAMESPACE). Copied rather than imported: importing ray.serve pulls in all of Serve.
CONTROLLER_CLASS = "ServeController"
CONTROLLER_NAME = "SERVE_CONTROLLER_ACTOR"
SERVE_NAMESPACE = "serve"
ALIVE = "ALIVE"
DEAD = "DEAD"
# One state-API read may take this long (the dashboard is an HTTP round trip).
STATE_API_TIMEOUT_S = 5
# How often the watcher reads the controller's state: the resolution of ``back_after_s``.
POLL_INTERVAL_S = 0.25
# SIGKILL is delivered at once, but the raylet reaps its worker asynchronously.
KILL_CONFIRM_S = 5.0


@dataclass
class KillServeControllerParams:
    """How long Serve's controller may take to be ALIVE again, counted from the kill, and
    whether it is kept down (``keep_down``: killed again each time Ray brings it back, as a
    crash-looping control plane, until revert; the timeout then counts from the revert)."""

    recover_timeout_s: float = 60.0
    keep_down: bool = False

    def __post_init__(self) -> None:
        seconds(self.recover_timeout_s, "recover_timeout_s")


@dataclass(frozen=True)
class ControllerSighting:
    """Serve's controller actor as one read of Ray's state API showed it."""

    actor_id: str
    state: str
    pid: int
    node_id: str
    # Ray lists it only with ``detail=True``; None where a read did not carry it.
    num_restarts: int | None


def sightings(actors: Iterable[ActorState]) -> list[ControllerSighting]:
    """The Serve controllers among state-API actor records (``ray.util.state.common.ActorState``).

    Serve names its controller; an application's own actor of a class called ServeController
    is not it.
    """
    found = []
    for actor in actors:
        if (
            actor.class_name != CONTROLLER_CLASS
            or actor.name != CONTROLLER_NAME
            or actor.ray_namespace != SERVE_NAMESPACE
        ):
            continue
        restarts = getattr(actor, "num_restarts", None)
        found.append(
            ControllerSighting(
                actor_id=actor.actor_id,
                state=str(actor.state),
                pid=int(actor.pid or 0),
                node_id=actor.node_id or "",
                num_restarts=None if restarts is None else int(restarts),
            )
        )
    return found


def alive_controller(seen: list[ControllerSighting]) -> ControllerSighting | None:
    """The ALIVE controller, or None (Ray lets one live actor hold a name in a namespace)."""
    return next((s for s in seen if s.state == ALIVE), None)


def live_controller(seen: list[ControllerSighting]) -> ControllerSighting | None:
    """The controller that is not DEAD (ALIVE, RESTARTING, ...), for reporting its state; or None."""
    return alive_controller(seen) or next((s for s in seen if s.state != DEAD), None)


def is_back(killed: Collection[int], sighting: ControllerSighting | None) -> bool:
    """Whether ``sighting`` is the controller ALIVE again in another process than those killed.

    While the raylet has not yet noticed a death, the state API still shows the old pid ALIVE.
    """
    return sighting is not None and sighting.state == ALIVE and sighting.pid not in (0, *killed)


def killed_pids(state: dict[str, Any]) -> set[int]:
    """Every controller process the fault killed: the first, and those a crash loop killed since."""
    return {int(state["pid"]), *(int(pid) for pid in state.get("crash_loop_pids", []))}


def is_controller_title(title: str) -> bool:
    """Whether a process's title is a Ray worker running the Serve controller.

    Ray retitles an actor's worker ``ray::<Class>`` or ``ray::<Class>.<method>`` (what Ray's own
    tests check, ray/_private/state_api_test_utils.py).
    """
    return title.startswith("ray::") and CONTROLLER_CLASS in title


def read_controllers(dashboard_url: str, timeout_s: int = STATE_API_TIMEOUT_S) -> list[ControllerSighting]:
    """Every Serve controller Ray's state API at ``dashboard_url`` lists, DEAD ones included.

    The caller has set up Ray's auth token (``connect_ray``). EnvironmentError_ when the API does not
    answer: at plan time that is an environment error (nothing injected); later reads note it and go on.
    """
    from ray.exceptions import AuthenticationError
    from ray.util.state import list_actors
    from ray.util.state.exception import RayStateApiException

    try:
        actors = list_actors(
            address=dashboard_url,
            filters=[("class_name", "=", CONTROLLER_CLASS)],
            # num_restarts is a detail column.
            detail=True,
            timeout=timeout_s,
            raise_on_missing_output=False,
        )
    except (RayStateApiException, AuthenticationError, ConnectionError, OSError) as e:
        raise EnvironmentError_(
            f"Ray's state API at {dashboard_url} did not list the Serve controller: {e}"
        ) from e
    return sightings(actors)


def controller_process(fault: str, pid: int) -> tuple[float, str]:
    """Start time and title of the controller's worker ``pid`` on this host; ConfigError when it is not one."""
    try:
        proc = psutil.Process(pid)
        title = (proc.cmdline() or [""])[0]
        created = proc.create_time()
    except psutil.NoSuchProcess as e:
        raise ConfigError(
            f"{fault}: the Serve controller's pid {pid} is not a process of this host (Ray's workers must run here)"
        ) from e
    except psutil.AccessDenied as e:
        raise ConfigError(f"{fault}: cannot read the Serve controller's process {pid}: {e}") from e
    if not is_controller_title(title):
        raise ConfigError(
            f"{fault}: pid {pid} runs {title!r}, not Ray's ray::{CONTROLLER_CLASS} worker; refusing to kill it"
        )
    return created, title


@dataclass
class OutageObservations:
    """What the watcher saw between the kill and the controller's return (ground truth for evidence)."""

    # The controller's state at the watcher's last read (RESTARTING, ALIVE, absent).
    last_state: str = ""
    read_errors: int = 0
    last_read_error: str = ""
    back_at: float | None = None
    after: JsonObject | None = None
    timed_out: bool = False
    # keep_down: the controllers Ray brought back and the watcher killed again.
    crash_loop_pids: list[int] = field(default_factory=list)


class _OutageWatch:
    """Two threads of the injecting process: one watches the controller come back, one sends
    requests through the front door until it has. Both end by ``deadline`` at the latest.

    With ``keep_down`` the watcher kills each controller Ray brings back instead, and both run
    until :meth:`finish` (the revert): the outage lasts as long as the fault holds.
    """

    def __init__(
        self, handle_id: str, state: dict[str, Any], deadline: float, keep_down: bool = False
    ) -> None:
        self.obs = OutageObservations()
        self._state = dict(state)
        self._deadline = deadline
        self._keep_down = keep_down
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._watcher = threading.Thread(
            target=self._watch, name=f"serve-controller-watch-{handle_id}", daemon=True
        )
        self._requests = FrontDoorRequests(
            f"serve-controller-requests-{handle_id}", state["front_door_url"], state["model"]
        )

    def start(self) -> None:
        self._watcher.start()
        self._requests.start()

    def snapshot(self) -> JsonObject:
        """A copy of the observations so far (the threads keep writing theirs): the front door's tally
        and what the watcher saw."""
        tally = self._requests.snapshot()
        with self._lock:
            return {**tally, **asdict(self.obs)}

    def finish(self) -> JsonObject:
        """Wait for the watcher (it ends by the deadline; a crash loop ends now), then stop the requests."""
        if self._keep_down:
            self._stop.set()
        self._watcher.join(timeout=max(0.0, self._deadline - time.time()) + STATE_API_TIMEOUT_S + 1.0)
        self._stop.set()
        tally = self._requests.stop()
        with self._lock:
            return {**tally, **asdict(self.obs)}

    def _watch(self) -> None:
        killed = {int(self._state["pid"])}
        try:
            while not self._stop.is_set():
                if not self._keep_down and time.time() >= self._deadline:
                    with self._lock:
                        self.obs.timed_out = True
                    return
                try:
                    seen = read_controllers(self._state["dashboard_url"])
                except EnvironmentError_ as e:
                    # The dashboard may lag under load; the deadline bounds the wait anyway.
                    with self._lock:
                        self.obs.read_errors += 1
                        self.obs.last_read_error = str(e)[:200]
                else:
                    now = live_controller(seen)
                    back = alive_controller(seen)
                    with self._lock:
                        self.obs.last_state = now.state if now else "absent"
                    if is_back(killed, back) and back is not None:
                        if self._keep_down:
                            self._kill_again(back, killed)
                        else:
                            with self._lock:
                                self.obs.back_at = time.time()
                                self.obs.after = asdict(back)
                            return
                self._stop.wait(POLL_INTERVAL_S)
        finally:
            # Requests count only while the controller is down.
            self._stop.set()
            self._requests.halt()

    def _kill_again(self, back: ControllerSighting, killed: set[int]) -> None:
        """Kill a controller Ray brought back, after checking its process is the controller's."""
        try:
            proc = psutil.Process(back.pid)
            if not is_controller_title((proc.cmdline() or [""])[0]):
                return  # the state API lags: this pid is not (or no longer) the controller
            proc.kill()
        except psutil.NoSuchProcess:
            pass  # it died on its own: as good as killed
        except psutil.AccessDenied as e:
            logger.error("%s: could not kill the restarted Serve controller %d: %s", NAME, back.pid, e)
            return
        killed.add(back.pid)
        with self._lock:
            self.obs.crash_loop_pids.append(back.pid)


# Watches by handle id, for every fault object of this process: revert and evidence may run on
# another instance than inject (get_fault makes a new one per call).
_WATCHES: dict[str, _OutageWatch] = {}


def controller_evidence(
    state: dict[str, Any],
    outage: dict[str, Any] | None,
    now: ControllerSighting | None,
    now_error: str,
    process_gone: bool,
    injected_at: float | None,
    reverted_at: float | None,
) -> Evidence:
    """Whether the kill bit and what it did, from the handle's state, the outage watch's observations
    (None where no watch ran in this process and revert recorded none), and one read of the controller now."""
    pid = int(state["pid"])
    killed_at = state.get("killed_at")
    outage = outage or {}
    back_at = state.get("back_at") or outage.get("back_at")
    after_record = state.get("controller_after") or outage.get("after")
    killed = killed_pids(
        {**state, "crash_loop_pids": state.get("crash_loop_pids") or outage.get("crash_loop_pids", [])}
    )
    # While a crash loop holds the controller down, a controller seen ALIVE now is one it is about to kill.
    holding = bool(state.get("keep_down")) and reverted_at is None
    back_now = now if is_back(killed, now) and not holding else None
    after = ControllerSighting(**after_record) if after_record else back_now
    seen_by = state.get("back_seen_by") or ("watcher" if outage.get("back_at") else None)
    restarts_before = state.get("num_restarts")
    restarts_after = after.num_restarts if after is not None else (now.num_restarts if now else None)
    restarted = after is not None or (
        restarts_before is not None and restarts_after is not None and restarts_after > restarts_before
    )
    # The kill bit when the recorded process is gone, or when Ray shows the controller restarted.
    bit = killed_at is not None and (state.get("pid_gone_at") is not None or process_gone or restarted)
    back = after is not None
    back_after_s = round(back_at - killed_at, 2) if back_at and killed_at else None
    symptoms: JsonObject = {
        "controller_actor_id_before": state["actor_id"],
        "controller_actor_id_after": after.actor_id if after else None,
        # Ray restarts an actor under its old id; a new id means a new controller was created.
        "same_actor": after.actor_id == state["actor_id"] if after else None,
        "controller_pid_before": pid,
        "controller_pid_after": after.pid if after else None,
        "num_restarts_before": restarts_before,
        "num_restarts_after": restarts_after,
        "controller_state_now": now.state if now else ("unknown" if now_error else "absent"),
        "controller_read_error": now_error,
        "process_gone": process_gone,
        "controller_back": back,
        "back_after_s": back_after_s,
        # "watcher": seen within a poll of its return; "revert": seen by a later revert, an upper bound.
        "back_seen_by": seen_by if back_at else None,
        "front_door_requests_during_outage": outage.get("sent"),
        "front_door_served_during_outage": outage.get("served"),
        "front_door_failed_during_outage": outage.get("failed"),
        "front_door_served_by": outage.get("served_by"),
        "front_door_errors": outage.get("errors", []),
        "watch_timed_out": outage.get("timed_out"),
        "kept_down_by_killing": len(killed) - 1,
    }
    timestamps = set_times(
        {
            "injected_at": injected_at,
            "pid_gone_at": state.get("pid_gone_at"),
            "controller_back_at": back_at,
            "reverted_at": reverted_at,
        }
    )
    return Evidence(bit=bit, reason=_reason(state, symptoms, bit), symptoms=symptoms, timestamps=timestamps)


def _reason(state: dict[str, Any], symptoms: JsonObject, bit: bool) -> str:
    pid = symptoms["controller_pid_before"]
    if state.get("killed_at") is None:
        return f"the Serve controller (pid {pid}) was never killed: the injector stopped before its SIGKILL"
    if not bit:
        return f"the Serve controller's process {pid} still runs after SIGKILL and Ray shows no restart"
    parts = [f"the Serve controller's process {pid} died"]
    if symptoms["controller_back"]:
        when = f" after {symptoms['back_after_s']:g} s" if symptoms["back_after_s"] is not None else ""
        bound = " (at most: seen by revert)" if symptoms["back_seen_by"] == "revert" else ""
        parts.append(f"Ray restarted it as pid {symptoms['controller_pid_after']}{when}{bound}")
    else:
        parts.append(f"it is not back yet (state {symptoms['controller_state_now']})")
    if symptoms["kept_down_by_killing"]:
        parts.append(
            f"kept down by killing it {symptoms['kept_down_by_killing']} more time(s) as Ray brought it back"
        )
    if symptoms["front_door_requests_during_outage"] is not None:
        parts.append(
            f"the front door served {symptoms['front_door_served_during_outage']} of "
            f"{symptoms['front_door_requests_during_outage']} requests sent meanwhile"
        )
    return "; ".join(parts)


@register
class KillServeController(TypedFault[KillServeControllerParams, ServeProcessEnvironment]):
    """SIGKILL the worker process of Ray Serve's controller; Ray restarts it, the data plane keeps serving."""

    name = NAME
    layer = Layer.RAY
    params_type = KillServeControllerParams

    def revert_wait(self, params: KillServeControllerParams) -> RevertWait:
        # A controller kept down can only come back once the revert stops the crash loop;
        # otherwise Ray restarts it at once and the deadline counts from the kill.
        return RevertWait(params.recover_timeout_s, "recover_timeout_s", from_inject=not params.keep_down)

    def _open(self, env: object) -> ServeProcessEnvironment:
        if not isinstance(env, ServeProcessEnvironment):
            raise capability_error(
                self.name,
                env,
                (
                    "the embedded local environment only (the controller's process must be on this host, "
                    "and it needs the environment's status)"
                ),
            )
        return env

    def _plan(self, env: ServeProcessEnvironment, params: KillServeControllerParams) -> Planned:
        env.connect_ray()
        status = env.status()
        seen = read_controllers(status.ray.dashboard_url)
        controller = alive_controller(seen)
        if controller is None:
            others = ", ".join(f"{s.actor_id[:12]} {s.state}" for s in seen if s.state != DEAD)
            raise ConfigError(
                f"{self.name}: no ALIVE Serve controller ({CONTROLLER_CLASS} {CONTROLLER_NAME!r} in namespace "
                f"{SERVE_NAMESPACE!r}) in Ray's state API: is Serve running?"
                + (f" (seen: {others})" if others else "")
            )
        created, title = controller_process(self.name, controller.pid)
        node = next((n.name for n in status.ray.nodes if n.node_id == controller.node_id), "") or "?"
        restarts = (
            "" if controller.num_restarts is None else f", restarted {controller.num_restarts} times so far"
        )
        outage = (
            "kill it again each time Ray brings it back, until revert (a crash loop); revert then waits up to "
            f"{params.recover_timeout_s:g} s for it to be ALIVE in a new process"
            if params.keep_down
            else f"Ray restarts it (max_restarts=-1); revert waits up to {params.recover_timeout_s:g} s from the "
            "kill for it to be ALIVE in a new process"
        )
        description = (
            f"SIGKILL the worker process (pid {controller.pid}, {title}) of Ray Serve's controller actor "
            f"{controller.actor_id[:12]} on node {node}{restarts}, as a crash would; the proxy and the replicas "
            f"keep serving the routes they hold meanwhile; {outage}"
        )
        state: JsonObject = {
            "actor_id": controller.actor_id,
            "pid": controller.pid,
            "create_time": created,
            "process_title": title,
            "node_id": controller.node_id,
            "node": node,
            "num_restarts": controller.num_restarts,
            "dashboard_url": status.ray.dashboard_url,
            "front_door_url": status.front_door.url,
            "model": status.model.name,
            "keep_down": params.keep_down,
        }
        targets = [f"ray-actor:{CONTROLLER_CLASS}:{controller.actor_id}", f"pid:{controller.pid}"]
        return Planned(description, targets, state)

    def _act(
        self,
        env: ServeProcessEnvironment,
        params: KillServeControllerParams,
        handle: FaultHandle,
        ledger: Ledger,
    ) -> None:
        pid, created = int(handle.state["pid"]), float(handle.state["create_time"])
        proc = same_process(pid, created)
        if proc is None:
            raise FaultError(
                f"{self.name}: the controller's process {pid} is gone since the plan; nothing was killed"
            )
        try:
            proc.kill()
        except psutil.NoSuchProcess as e:
            raise FaultError(f"{self.name}: the controller's process {pid} ended before SIGKILL") from e
        except psutil.AccessDenied as e:
            raise FaultError(f"{self.name}: could not SIGKILL the controller's process {pid}: {e}") from e
        handle.injected_at = time.time()
        handle.state["killed_at"] = handle.injected_at
        ledger.record(handle)
        # Started at once: the front door's requests count from the kill on.
        watch = _OutageWatch(
            handle.id, handle.state, handle.injected_at + params.recover_timeout_s, params.keep_down
        )
        _WATCHES[handle.id] = watch
        watch.start()
        handle.state["pid_gone_at"] = wait_until(
            lambda: same_process(pid, created) is None, KILL_CONFIRM_S, 0.05
        )
        ledger.record(handle)
        logger.info(
            "%s [%s]: SIGKILLed the Serve controller's process %d (%s)",
            self.name,
            handle.id,
            pid,
            "gone" if handle.state["pid_gone_at"] else "still there",
        )

    def _undo(
        self,
        env: ServeProcessEnvironment,
        params: KillServeControllerParams,
        handle: FaultHandle,
        ledger: Ledger,
    ) -> None:
        state = handle.state
        if state.get("back_at"):
            return  # a second revert: the return is recorded already
        pid, created = int(state["pid"]), float(state["create_time"])
        watch = _WATCHES.pop(handle.id, None)
        if state.get("killed_at") is None and same_process(pid, created) is not None:
            # The injector stopped between its ledger entry and the kill: nothing to wait for.
            state["not_killed"] = True
            ledger.record(handle)
            return
        # Without a recorded kill (a crash right after it), the entry's creation bounds it from below.
        killed_at = float(state.get("killed_at") or handle.created_at)
        # A controller kept down may only come back once the crash loop has stopped, which is now
        # (or was, with the process that ran it).
        deadline = (time.time() if params.keep_down else killed_at) + params.recover_timeout_s
        if watch is not None:
            outage = watch.finish()
            state["outage"] = outage
            state["crash_loop_pids"] = outage["crash_loop_pids"]
            if outage["back_at"]:
                state.update(
                    back_at=outage["back_at"], back_seen_by="watcher", controller_after=outage["after"]
                )
        if not state.get("back_at"):
            env.connect_ray()
            self._wait_back(state, deadline)
        ledger.record(handle)
        if not state.get("back_at"):
            timeout = params.recover_timeout_s
            since = "the revert" if params.keep_down else "the kill"
            seen = state.get("last_seen") or (state.get("outage") or {}).get("last_state") or "unknown"
            raise PlatformDidNotRecover(
                f"{self.name}: Serve's controller was not ALIVE in a new process within {timeout:g} s of {since} "
                f"(last seen: {seen}); the ledger entry stays for `inferchaos cleanup`"
            )
        logger.info(
            "%s [%s]: the Serve controller is back as pid %s, %.2f s after the kill (seen by %s)",
            self.name,
            handle.id,
            state["controller_after"]["pid"],
            state["back_at"] - killed_at,
            state["back_seen_by"],
        )

    def _wait_back(self, state: dict[str, Any], deadline: float) -> None:
        """Read the controller until it is back or ``deadline`` has passed (at least once); record what was seen."""
        killed = killed_pids(state)
        while True:
            try:
                seen = read_controllers(state["dashboard_url"])
            except EnvironmentError_ as e:
                state["last_seen"] = f"unreadable: {e}"
            else:
                now = live_controller(seen)
                state["last_seen"] = now.state if now else "absent"
                back = alive_controller(seen)
                if is_back(killed, back) and back is not None:
                    state.update(back_at=time.time(), back_seen_by="revert", controller_after=asdict(back))
                    return
            if time.time() + POLL_INTERVAL_S >= deadline:
                return
            time.sleep(POLL_INTERVAL_S)

    def _evidence(
        self, env: ServeProcessEnvironment, params: KillServeControllerParams, handle: FaultHandle
    ) -> Evidence:
        state = handle.state
        watch = _WATCHES.get(handle.id)
        outage = watch.snapshot() if watch is not None else state.get("outage")
        now: ControllerSighting | None = None
        now_error = ""
        try:
            env.connect_ray()
            now = live_controller(read_controllers(state["dashboard_url"]))
        except EnvironmentError_ as e:
            now_error = str(e)
        gone = same_process(int(state["pid"]), float(state["create_time"])) is None
        return controller_evidence(
            state, outage, now, now_error, gone, handle.injected_at, handle.reverted_at
        )
