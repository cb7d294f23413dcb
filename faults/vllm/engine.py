"""Engine death: SIGKILL a replica's EngineCore; the API server then answers 503 and exits.

This is what a CUDA fault, an OOM in the engine or a segfault in a kernel looks like from
outside. Serve's health check notices and replaces the replica; revert makes sure it does,
by asking Serve to replace the replica if it has not already.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import httpx
import psutil

from inferchaos.errors import FaultError
from inferchaos.faults.base import (
    Evidence,
    FaultHandle,
    JsonObject,
    Planned,
    replica_name,
    set_times,
    wait_until,
)
from inferchaos.faults.ledger import Ledger
from inferchaos.faults.local_process import LocalProcessFault
from inferchaos.faults.registry import register
from inferchaos.faults.vllm.targets import healthy_replica
from inferchaos.layers import Layer
from inferchaos.primitives import http
from inferchaos.primitives.capabilities import RayProcessEnvironment
from inferchaos.primitives.replica_slots import ReplicaRecord

logger = logging.getLogger(__name__)

NAME = "vllm.kill_engine"
ENGINE_PROCESS_NAME = "VLLM::EngineCore"
# The last argument of a process multiprocessing started with its spawn method.
SPAWNED_MARKER = "--multiprocessing-fork"


@dataclass
class KillEngineParams:
    """The replica (number or name) whose engine dies, and how long to watch its server go."""

    replica: int | str = 0
    allow_total_outage: bool = False
    wait_exit_s: float = 30.0


def _health_status(url: str) -> int | None:
    """HTTP status of /health, or None when nothing answers."""
    try:
        return http.get(f"{url}/health", timeout=2.0).status_code
    except httpx.HTTPError:
        return None


def find_engine_core(server_pid: int) -> psutil.Process:
    """The EngineCore process under a vLLM API server.

    vLLM titles it ``VLLM::EngineCore`` with setproctitle, which it treats as optional: an
    EngineCore whose title never took keeps the command line multiprocessing spawned it with.
    It is then the server's one child started by ``spawn`` (``--multiprocessing-fork``; the
    resource tracker is not).
    """
    try:
        children = psutil.Process(server_pid).children(recursive=True)
    except psutil.NoSuchProcess as e:
        raise FaultError(f"the vLLM server pid {server_pid} is gone") from e
    spawned = []
    for child in children:
        try:
            cmdline = child.cmdline()
            if child.name() == ENGINE_PROCESS_NAME or ENGINE_PROCESS_NAME in " ".join(cmdline):
                return child
            if child.ppid() == server_pid and SPAWNED_MARKER in cmdline:
                spawned.append(child)
        except psutil.NoSuchProcess:
            continue
    if len(spawned) == 1:
        logger.info("vLLM server pid %d: its EngineCore is untitled pid %d", server_pid, spawned[0].pid)
        return spawned[0]
    raise FaultError(f"no {ENGINE_PROCESS_NAME} process under vLLM server pid {server_pid}")


@register
class KillEngine(LocalProcessFault[KillEngineParams]):
    """SIGKILL the EngineCore process of one vLLM replica."""

    name = NAME
    aliases = ("kill_engine",)
    layer = Layer.VLLM
    params_type = KillEngineParams

    def _plan(self, env: RayProcessEnvironment, params: KillEngineParams) -> Planned:
        target, others = healthy_replica(
            env, self.name, replica_name(params.replica), params.allow_total_outage, "kill"
        )
        engine = find_engine_core(target.vllm_pid)
        description = (
            f"SIGKILL the EngineCore (pid {engine.pid}) of {target.name}; its server answers 503 and exits; "
            f"{', '.join(r.name for r in others) or 'no replica'} keeps serving; Serve replaces {target.name}"
        )
        state: JsonObject = {
            "replica": target.name,
            "url": target.url,
            "server_pid": target.vllm_pid,
            "engine_pid": engine.pid,
            "actor_pid": target.actor_pid,
            "started_at_before": target.started_at,
        }
        return Planned(description, [f"replica:{target.name}", f"pid:{engine.pid}"], state)

    def _act(
        self, env: RayProcessEnvironment, params: KillEngineParams, handle: FaultHandle, ledger: Ledger
    ) -> None:
        engine = find_engine_core(handle.state["server_pid"])
        if engine.pid != handle.state["engine_pid"]:
            raise FaultError(f"{self.name}: {handle.state['replica']}'s engine changed since the plan")
        engine.kill()
        handle.injected_at = time.time()
        ledger.record(handle)
        url, server_pid = handle.state["url"], handle.state["server_pid"]
        # The server notices its engine is gone, answers 503 for a moment, then exits.
        handle.state["unhealthy_at"] = wait_until(lambda: _health_status(url) != 200, params.wait_exit_s, 0.1)
        handle.state["server_exited_at"] = wait_until(
            lambda: not psutil.pid_exists(server_pid) or _is_zombie(server_pid), params.wait_exit_s, 0.2
        )

    def _undo(
        self, env: RayProcessEnvironment, params: KillEngineParams, handle: FaultHandle, ledger: Ledger
    ) -> None:
        replaced = self._replacement(env, handle)
        if replaced is None and psutil.pid_exists(handle.state["actor_pid"]):
            # Serve has not replaced the replica yet: end its actor so Serve must.
            import ray

            env.connect_ray()
            from ray.util.state import list_actors

            for actor in list_actors(
                filters=[("pid", "=", handle.state["actor_pid"])], raise_on_missing_output=False
            ):
                if actor.state == "ALIVE" and actor.name:
                    try:
                        replica = ray.get_actor(actor.name, namespace=actor.ray_namespace)
                    except ValueError:
                        continue  # it died between the listing and now: Serve replaces it anyway
                    ray.kill(replica)

    def _replacement(self, env: RayProcessEnvironment, handle: FaultHandle) -> ReplicaRecord | None:
        for record in env.replica_records():
            if (
                record.name == handle.state["replica"]
                and record.started_at > handle.state["started_at_before"]
            ):
                return record
        return None

    def _evidence(
        self, env: RayProcessEnvironment, params: KillEngineParams, handle: FaultHandle
    ) -> Evidence:
        replacement = self._replacement(env, handle)
        unhealthy_at = handle.state.get("unhealthy_at")
        exited_at = handle.state.get("server_exited_at")
        bit = unhealthy_at is not None and exited_at is not None
        healthy_again = (
            replacement is not None
            and replacement.state == "healthy"
            and _health_status(replacement.url) == 200
        )
        timestamps = set_times(
            {
                "injected_at": handle.injected_at,
                "unhealthy_at": unhealthy_at,
                "server_exited_at": exited_at,
                "reverted_at": handle.reverted_at,
                "replica_healthy_at": replacement.ready_at if healthy_again and replacement else None,
            }
        )
        symptoms = {
            "replica": handle.state["replica"],
            "engine_pid": handle.state["engine_pid"],
            "health_failed_after_s": round(unhealthy_at - handle.injected_at, 2)
            if unhealthy_at and handle.injected_at
            else None,
            "server_exited_after_s": round(exited_at - handle.injected_at, 2)
            if exited_at and handle.injected_at
            else None,
            "replica_replaced": replacement is not None,
            "replica_healthy_again": healthy_again,
        }
        reason = (
            f"{handle.state['replica']}'s engine died: /health failed and the server exited"
            if bit
            else f"{handle.state['replica']}'s server kept answering after its engine was killed"
        )
        return Evidence(bit=bit, reason=reason, symptoms=symptoms, timestamps=timestamps)


def _is_zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
