"""Hung engine: SIGSTOP a replica's EngineCore (or its API server, or its whole process group).

A gray failure: vLLM's ``/health`` only checks an ``errored`` flag, so with its EngineCore
stopped the API server still answers ``/health`` 200 and ``/metrics``, accepts requests, and
never produces a token. Serve's health check, which asks ``/health``, keeps routing to it.
``what: server`` stops the API server alone (every request to it, ``/health`` included,
hangs) and ``what: all`` every process of the server's process group; there ``/health``
times out, so Serve replaces the replica after a few health checks and ends the frozen
processes, and revert then finds nothing left to resume.

The exact pids are chosen at plan time and recorded with their start times, so revert (and
`inferchaos cleanup` in a later process, from the ledger alone) sends SIGCONT to those
processes and never to a process that reused one of their pids. ``duration_s`` resumes them
by a timer in the injecting process; the timer dies with that process, so after a crash the
processes stay stopped until `inferchaos cleanup` reverts the entry.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any

import httpx

from inferchaos.errors import ConfigError, FaultError, ProbeError
from inferchaos.faults.base import Evidence, FaultHandle, JsonObject, Planned, replica_name, set_times
from inferchaos.faults.ledger import Ledger
from inferchaos.faults.local_process import LocalProcessFault
from inferchaos.faults.registry import register
from inferchaos.faults.vllm.replica_processes import (
    GONE,
    ProcessEntry,
    entry_json,
    pid_list,
    process_state,
    processes_to_stop,
    records,
    same_process,
    signal_recorded,
    state_of,
    wait_stopped,
)
from inferchaos.faults.vllm.targets import healthy_replica
from inferchaos.layers import Layer
from inferchaos.params import InvalidValue, seconds
from inferchaos.primitives import http
from inferchaos.primitives.capabilities import RayProcessEnvironment
from inferchaos.primitives.replica_slots import ReplicaRecord
from inferchaos.primitives.vllm_metrics import parse_metrics

logger = logging.getLogger(__name__)

NAME = "vllm.hang_engine"
# What can be frozen, and how messages call it.
WHAT = {"engine": "EngineCore", "server": "API server", "all": "vLLM process group"}
# How long a read of /health or /metrics may take: a stopped API server accepts the
# connection (the kernel's backlog does) and never answers, so every read needs a bound.
HTTP_TIMEOUT_S = 3.0
# How long inject waits to see every stopped process in state T: SIGSTOP is delivered
# asynchronously, when the process next runs in the kernel.
STOP_CONFIRM_S = 5.0


@dataclass
class HangEngineParams:
    """The replica (number or name), what of it is frozen, for how long (None: until revert)."""

    replica: int | str = 0
    what: str = "engine"
    duration_s: float | None = None
    allow_total_outage: bool = False

    def __post_init__(self) -> None:
        if self.what not in WHAT:
            raise InvalidValue("what", f"must be one of {', '.join(WHAT)}; got {self.what!r}")
        if self.duration_s is not None:
            seconds(self.duration_s, "duration_s")


def read_health(url: str) -> tuple[int | None, str]:
    """The status of ``url``/health, or None and what went wrong (never raises)."""
    try:
        return http.get(f"{url}/health", timeout=HTTP_TIMEOUT_S).status_code, ""
    except httpx.TimeoutException:
        return None, f"/health did not answer within {HTTP_TIMEOUT_S:g} s"
    except httpx.HTTPError as e:
        return None, f"/health could not be read: {e}"


def read_progress(metrics_url: str) -> JsonObject:
    """Generated tokens so far and requests in flight from a replica's /metrics, or ``error`` (never raises)."""
    try:
        response = http.get(metrics_url, timeout=HTTP_TIMEOUT_S)
        response.raise_for_status()
        snapshot = parse_metrics(response.text)
    except httpx.TimeoutException:
        return {"error": f"/metrics did not answer within {HTTP_TIMEOUT_S:g} s"}
    except (httpx.HTTPError, ProbeError) as e:
        return {"error": f"/metrics could not be read: {e}"}
    return {
        "generation_tokens_total": snapshot.generation_tokens_total,
        "running": snapshot.running,
        "waiting": snapshot.waiting,
        "read_at": time.time(),
    }


@dataclass
class _Resumer:
    """The timer of one injection with ``duration_s``, and when it resumed the processes."""

    timer: threading.Timer
    resumed_at: float | None = None


# Timers by handle id, for every fault object of this process: revert may be called on
# another instance than inject (get_fault makes a new one per call). The lock makes "the
# timer resumes" and "revert cancels the timer" exclusive, so each knows what the other did.
_RESUMERS: dict[str, _Resumer] = {}
_RESUMERS_LOCK = threading.Lock()


def _resume_on_time(handle_id: str, replica: str, entries: list[ProcessEntry]) -> None:
    """The timer's work: resume the processes unless revert came first.

    It neither writes the ledger nor touches the handle: the injecting thread may be writing
    the same entry at this moment. Evidence and revert read its time from ``_RESUMERS`` in
    this process, and from the schedule in the handle in another one.
    """
    with _RESUMERS_LOCK:
        resumer = _RESUMERS.get(handle_id)
        if resumer is None:
            return
        sent, gone, failed = signal_recorded(entries, signal.SIGCONT)
        if not failed:
            resumer.resumed_at = time.time()
    if failed:
        # Left for revert, which tries again and fails loudly: the ledger entry stays.
        logger.error("%s [%s]: %s: could not resume %s", NAME, handle_id, replica, "; ".join(failed))
        return
    logger.info(
        "%s [%s]: %s: duration over, resumed pids %s (gone: %s)",
        NAME,
        handle_id,
        replica,
        pid_list(sent),
        pid_list(gone),
    )


@register
class HangEngine(LocalProcessFault[HangEngineParams]):
    """SIGSTOP one vLLM replica's EngineCore (or API server, or process group): hung but healthy."""

    name = NAME
    layer = Layer.VLLM
    params_type = HangEngineParams

    def _plan(self, env: RayProcessEnvironment, params: HangEngineParams) -> Planned:
        target, others = self._replica(env, params)
        try:
            found = records(processes_to_stop(params.what, target.vllm_pid))
        except FaultError as e:
            # Listed healthy, yet its server is gone: Serve is replacing it. As for a replica
            # listed starting, nothing is touched and the run ends before it begins.
            raise ConfigError(f"{self.name}: {target.name} is being replaced ({e}); nothing to freeze") from e
        if not found:
            raise ConfigError(f"{self.name}: {target.name}: every process to stop ended while it was read")
        pids = [int(r["pid"]) for r in found]
        if os.getpid() in pids:
            raise ConfigError(
                f"{self.name}: {target.name}: refusing to stop this process itself (pid {os.getpid()})"
            )
        already = [pid for pid in pids if process_state(pid) == "T"]
        if already:
            raise ConfigError(
                f"{self.name}: {target.name}: pids {pid_list(already)} are stopped already; "
                f"revert the hang that stopped them first (`inferchaos cleanup`)"
            )
        state: JsonObject = {
            "replica": target.name,
            "what": params.what,
            "url": target.url,
            "metrics_url": target.metrics_url,
            "server_pid": target.vllm_pid,
            "processes": [entry_json(e) for e in found],
        }
        targets = [f"replica:{target.name}", *(f"pid:{pid}" for pid in pids)]
        return Planned(self._describe(target, params, pids, others), targets, state)

    def _replica(
        self, env: RayProcessEnvironment, params: HangEngineParams
    ) -> tuple[ReplicaRecord, list[ReplicaRecord]]:
        """The healthy replica ``params`` names and the other healthy ones; ConfigError otherwise."""
        return healthy_replica(
            env, self.name, replica_name(params.replica), params.allow_total_outage, "freeze"
        )

    def _describe(
        self, target: ReplicaRecord, params: HangEngineParams, pids: list[int], others: list[ReplicaRecord]
    ) -> str:
        if params.what == "engine":
            effect = (
                f"SIGSTOP the EngineCore of {target.name} and its children (pids {pid_list(pids)}): its API "
                f"server (pid {target.vllm_pid}) keeps answering /health 200 while no token is generated"
            )
        elif params.what == "server":
            effect = (
                f"SIGSTOP the API server of {target.name} (pid {pid_list(pids)}): /health and every request "
                f"to it hang; Serve replaces {target.name} once its health checks time out"
            )
        else:
            effect = (
                f"SIGSTOP every process of {target.name}'s vLLM process group {target.vllm_pid} "
                f"(pids {pid_list(pids)}): /health hangs; Serve replaces {target.name} once its health checks time out"
            )
        until = (
            f"resumed after {params.duration_s:g} s or by revert"
            if params.duration_s
            else "frozen until revert"
        )
        return f"{effect}; {', '.join(r.name for r in others) or 'no replica'} keeps serving; {until}"

    def _act(
        self, env: RayProcessEnvironment, params: HangEngineParams, handle: FaultHandle, ledger: Ledger
    ) -> None:
        replica, entries = handle.state["replica"], handle.state["processes"]
        changed = [f"{e['pid']} ({e['name']})" for e in entries if same_process(e) is None]
        if changed:
            raise FaultError(
                f"{self.name}: {replica}: pids {', '.join(changed)} are gone since the plan; nothing was stopped"
            )
        stopped, gone, failed = signal_recorded(entries, signal.SIGSTOP)
        if gone or failed:
            # Leave nothing half-frozen: an injection either stops every planned process or none.
            signal_recorded([e for e in entries if e["pid"] in stopped], signal.SIGCONT)
            problems = [f"pid {pid} is gone" for pid in gone] + failed
            raise FaultError(
                f"{self.name}: {replica}: could not stop {'; '.join(problems)}; resumed pids {pid_list(stopped)} again"
            )
        handle.injected_at = time.time()
        states = wait_stopped(entries, STOP_CONFIRM_S)
        handle.state["states_at_inject"] = states
        handle.state["all_stopped_at_inject"] = all(s == "T" for s in states.values())
        if not handle.state["all_stopped_at_inject"]:
            logger.warning(
                "%s [%s]: %s: not every pid is stopped %.0f s after SIGSTOP: %s",
                self.name,
                handle.id,
                replica,
                STOP_CONFIRM_S,
                states,
            )
        if params.duration_s is not None:
            handle.state["resume_due_at"] = handle.injected_at + params.duration_s
            self._schedule_resume(handle, handle.state["resume_due_at"] - time.time())
        ledger.record(handle)
        logger.info(
            "%s [%s]: %s: stopped pids %s (states %s)",
            self.name,
            handle.id,
            replica,
            pid_list(stopped),
            states,
        )
        handle.state["metrics_at_inject"] = read_progress(handle.state["metrics_url"])

    def _schedule_resume(self, handle: FaultHandle, delay_s: float) -> None:
        # Copies of what the timer needs: the handle itself stays the injecting thread's.
        entries = [dict(e) for e in handle.state["processes"]]
        timer = threading.Timer(
            max(0.0, delay_s), _resume_on_time, (handle.id, handle.state["replica"], entries)
        )
        timer.daemon = True
        timer.name = f"hang-engine-resume-{handle.id}"
        with _RESUMERS_LOCK:
            _RESUMERS[handle.id] = _Resumer(timer)
        timer.start()

    def _undo(
        self, env: RayProcessEnvironment, params: HangEngineParams, handle: FaultHandle, ledger: Ledger
    ) -> None:
        replica, entries = handle.state["replica"], handle.state["processes"]
        with _RESUMERS_LOCK:
            resumer = _RESUMERS.pop(handle.id, None)
            if resumer is not None:
                resumer.timer.cancel()
            stopped_before = [int(e["pid"]) for e in entries if state_of(e) == "T"]
            sent, gone, failed = signal_recorded(entries, signal.SIGCONT)
        if failed:
            raise FaultError(f"{self.name}: {replica}: could not resume {'; '.join(failed)}")
        now = time.time()
        if "resumed_at" not in handle.state:
            due = handle.state.get("resume_due_at")
            if resumer is not None and resumer.resumed_at is not None:
                handle.state.update(resumed_at=resumer.resumed_at, resumed_by="timer")
            elif stopped_before:
                handle.state.update(resumed_at=now, resumed_by="revert")
            elif due is not None and due <= now:
                # Resumed by the timer of an injecting process that has gone since.
                handle.state.update(resumed_at=due, resumed_by="timer")
        logger.info(
            "%s [%s]: %s: sent SIGCONT to pids %s (stopped until now: %s; gone or reused: %s)",
            self.name,
            handle.id,
            replica,
            pid_list(sent),
            pid_list(stopped_before),
            pid_list(gone),
        )

    def _resumed(self, handle: FaultHandle, states: dict[str, str]) -> tuple[float | None, str | None]:
        """When the processes were resumed and by what (timer, revert), or (None, None) while they hang."""
        if handle.state.get("resumed_at"):
            return float(handle.state["resumed_at"]), handle.state.get("resumed_by")
        with _RESUMERS_LOCK:
            resumer = _RESUMERS.get(handle.id)
            if resumer is not None and resumer.resumed_at is not None:
                return resumer.resumed_at, "timer"
        due = handle.state.get("resume_due_at")
        if due is not None and due <= time.time() and "T" not in states.values():
            return float(due), "timer"
        return None, None

    def _evidence(
        self, env: RayProcessEnvironment, params: HangEngineParams, handle: FaultHandle
    ) -> Evidence:
        state = handle.state
        replica, what = state["replica"], state["what"]
        entries = state["processes"]
        pids = [int(e["pid"]) for e in entries]
        states = {str(e["pid"]): state_of(e) for e in entries}
        resumed_at, resumed_by = self._resumed(handle, states)
        hanging = resumed_at is None and handle.reverted_at is None
        stopped_at_inject = bool(state.get("all_stopped_at_inject"))
        gone = [int(pid) for pid, s in states.items() if s == GONE]
        # While the hang should hold, a recorded process that runs again means it did not.
        running = [int(pid) for pid, s in states.items() if s not in ("T", GONE)] if hanging else []
        bit = stopped_at_inject and not running
        health_status, health_error = read_health(state["url"])
        before = state.get("metrics_at_inject") or {}
        now = read_progress(state["metrics_url"])
        delta = (
            now["generation_tokens_total"] - before["generation_tokens_total"]
            if "generation_tokens_total" in now and "generation_tokens_total" in before
            else None
        )
        symptoms: JsonObject = {
            "replica": replica,
            "what": what,
            "pids": list(pids),
            "process_names": {str(e["pid"]): e["name"] for e in entries},
            "states_at_inject": state.get("states_at_inject", {}),
            "states_now": dict(states),
            "pids_gone": list(gone),
            "health_status": health_status,
            "health_error": health_error,
            "generation_tokens_at_inject": before.get("generation_tokens_total"),
            "generation_tokens_now": now.get("generation_tokens_total"),
            "generation_tokens_delta": delta,
            "running_at_inject": before.get("running"),
            "waiting_at_inject": before.get("waiting"),
            "running_now": now.get("running"),
            "waiting_now": now.get("waiting"),
            "metrics_error_at_inject": before.get("error", ""),
            "metrics_error_now": now.get("error", ""),
            "made_progress": None if delta is None else delta > 0,
            "resumed_by": resumed_by,
            "hung_for_s": round((resumed_at or time.time()) - handle.injected_at, 2)
            if handle.injected_at
            else None,
        }
        timestamps = set_times(
            {
                "injected_at": handle.injected_at,
                "resumed_at": resumed_at,
                "reverted_at": handle.reverted_at,
            }
        )
        reason = self._reason(replica, what, pids, state, symptoms, stopped_at_inject, running)
        return Evidence(bit=bit, reason=reason, symptoms=symptoms, timestamps=timestamps)

    def _reason(
        self,
        replica: str,
        what: str,
        pids: list[int],
        state: dict[str, Any],
        symptoms: dict[str, Any],
        stopped_at_inject: bool,
        running: list[int],
    ) -> str:
        """One line, the replica and pids first, then what a user of it sees."""
        if not stopped_at_inject:
            return (
                f"{replica}: {WHAT[what]} pids {pid_list(pids)} were not all stopped after SIGSTOP "
                f"(states {state.get('states_at_inject', {})})"
            )
        if running:
            return (
                f"{replica}: {WHAT[what]} pids {pid_list(running)} run again (states {symptoms['states_now']}) "
                f"though neither the timer nor revert resumed them"
            )
        parts = [f"{replica} hung: {WHAT[what]} pids {pid_list(pids)} stopped (state T)"]
        status, error = symptoms["health_status"], symptoms["health_error"]
        parts.append(
            error if status is None else f"/health {'still ' if status == 200 else ''}answered {status}"
        )
        if symptoms["metrics_error_now"]:
            parts.append(symptoms["metrics_error_now"])
        elif symptoms["generation_tokens_delta"] is not None:
            # vLLM's running and waiting gauges come from the engine's own reports: while it is
            # stopped they show what it last said, not what waits in the API server now.
            parts.append(
                f"generation_tokens_total rose by {symptoms['generation_tokens_delta']:g} since inject"
                if symptoms["made_progress"]
                else f"generation_tokens_total stayed at {symptoms['generation_tokens_now']:g} (the engine last "
                f"reported {symptoms['running_now']:g} running, {symptoms['waiting_now']:g} waiting)"
            )
        if symptoms["pids_gone"]:
            parts.append(f"pids {pid_list(symptoms['pids_gone'])} have gone since")
        if symptoms["resumed_by"]:
            parts.append(f"resumed by {symptoms['resumed_by']} after {symptoms['hung_for_s']:g} s")
        return "; ".join(parts)
