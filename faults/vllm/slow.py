"""Slow engine: a replica still works, ``slowdown`` times slower (a gray failure, issue #16).

Every process of the replica's vLLM process group (API server, EngineCore, workers) is slowed,
by one of two mechanisms:

- ``cgroup``, where a cgroup cpu controller is writable (root, cgroup v1 or v2): the processes
  move into a new child cgroup ``inferchaos-<env>-slow-<handle id>`` with a CFS quota, and
  revert moves each back to the cgroup it came from (recorded per pid at plan time) and removes
  the child. The kernel throttles them; nothing in them can tell.
- ``duty_cycle`` elsewhere: a thread of the injecting process stops them with SIGSTOP for
  ``1 - 1/slowdown`` of every 100 ms period and resumes them with SIGCONT for the rest.

``auto`` picks ``cgroup`` where it is available.

The quota rule: ``quota = period * cores / slowdown`` in a QUOTA_PERIOD_US period (lengthened
where the quota would fall below the kernel's 1,000 us), where
``cores`` is the replica's own CPU use while it generates, measured over the speed probes sent
before acting (CPU seconds of its processes / the probes' end-to-end seconds). A quota caps
CPU time, so a slowdown of N needs a cap N times below what the replica used. The machine's
core count (``os.cpu_count()``) is the fallback when nothing could be measured, and the upper
bound; it is not the rule because it under-slows a replica that uses fewer cores than the
machine has: one busy core of two, capped at 2/10 of a core, is 5 times slower, not 10. The
measured use errs low (the probes' time includes waits on the network), which slows a little
more than asked, never less. The duty cycle needs no such rule: it takes wall time away,
whatever the CPU use.

Evidence is the replica's own generation speed: a short streaming completion with a fixed
number of tokens (``ignore_eos``) is sent straight to the replica's port (not through the front
door, which would route some of them elsewhere) three times before acting and three times
after; tokens/s is tokens over the request's end-to-end time, and the median counts. The fault
bit when the speed during is at most ``before / (slowdown * 0.5)``: at least half the asked
slowdown, as a throttled replica shares the machine with other work and the probes are short.
Tokens do not slow in proportion to the CPU taken away, so where the first measurement under
a quota falls short of that, the quota is scaled down once by the shortfall and the speed is
measured again (the ledger holds the quota applied).

The pids are recorded with their start times and the cgroup path in the ledger before anything
is changed, so revert (and `inferchaos cleanup` in a later process, from the ledger alone) acts
only on those processes and never on one that reused a pid. The duty cycle's thread dies with
the injecting process; cleanup then resumes every recorded process. A revert in another
process while the injector lives still ends its duty cycle: the thread stops once the ledger
entry is gone. ``duration_s`` ends the slowdown by a timer (or the duty cycle's own deadline)
in the injecting process.
"""

from __future__ import annotations

import logging
import os
import signal
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import httpx
import psutil

from inferchaos.errors import ConfigError, FaultError, Unsupported
from inferchaos.faults.base import (
    Evidence,
    FaultHandle,
    JsonObject,
    JsonValue,
    Planned,
    replica_name,
    set_times,
)
from inferchaos.faults.ledger import Ledger
from inferchaos.faults.local_process import LocalProcessFault
from inferchaos.faults.registry import register
from inferchaos.faults.vllm.replica_processes import (
    ProcessEntry,
    pid_list,
    process_group,
    process_state,
    records,
    same_process,
    signal_recorded,
    state_of,
)
from inferchaos.faults.vllm.targets import healthy_replica
from inferchaos.layers import Layer
from inferchaos.params import InvalidValue, seconds
from inferchaos.primitives import cpu_quota, http
from inferchaos.primitives.capabilities import RayProcessEnvironment
from inferchaos.primitives.cpu_quota import CpuController, CpuQuotaError
from inferchaos.primitives.openai_stream import StreamResult, stream_completion
from inferchaos.primitives.replica_slots import ReplicaRecord

logger = logging.getLogger(__name__)

NAME = "vllm.slow_engine"
MECHANISMS = ("auto", "cgroup", "duty_cycle")
# The quota's period. The kernel's default 100 ms lets a throttled group spend its whole quota
# at the start of each period, so a request needing less CPU than one quota runs at full speed
# and then waits out the period: short requests were slowed anywhere from not at all to the
# asked factor. In 10 ms periods the burst is a tenth as long, and every request is slowed
# about the same.
QUOTA_PERIOD_US = 10_000
# The duty cycle's period: short enough that a request sees a steady slow stream rather than
# pauses, long enough that the two signals per process per period cost little.
DUTY_PERIOD_S = 0.1
# The speed probe: a short prompt and a fixed number of generated tokens (ignore_eos), so
# before and during time the same work; three samples each, the median counts.
PROBE_PROMPT = "Count to ten:"
PROBE_TOKENS = 32
PROBE_SAMPLES = 3
PROBE_TIMEOUT_S = 30.0
# Bit when at least this fraction of the asked slowdown was measured.
BITE_FRACTION = 0.5
HTTP_TIMEOUT_S = 5.0
# How long revert waits for the duty-cycle thread to end its current phase and resume.
JOIN_TIMEOUT_S = 2.0
# A process may fork into the cgroup between the last move and the rmdir: try again.
REMOVE_ATTEMPTS = 3


@dataclass
class SlowEngineParams:
    """The replica (number or name), how many times slower, how, and for how long (None: until revert)."""

    replica: int | str = 0
    slowdown: float = 10.0
    mechanism: str = "auto"
    duration_s: float | None = None
    allow_total_outage: bool = False

    def __post_init__(self) -> None:
        # parse_params refuses a NaN or an infinity already; a direct construction may not.
        if not 1 < self.slowdown < float("inf"):
            raise InvalidValue(
                "slowdown", f"must be a finite number more than 1 (1 is full speed), got {self.slowdown!r}"
            )
        if self.mechanism not in MECHANISMS:
            raise InvalidValue("mechanism", f"must be one of {', '.join(MECHANISMS)}; got {self.mechanism!r}")
        if self.duration_s is not None:
            seconds(self.duration_s, "duration_s")


def duty_phases(slowdown: float, period_s: float = DUTY_PERIOD_S) -> tuple[float, float]:
    """(stopped, running) seconds of each duty-cycle period for ``slowdown``: running is 1/slowdown of it."""
    running = period_s / slowdown
    return period_s - running, running


def _send(procs: list[psutil.Process], sig: signal.Signals, warned: set[int]) -> None:
    """Signal each process (psutil refuses a reused pid); a process that is gone or refuses is skipped, logged once."""
    for proc in procs:
        try:
            proc.send_signal(sig)
        except psutil.Error as e:
            if proc.pid not in warned:
                warned.add(proc.pid)
                logger.warning("%s: could not signal pid %d: %s", NAME, proc.pid, e)


class DutyCycle(threading.Thread):
    """Stops ``procs`` for ``1 - 1/slowdown`` of every period until stopped, a deadline, or ``still_wanted`` says no.

    The processes are stopped first, so the slowdown starts at once, and always resumed at
    the end, however the thread ends.
    """

    def __init__(
        self,
        name: str,
        procs: list[psutil.Process],
        slowdown: float,
        period_s: float = DUTY_PERIOD_S,
        deadline: float | None = None,
        still_wanted: Callable[[], bool] | None = None,
    ) -> None:
        super().__init__(name=name, daemon=True)
        self.procs = procs
        self.stopped_s, self.running_s = duty_phases(slowdown, period_s)
        self.deadline = deadline
        self.still_wanted = still_wanted
        self.cycles = 0
        # Set when the deadline ended it (the epoch time it resumed the processes).
        self.resumed_at: float | None = None
        self._stop_event = threading.Event()
        self._warned: set[int] = set()

    def stop(self, timeout_s: float = JOIN_TIMEOUT_S) -> None:
        """End the cycle and wait until the processes are resumed (idempotent)."""
        self._stop_event.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout_s)

    def run(self) -> None:
        by_deadline = False
        try:
            while not self._stop_event.is_set():
                if self.deadline is not None and time.time() >= self.deadline:
                    by_deadline = True
                    break
                if self.still_wanted is not None and not self.still_wanted():
                    break
                _send(self.procs, signal.SIGSTOP, self._warned)
                if self._stop_event.wait(self.stopped_s):
                    break
                _send(self.procs, signal.SIGCONT, self._warned)
                self.cycles += 1
                if self._stop_event.wait(self.running_s):
                    break
        finally:
            _send(self.procs, signal.SIGCONT, self._warned)
            if by_deadline:
                self.resumed_at = time.time()


@dataclass
class _Active:
    """What ends one live slowdown in this process: its duty cycle or its duration timer."""

    duty: DutyCycle | None = None
    timer: threading.Timer | None = None
    # When the duration timer restored the processes.
    restored_at: float | None = None

    def restored(self) -> float | None:
        return self.duty.resumed_at if self.duty is not None else self.restored_at


# Live slowdowns by handle id, for every fault object of this process: revert may be called
# on another instance than inject. The lock makes "the timer restores" and "revert restores"
# exclusive, so each knows what the other did.
_ACTIVE: dict[str, _Active] = {}
_ACTIVE_LOCK = threading.Lock()


def _controller(state: dict[str, Any]) -> CpuController:
    return CpuController(int(state["controller"]["version"]), Path(state["controller"]["root"]))


def _original_dir(controller: CpuController, relative: str | None) -> Path:
    """Where a process goes back to: the cgroup it came from, or the root when that is gone.

    The root is also right where /proc names a cgroup this mount does not show (a container
    without its own cgroup namespace mounts its own cgroup as the root).
    """
    if relative:
        path = controller.path_of(relative)
        if path.is_dir():
            return path
    return controller.root


def _slowed_already(relative: str | None) -> bool:
    return cpu_quota.is_slow_group((relative or "").rstrip("/").rsplit("/", 1)[-1])


def restore_cgroup(state: dict[str, Any]) -> tuple[list[int], bool]:
    """Move the recorded live processes (and any process forked into the group) back, and remove the group.

    Returns (pids moved back, whether the group was removed now); a no-op when the group is
    gone already. Only processes still in the group move: one moved elsewhere since is left there.
    """
    group = state.get("cgroup")
    if not group:
        return [], False  # inject stopped before it made one
    controller = _controller(state)
    path = Path(group["path"])
    moved: list[int] = []
    if not path.is_dir():
        return moved, False
    entries = state["processes"]
    for entry in entries:
        proc = same_process(entry)
        if proc is None or cpu_quota.process_cgroup(proc.pid, controller) != group["relative"]:
            continue
        if cpu_quota.move(_original_dir(controller, entry.get("cgroup")), proc.pid):
            moved.append(proc.pid)
    # Children forked inside the group since go where the API server came from.
    home = _original_dir(controller, entries[0].get("cgroup") if entries else None)
    for attempt in range(REMOVE_ATTEMPTS):
        for pid in cpu_quota.group_pids(path):
            if cpu_quota.move(home, pid):
                moved.append(pid)
        try:
            return moved, cpu_quota.remove_group(path)
        except CpuQuotaError:
            if attempt == REMOVE_ATTEMPTS - 1:
                raise
    return moved, False  # not reached: the last attempt returns or raises


def _served_model(url: str) -> str:
    """The model the replica serves, from its own /v1/models."""
    try:
        response = http.get(f"{url}/v1/models", timeout=HTTP_TIMEOUT_S)
        response.raise_for_status()
        return str(response.json()["data"][0]["id"])
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as e:
        raise FaultError(f"{NAME}: could not read the served model from {url}/v1/models: {e}") from e


def _sample(result: StreamResult) -> dict[str, Any]:
    """One probe as evidence: tokens, times and tokens/s (None when nothing was measured)."""
    # ignore_eos makes a completed stream exactly PROBE_TOKENS long; vLLM may merge several
    # tokens into one chunk when its API server falls behind, so chunks only count a stream
    # that broke off.
    tokens = PROBE_TOKENS if result.ok else result.chunks
    timed_out = "Timeout" in result.error
    measured = result.ok or tokens > 0 or timed_out
    return {
        "ok": result.ok,
        "tokens": tokens,
        "e2e_s": round(result.e2e_s, 4),
        "ttft_s": None if result.ttft_s is None else round(result.ttft_s, 4),
        "tokens_per_s": round(tokens / result.e2e_s, 3) if measured and result.e2e_s > 0 else None,
        "error": result.error,
    }


def _cpu_seconds(entries: list[ProcessEntry]) -> float:
    """CPU seconds (user + system) the recorded live processes used so far."""
    total = 0.0
    for entry in entries:
        proc = same_process(entry)
        if proc is None:
            continue
        try:
            times = proc.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


def measure_speed(url: str, model: str, entries: list[ProcessEntry]) -> dict[str, Any]:
    """The replica's generation speed: PROBE_SAMPLES probes, their median tokens/s, and its CPU use meanwhile.

    ``cpu_cores`` is the CPU time of the recorded processes over the probes' own end-to-end
    time (not this process's set-up of each request), what the quota rule scales.
    """
    cpu_start = _cpu_seconds(entries)
    samples = []
    for _ in range(PROBE_SAMPLES):
        sample = _sample(
            stream_completion(url, model, PROBE_PROMPT, PROBE_TOKENS, PROBE_TIMEOUT_S, {"ignore_eos": True})
        )
        samples.append(sample)
        if sample["tokens_per_s"] is None or not sample["ok"]:
            break  # a failing or crawling replica: one such answer says enough
    busy = sum(s["e2e_s"] for s in samples)
    rates = [s["tokens_per_s"] for s in samples if s["tokens_per_s"] is not None]
    return {
        "tokens_per_s": statistics.median(rates) if rates else None,
        "served": any(s["ok"] for s in samples),
        "cpu_cores": round((_cpu_seconds(entries) - cpu_start) / busy, 3) if busy > 0 else None,
        "samples": samples,
    }


def _restore_on_time(handle_id: str, replica: str, state: dict[str, Any]) -> None:
    """The duration timer's work (cgroup): restore the processes unless revert came first.

    It neither writes the ledger nor touches the handle: the injecting thread may be writing
    the same entry at this moment. Evidence and revert read its time from ``_ACTIVE``.
    """
    with _ACTIVE_LOCK:
        active = _ACTIVE.get(handle_id)
        if active is None:
            return
        try:
            moved, _ = restore_cgroup(state)
        except CpuQuotaError as e:
            # Left for revert, which tries again and fails loudly: the ledger entry stays.
            logger.error("%s [%s]: %s: could not restore: %s", NAME, handle_id, replica, e)
            return
        active.restored_at = time.time()
    logger.info("%s [%s]: %s: duration over, moved pids %s back", NAME, handle_id, replica, pid_list(moved))


@register
class SlowEngine(LocalProcessFault[SlowEngineParams]):
    """Slow every process of one vLLM replica ``slowdown`` times: a CPU quota, or a SIGSTOP duty cycle."""

    name = NAME
    layer = Layer.VLLM
    params_type = SlowEngineParams
    # Where to look for a cpu controller (a test points it at a tree without one); None: where
    # every cgroup detection looks, $INFERCHAOS_CGROUP_ROOT, else /sys/fs/cgroup.
    cgroup_root: ClassVar[Path | None] = None

    def _plan(self, env: RayProcessEnvironment, params: SlowEngineParams) -> Planned:
        target, others = healthy_replica(
            env, self.name, replica_name(params.replica), params.allow_total_outage, "slow"
        )
        found = records(process_group(target.vllm_pid))
        if not found:
            # Listed healthy, yet its server is gone: Serve is replacing it (as hang_engine's plan).
            raise ConfigError(
                f"{self.name}: {target.name} is being replaced (no live process in its vLLM server's "
                f"process group {target.vllm_pid}); nothing to slow"
            )
        pids = [int(r["pid"]) for r in found]
        if os.getpid() in pids:
            raise ConfigError(
                f"{self.name}: {target.name}: refusing to slow this process itself (pid {os.getpid()})"
            )
        stopped = [pid for pid in pids if process_state(pid) == "T"]
        if stopped:
            # A duty cycle would resume them, and a hang's revert would not know.
            raise ConfigError(
                f"{self.name}: {target.name}: pids {pid_list(stopped)} are stopped; "
                f"revert the fault that stopped them first (`inferchaos cleanup`)"
            )
        mechanism, controller = self._mechanism(params.mechanism)
        state: dict[str, Any] = {
            "replica": target.name,
            "url": target.url,
            "server_pid": target.vllm_pid,
            "mechanism": mechanism,
            "slowdown": params.slowdown,
            "processes": found,
        }
        targets = [f"replica:{target.name}", *(f"pid:{pid}" for pid in pids)]
        if controller is not None:
            state["controller"] = {"version": controller.version, "root": str(controller.root)}
            for entry in found:
                entry["cgroup"] = cpu_quota.process_cgroup(int(entry["pid"]), controller)
            slowed = [int(e["pid"]) for e in found if _slowed_already(e["cgroup"])]
            if slowed:
                raise ConfigError(
                    f"{self.name}: {target.name}: pids {pid_list(slowed)} are slowed already; "
                    f"revert that slowdown first (`inferchaos cleanup`)"
                )
            targets.append(f"cgroup:{controller.root}/{cpu_quota.slow_group_name('<env>', '<handle>')}")
        else:
            stopped_s, running_s = duty_phases(params.slowdown)
            state["duty_cycle"] = {"period_s": DUTY_PERIOD_S, "stopped_s": stopped_s, "running_s": running_s}
        return Planned(self._describe(target, params, state, others), targets, state)

    def _mechanism(self, wanted: str) -> tuple[str, CpuController | None]:
        """The mechanism to use and, for cgroup, its controller; Unsupported (the run is skipped)
        when cgroup is asked for and this host has no writable cpu controller."""
        if wanted == "duty_cycle":
            return wanted, None
        controller, why = cpu_quota.cpu_quota_available(self.cgroup_root)
        if controller is not None:
            return "cgroup", controller
        if wanted == "cgroup":
            raise Unsupported(
                f"{self.name}: mechanism cgroup is not available here: {why}; use duty_cycle or auto"
            )
        logger.info("%s: no writable cpu cgroup (%s): slowing by a SIGSTOP duty cycle", self.name, why)
        return "duty_cycle", None

    def _describe(
        self,
        target: ReplicaRecord,
        params: SlowEngineParams,
        state: dict[str, Any],
        others: list[ReplicaRecord],
    ) -> str:
        pids = pid_list([int(e["pid"]) for e in state["processes"]])
        if state["mechanism"] == "cgroup":
            how = (
                f"move {target.name}'s vLLM process group (pids {pids}) into a new cgroup under "
                f"{state['controller']['root']} with a CPU quota {params.slowdown:g} times below its measured use"
            )
        else:
            duty = state["duty_cycle"]
            how = (
                f"SIGSTOP {target.name}'s vLLM process group (pids {pids}) for {duty['stopped_s'] * 1000:.0f} ms "
                f"of every {duty['period_s'] * 1000:.0f} ms"
            )
        until = (
            f"restored after {params.duration_s:g} s or by revert"
            if params.duration_s
            else "slow until revert"
        )
        return (
            f"{how}: it keeps serving, {params.slowdown:g} times slower; "
            f"{', '.join(r.name for r in others) or 'no replica'} keeps full speed; {until}"
        )

    def _act(
        self, env: RayProcessEnvironment, params: SlowEngineParams, handle: FaultHandle, ledger: Ledger
    ) -> None:
        state = handle.state
        replica, entries = state["replica"], state["processes"]
        changed = [f"{e['pid']} ({e['name']})" for e in entries if same_process(e) is None]
        if changed:
            raise FaultError(
                f"{self.name}: {replica}: pids {', '.join(changed)} are gone since the plan; nothing was slowed"
            )
        state["model"] = _served_model(state["url"])
        before = measure_speed(state["url"], state["model"], entries)
        state["speed_before"] = before
        if not before["served"]:
            errors = "; ".join(s["error"] for s in before["samples"] if s["error"])
            raise FaultError(
                f"{self.name}: {replica} did not serve a probe before the slowdown ({errors}); nothing was slowed"
            )
        if state["mechanism"] == "cgroup":
            self._throttle(params, handle, ledger)
        else:
            self._start_duty_cycle(params, handle, ledger)
        ledger.record(handle)
        state["speed_during"] = measure_speed(state["url"], state["model"], entries)
        if state["mechanism"] == "cgroup":
            self._tighten_if_short(params, handle, ledger)
        logger.info(
            "%s [%s]: %s: %s tokens/s before, %s during",
            self.name,
            handle.id,
            replica,
            before["tokens_per_s"],
            state["speed_during"]["tokens_per_s"],
        )

    def _throttle(self, params: SlowEngineParams, handle: FaultHandle, ledger: Ledger) -> None:
        """The cgroup mechanism: record the group, create it, move every process in; all or nothing."""
        state = handle.state
        controller = _controller(state)
        measured = state["speed_before"]["cpu_cores"]
        machine = float(os.cpu_count() or 1)
        if measured:
            cores, basis = min(float(measured), machine), "measured"
        else:
            cores, basis = machine, "cpu_count"
        share = cpu_quota.bandwidth(params.slowdown, cores, QUOTA_PERIOD_US)
        quota = share.quota_us
        name = cpu_quota.slow_group_name(handle.env, handle.id)
        state["cgroup"] = {
            "path": str(controller.root / name),
            "relative": f"/{name}",
            "quota_us": quota,
            "period_us": share.period_us,
            "cores": round(cores, 3),
            "cores_basis": basis,
        }
        # On disk before the group exists, so a crash from here on leaves it to cleanup.
        ledger.record(handle)
        moved: list[int] = []
        try:
            group = cpu_quota.create_group(controller, name, quota, share.period_us)
            for entry in state["processes"]:
                proc = same_process(entry)
                if proc is None or not cpu_quota.move(group.path, proc.pid):
                    raise FaultError(f"pid {entry['pid']} ({entry['name']}) is gone")
                moved.append(proc.pid)
        except (CpuQuotaError, FaultError) as e:
            # Leave nothing half-slowed: every process is throttled or none.
            try:
                restore_cgroup(state)
            except CpuQuotaError as undo:
                logger.error("%s [%s]: could not undo a partial move: %s", self.name, handle.id, undo)
            raise FaultError(
                f"{self.name}: {state['replica']}: could not throttle: {e}; moved pids {pid_list(moved)} back"
            ) from e
        handle.injected_at = time.time()
        if params.duration_s is not None:
            state["restore_due_at"] = handle.injected_at + params.duration_s
            timer = threading.Timer(
                params.duration_s, _restore_on_time, (handle.id, state["replica"], _copy(state))
            )
            timer.daemon = True
            timer.name = f"slow-engine-restore-{handle.id}"
            with _ACTIVE_LOCK:
                _ACTIVE[handle.id] = _Active(timer=timer)
            timer.start()
        else:
            with _ACTIVE_LOCK:
                _ACTIVE[handle.id] = _Active()
        logger.info(
            "%s [%s]: %s: pids %s in %s, quota %d us per %d us (%s cores, %s)",
            self.name,
            handle.id,
            state["replica"],
            pid_list(moved),
            state["cgroup"]["path"],
            quota,
            share.period_us,
            state["cgroup"]["cores"],
            basis,
        )

    def _tighten_if_short(self, params: SlowEngineParams, handle: FaultHandle, ledger: Ledger) -> None:
        """Once, when the quota slowed the replica less than the bite needs: a quota scaled down by
        the shortfall, and the speed measured again.

        Tokens do not slow in proportion to CPU taken away: part of each probe's time is not the
        engine's, so a quota of 1/10 of the replica's measured use can slow it just short of the
        5x a slowdown of 10 must show.
        """
        state = handle.state
        before = state["speed_before"]["tokens_per_s"]
        during = state["speed_during"]["tokens_per_s"]
        required = params.slowdown * BITE_FRACTION
        if not before or not during or before / during >= required:
            return
        group = state["cgroup"]
        # The share of a core the quota grants, cut by the shortfall.
        tighter = cpu_quota.bandwidth(
            params.slowdown / (before / during), group["quota_us"] / group["period_us"], QUOTA_PERIOD_US
        )
        if tighter.quota_us / tighter.period_us >= group["quota_us"] / group["period_us"]:
            return
        quota = tighter.quota_us
        try:
            cpu_quota.set_quota(
                cpu_quota.CpuGroup(_controller(state), group["relative"].lstrip("/")),
                quota,
                tighter.period_us,
            )
        except CpuQuotaError as e:
            logger.warning("%s [%s]: could not tighten the quota: %s", self.name, handle.id, e)
            return
        logger.info(
            "%s [%s]: %s: %.2fx slower with %d us per %d us; quota now %d us per %d us",
            self.name,
            handle.id,
            state["replica"],
            before / during,
            group["quota_us"],
            group["period_us"],
            quota,
            tighter.period_us,
        )
        group["first_quota_us"], group["quota_us"] = group["quota_us"], quota
        group["first_period_us"], group["period_us"] = group["period_us"], tighter.period_us
        ledger.record(handle)
        state["speed_during"] = measure_speed(state["url"], state["model"], state["processes"])

    def _start_duty_cycle(self, params: SlowEngineParams, handle: FaultHandle, ledger: Ledger) -> None:
        """The duty-cycle mechanism: a thread of this process stops and resumes the recorded processes."""
        state = handle.state
        procs = [p for p in (same_process(e) for e in state["processes"]) if p is not None]
        handle.injected_at = time.time()
        deadline = None
        if params.duration_s is not None:
            deadline = state["restore_due_at"] = handle.injected_at + params.duration_s
        handle_id = handle.id
        duty = DutyCycle(
            f"slow-engine-duty-{handle_id}",
            procs,
            params.slowdown,
            deadline=deadline,
            # Reverted by another process (`inferchaos cleanup`): stop stopping them.
            still_wanted=lambda: ledger.holds(handle_id),
        )
        with _ACTIVE_LOCK:
            _ACTIVE[handle_id] = _Active(duty=duty)
        duty.start()
        logger.info(
            "%s [%s]: %s: duty cycle on pids %s: stopped %.0f ms of every %.0f ms",
            self.name,
            handle_id,
            state["replica"],
            pid_list([p.pid for p in procs]),
            duty.stopped_s * 1000,
            DUTY_PERIOD_S * 1000,
        )

    def _undo(
        self, env: RayProcessEnvironment, params: SlowEngineParams, handle: FaultHandle, ledger: Ledger
    ) -> None:
        state = handle.state
        replica, entries = state["replica"], state["processes"]
        with _ACTIVE_LOCK:
            # Popped under the lock: a duration timer running now has finished restoring, and
            # one that fires later finds nothing to do.
            active = _ACTIVE.pop(handle.id, None)
            if active is not None and active.timer is not None:
                active.timer.cancel()
        if state["mechanism"] == "cgroup":
            try:
                moved, removed = restore_cgroup(state)
            except CpuQuotaError as e:
                raise FaultError(f"{self.name}: {replica}: could not restore: {e}") from e
            acted = bool(moved or removed)
            logger.info(
                "%s [%s]: %s: moved pids %s back; cgroup %s",
                self.name,
                handle.id,
                replica,
                pid_list(moved),
                "removed" if removed else "gone already",
            )
        else:
            if active is not None and active.duty is not None:
                active.duty.stop()
            stopped = [int(e["pid"]) for e in entries if state_of(e) == "T"]
            sent, gone, failed = signal_recorded(entries, signal.SIGCONT)
            if failed:
                raise FaultError(f"{self.name}: {replica}: could not resume {'; '.join(failed)}")
            # Slowed until now: this process's duty cycle ran, or another's left them stopped.
            acted = bool(stopped) or (active is not None and active.restored() is None)
            logger.info(
                "%s [%s]: %s: sent SIGCONT to pids %s (stopped until now: %s; gone or reused: %s)",
                self.name,
                handle.id,
                replica,
                pid_list(sent),
                pid_list(stopped),
                pid_list(gone),
            )
        if "restored_at" in state:
            return
        now, due = time.time(), state.get("restore_due_at")
        by_timer = active.restored() if active is not None else None
        if by_timer is not None:
            state.update(restored_at=by_timer, restored_by="timer")
        elif acted:
            state.update(restored_at=now, restored_by="revert")
        elif due is not None and due <= now:
            # Restored by the timer of an injecting process that has gone since.
            state.update(restored_at=due, restored_by="timer")

    def _restored(self, handle: FaultHandle) -> tuple[float | None, str | None]:
        """When the slowdown ended and by what (timer, revert), or (None, None) while it holds."""
        if handle.state.get("restored_at"):
            return float(handle.state["restored_at"]), handle.state.get("restored_by")
        with _ACTIVE_LOCK:
            active = _ACTIVE.get(handle.id)
            restored = active.restored() if active is not None else None
        if restored is not None:
            return restored, "timer"
        due = handle.state.get("restore_due_at")
        if active is None and due is not None and due <= time.time():
            return float(due), "timer"
        return None, None

    def _evidence(
        self, env: RayProcessEnvironment, params: SlowEngineParams, handle: FaultHandle
    ) -> Evidence:
        state = handle.state
        replica, mechanism, slowdown = state["replica"], state["mechanism"], float(state["slowdown"])
        entries = state["processes"]
        restored_at, restored_by = self._restored(handle)
        slowing = handle.injected_at is not None and restored_at is None and handle.reverted_at is None
        before = state.get("speed_before") or {}
        during = state.get("speed_during") or {}
        rate_before, rate_during = before.get("tokens_per_s"), during.get("tokens_per_s")
        observed = rate_before / rate_during if rate_before and rate_during else None
        required = slowdown * BITE_FRACTION
        slowed = bool(rate_before and rate_during is not None and rate_during <= rate_before / required)
        escaped = self._escaped(handle) if slowing else []
        symptoms: JsonObject = {
            "replica": replica,
            "mechanism": mechanism,
            "slowdown": slowdown,
            "processes": entries,
            "pids_gone": [int(e["pid"]) for e in entries if same_process(e) is None],
            "tokens_per_s_before": rate_before,
            "tokens_per_s_during": rate_during,
            "observed_slowdown": None if observed is None else round(observed, 2),
            "required_slowdown": required,
            "served_during": during.get("served"),
            "cpu_cores_before": before.get("cpu_cores"),
            "cpu_cores_during": during.get("cpu_cores"),
            "probe_before": before.get("samples", []),
            "probe_during": during.get("samples", []),
            "escaped_pids": list(escaped),
            "restored_by": restored_by,
            "slowed_for_s": round((restored_at or time.time()) - handle.injected_at, 2)
            if handle.injected_at
            else None,
        }
        if mechanism == "cgroup":
            group = state.get("cgroup") or {}
            path = Path(group["path"]) if group else None
            in_cgroup: list[JsonValue] = list(cpu_quota.group_pids(path)) if path else []
            symptoms.update(
                cgroup=group.get("path"),
                quota_us=group.get("quota_us"),
                period_us=group.get("period_us"),
                quota_cores=group.get("cores"),
                quota_cores_basis=group.get("cores_basis"),
                original_cgroups={str(e["pid"]): e.get("cgroup") for e in entries},
                cgroup_exists=bool(path and path.is_dir()),
                pids_in_cgroup=in_cgroup,
            )
        else:
            symptoms["duty_cycle"] = state.get("duty_cycle")
            symptoms["states_now"] = {str(e["pid"]): state_of(e) for e in entries}
        bit = slowed and not escaped
        timestamps = set_times(
            {
                "injected_at": handle.injected_at,
                "restored_at": restored_at,
                "reverted_at": handle.reverted_at,
            }
        )
        return Evidence(
            bit=bit, reason=self._reason(symptoms, slowed), symptoms=symptoms, timestamps=timestamps
        )

    def _escaped(self, handle: FaultHandle) -> list[int]:
        """Recorded live pids at full speed though nothing restored them: moved out of the group, or the duty cycle died."""
        state = handle.state
        live = [int(e["pid"]) for e in state["processes"] if same_process(e) is not None]
        if state["mechanism"] == "cgroup":
            if not state.get("cgroup"):
                return []
            controller, relative = _controller(state), state["cgroup"]["relative"]
            return [pid for pid in live if cpu_quota.process_cgroup(pid, controller) != relative]
        with _ACTIVE_LOCK:
            active = _ACTIVE.get(handle.id)
        # Another process cannot see the injector's thread: only the injector can tell.
        if active is None or active.duty is None or active.duty.is_alive():
            return []
        return live

    def _reason(self, symptoms: dict[str, Any], slowed: bool) -> str:
        """One line, the replica and mechanism first, then the speeds a user of it sees."""
        replica, before, during = (
            symptoms["replica"],
            symptoms["tokens_per_s_before"],
            symptoms["tokens_per_s_during"],
        )
        how = (
            f"CPU quota {symptoms.get('quota_us')} us per {symptoms.get('period_us')} us in {symptoms.get('cgroup')}"
            if symptoms["mechanism"] == "cgroup"
            else "SIGSTOP duty cycle"
        )
        if before is None:
            return f"{replica}: no speed was measured before the slowdown ({how})"
        if during is None:
            return f"{replica}: no speed was measured during the slowdown ({how}); {before:g} tokens/s before"
        observed = symptoms["observed_slowdown"]
        factor = "no token generated" if observed is None else f"{observed:g}x slower"
        verdict = "slowed" if slowed else "not slowed enough"
        parts = [
            f"{replica} {verdict} by {how}: {before:g} tokens/s before, {during:g} during ({factor}; "
            f"at least {symptoms['required_slowdown']:g}x wanted)"
        ]
        if symptoms["served_during"] is False:
            parts.append(f"no probe completed within {PROBE_TIMEOUT_S:g} s during the slowdown")
        if symptoms["escaped_pids"]:
            where = (
                "left the cgroup"
                if symptoms["mechanism"] == "cgroup"
                else "run at full speed: the duty cycle ended"
            )
            parts.append(f"pids {pid_list(symptoms['escaped_pids'])} {where} though nothing restored them")
        if symptoms["pids_gone"]:
            parts.append(f"pids {pid_list(symptoms['pids_gone'])} have gone since")
        if symptoms["restored_by"]:
            parts.append(f"restored by {symptoms['restored_by']} after {symptoms['slowed_for_s']:g} s")
        return "; ".join(parts)


def _copy(state: dict[str, Any]) -> dict[str, Any]:
    """What the duration timer needs, copied: the handle itself stays the injecting thread's."""
    return {
        "controller": dict(state["controller"]),
        "cgroup": dict(state["cgroup"]),
        "processes": [dict(e) for e in state["processes"]],
    }
