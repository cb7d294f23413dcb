"""Actor leak: an application bug that keeps creating resource-holding actors and never kills them.

The leaky workload runs in the background of the injecting process, creating detached actors
of a named class at a given rate, so the leak outlives a crashed runner just as a real one
outlives its job. Every actor id is written to the ledger as soon as the actor exists, and
every actor is named ``ic-leak-<handle>-<n>``, so revert (or `inferchaos cleanup` after a
crash) kills exactly the actors the leak created, and no others.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from inferchaos.errors import ConfigError
from inferchaos.faults.base import Evidence, FaultHandle, JsonObject, Planned, set_times, wait_until
from inferchaos.faults.ledger import Ledger
from inferchaos.faults.local_process import LocalProcessFault, free_gpus
from inferchaos.faults.registry import register
from inferchaos.layers import Layer
from inferchaos.primitives.capabilities import RayProcessEnvironment

if TYPE_CHECKING:
    from ray import ObjectRef
    from ray.util.state.common import ActorState

logger = logging.getLogger(__name__)

NAME = "ray.leak_actors"
LEAK_NAMESPACE = "inferchaos-leak"
DEFAULT_MAX_ACTORS = 16


@dataclass
class LeakParams:
    """The leaked actors: their class, what each holds, how fast they come, how many (default: the free GPUs + 1)."""

    class_name: str = "LeakyWorker"
    num_gpus: float = 1.0
    num_cpus: float = 0.0
    rate_per_s: float = 2.0
    count: int | None = None
    max_actors: int = DEFAULT_MAX_ACTORS
    # How long inject waits for the leaked actors to take the GPUs.
    settle_s: float = 20.0

    def __post_init__(self) -> None:
        if self.num_gpus < 0 or self.num_cpus < 0 or (self.num_gpus == 0 and self.num_cpus == 0):
            raise ConfigError(f"{NAME}: each leaked actor must hold some num_gpus or num_cpus")
        if self.rate_per_s <= 0:
            raise ConfigError(f"{NAME}: rate_per_s must be positive, got {self.rate_per_s}")
        if self.count is not None and self.count < 1:
            raise ConfigError(f"{NAME}: count must be at least 1, got {self.count}")

    @property
    def actors(self) -> int:
        """How many actors the leak creates (``count`` once the plan has sized it)."""
        if self.count is None:
            raise ConfigError(f"{NAME}: count was not sized before the leak started")
        return self.count


class LeakyWorker:
    """What a leaked actor is: it holds its resources and does nothing."""

    def ping(self) -> str:
        return "leaked"


def _gpu_probe_task() -> float:
    """A task that needs one GPU: it pends while the leak holds them all."""
    return time.time()


def _actor_name(handle_id: str, index: int) -> str:
    return f"ic-leak-{handle_id}-{index}"


def _kill_actor(actor_id: str) -> bool:
    """Kill one actor by id; False when it is already gone."""
    import ray
    from ray.util.state import get_actor

    info = get_actor(actor_id)
    if info is None or info.state == "DEAD" or info.name is None:
        return False
    try:
        ray.kill(ray.get_actor(info.name, namespace=LEAK_NAMESPACE), no_restart=True)
    except ValueError:
        return False  # died between the lookup and the kill
    return True


@register
class LeakActors(LocalProcessFault[LeakParams]):
    """Create actors of one class at a rate, holding GPUs/CPUs, and never kill them."""

    name = NAME
    aliases = ("leak_actors",)
    layer = Layer.RAY
    params_type = LeakParams

    def __init__(self) -> None:
        self._threads: dict[str, tuple[threading.Thread, threading.Event]] = {}
        self._probe_refs: dict[str, ObjectRef[float]] = {}

    def _plan(self, env: RayProcessEnvironment, params: LeakParams) -> Planned:
        if params.count is None:
            # Enough to take every free GPU, plus one that must pend: the leak's signature.
            free = free_gpus(env)
            count = int(free // params.num_gpus) + 1 if params.num_gpus else 4
            params = LeakParams(**{**asdict(params), "count": count})
        p = params
        if p.actors > p.max_actors:
            raise ConfigError(
                f"{self.name}: {p.actors} actors exceed max_actors {p.max_actors} (blast radius)"
            )
        description = (
            f"create {p.actors} detached actors of class {p.class_name} at {p.rate_per_s:g}/s, "
            f"each holding {p.num_gpus:g} GPU and {p.num_cpus:g} CPU, and never kill them; "
            "revert kills exactly those actors"
        )
        targets = [f"ray-actors:{p.class_name}x{p.actors}", f"ray-namespace:{LEAK_NAMESPACE}"]
        return Planned(description, targets, {"actor_ids": []}, asdict(p))

    def _act(
        self, env: RayProcessEnvironment, params: LeakParams, handle: FaultHandle, ledger: Ledger
    ) -> None:
        env.connect_ray()
        stop = threading.Event()
        thread = threading.Thread(
            target=self._leak, args=(handle, params, ledger, stop), name=f"leak-{handle.id}", daemon=True
        )
        handle.injected_at = time.time()
        ledger.record(handle)
        thread.start()
        self._threads[handle.id] = (thread, stop)
        # Wait (bounded) until the leaked actors that can get resources are ALIVE (their worker
        # processes take seconds to start), then leave a GPU task pending behind them.
        free = free_gpus(env)
        handle.state["gpus_free_before"] = free
        count = params.actors
        can_start = min(count, int(free // params.num_gpus)) if params.num_gpus else count
        budget = params.settle_s + count / params.rate_per_s
        handle.state["leak_settled_at"] = wait_until(lambda: self._alive(handle) >= can_start, budget, 0.5)
        if params.num_gpus > 0:
            handle.state["gpus_exhausted_at"] = wait_until(lambda: free_gpus(env) == 0, params.settle_s, 0.5)
            self._submit_probe_task(handle)
            # The state API learns of a task from events flushed about once a second.
            wait_until(lambda: self._task_state(handle) == "PENDING_NODE_ASSIGNMENT", 10.0, 0.5)

    def _leaked(self, handle: FaultHandle) -> list[ActorState]:
        from ray.util.state import list_actors

        prefix = f"ic-leak-{handle.id}-"
        actors = list_actors(
            filters=[("ray_namespace", "=", LEAK_NAMESPACE)], limit=10_000, raise_on_missing_output=False
        )
        return [a for a in actors if (a.name or "").startswith(prefix)]

    def _alive(self, handle: FaultHandle) -> int:
        return sum(1 for a in self._leaked(handle) if a.state == "ALIVE")

    def _task_state(self, handle: FaultHandle) -> str | None:
        from ray.util.state import list_tasks

        task_id = handle.state.get("probe_task_id")
        if not task_id:
            return None
        tasks = list_tasks(filters=[("task_id", "=", task_id)], raise_on_missing_output=False)
        return tasks[0].state if tasks else "UNKNOWN"

    def _leak(self, handle: FaultHandle, p: LeakParams, ledger: Ledger, stop: threading.Event) -> None:
        import ray

        leaky = type(p.class_name, (LeakyWorker,), {"__module__": __name__})
        remote_cls: Any = ray.remote(num_gpus=p.num_gpus, num_cpus=p.num_cpus)(leaky)
        for index in range(p.actors):
            if stop.is_set():
                return
            actor = remote_cls.options(
                name=_actor_name(handle.id, index), namespace=LEAK_NAMESPACE, lifetime="detached"
            ).remote()
            handle.state["actor_ids"].append(actor._actor_id.hex())
            ledger.record(handle)
            stop.wait(1.0 / p.rate_per_s)

    def _submit_probe_task(self, handle: FaultHandle) -> None:
        import ray

        ref = ray.remote(num_gpus=1, num_cpus=0)(_gpu_probe_task).remote()
        self._probe_refs[handle.id] = ref
        handle.state["probe_task_id"] = ref.task_id().hex()
        handle.state["probe_submitted_at"] = time.time()

    def _undo(
        self, env: RayProcessEnvironment, params: LeakParams, handle: FaultHandle, ledger: Ledger
    ) -> None:
        env.connect_ray()
        thread_stop = self._threads.pop(handle.id, None)
        if thread_stop is not None:
            thread, stop = thread_stop
            stop.set()
            thread.join(timeout=10)
        # Ids from the ledger, plus any actor named for this handle whose id a crash lost, by
        # the order they were created in.
        order = {actor_id: n for n, actor_id in enumerate(handle.state.get("actor_ids", []))}
        prefix = f"ic-leak-{handle.id}-"
        for actor in self._leaked(handle):
            if actor.state != "DEAD":
                order.setdefault(actor.actor_id, int((actor.name or "").removeprefix(prefix)))
        # Newest first: the newest are the ones still pending, and killing an alive one first
        # frees a GPU that Ray can grant to a pending one's lease while the kill is on its way
        # (otherwise a GPU can stay held after the revert).
        newest_first = sorted(order, key=order.__getitem__, reverse=True)
        killed = [actor_id for actor_id in newest_first if _kill_actor(actor_id)]
        if wait_until(lambda: all(a.state == "DEAD" for a in self._leaked(handle)), 10.0, 0.5) is None:
            logger.warning(
                "%s: some leaked actors of %s are not DEAD 10 s after the kill", self.name, handle.id
            )
        handle.reverted_at = handle.reverted_at or time.time()
        handle.state["killed_actor_ids"] = sorted(set(handle.state.get("killed_actor_ids", [])) | set(killed))
        ledger.record(handle)

    def probe_task_ran(self, handle: FaultHandle, timeout_s: float) -> float | None:
        """Wait for the GPU probe task; the time it ran, or None if it still pends."""
        import ray
        from ray.exceptions import GetTimeoutError

        ref = self._probe_refs.get(handle.id)
        if ref is None:
            return None
        try:
            return float(ray.get(ref, timeout=timeout_s))
        except GetTimeoutError:
            return None

    def _evidence(self, env: RayProcessEnvironment, params: LeakParams, handle: FaultHandle) -> Evidence:
        env.connect_ray()
        leaked = self._leaked(handle)
        alive = sum(1 for a in leaked if a.state == "ALIVE")
        pending_actors = sum(1 for a in leaked if a.state in ("PENDING_CREATION", "DEPENDENCIES_UNREADY"))
        probe_state = self._task_state(handle)
        gpus_free = free_gpus(env)
        exhausted = handle.state.get("gpus_exhausted_at") is not None
        # What a user sees is the GPUs gone and GPU work pending. A leaked actor whose GPU Ray
        # granted may still be starting its worker process (PENDING_CREATION on a slow machine,
        # with the free GPUs already at 0), so it counts as holding once the GPUs were taken.
        took = exhausted and float(handle.state.get("gpus_free_before", 0.0)) > 0
        holding = alive >= 1 or (took and pending_actors >= 1)
        bit = holding and (exhausted or params.num_gpus == 0)
        symptoms: JsonObject = {
            "class": params.class_name,
            "actors_created": len(handle.state.get("actor_ids", [])),
            "actors_alive": alive,
            "actors_pending_creation": pending_actors,
            "gpus_free_now": gpus_free,
            "gpus_exhausted": exhausted,
            "probe_task_state": probe_state,
        }
        timestamps = set_times(
            {
                "injected_at": handle.injected_at,
                "gpus_exhausted_at": handle.state.get("gpus_exhausted_at"),
                "reverted_at": handle.reverted_at,
            }
        )
        starting = f" ({pending_actors} more starting)" if pending_actors else ""
        reason = (
            f"{alive} {params.class_name} actors ALIVE{starting}, free GPUs fell to 0, GPU task {probe_state}"
            if bit
            else "the leaked actors did not take the free GPUs"
        )
        return Evidence(bit=bit, reason=reason, symptoms=symptoms, timestamps=timestamps)
