"""Device-memory squatting: another process takes the memory a replica needs on its device.

``cuda:<index>``: a squatter process allocates and touches device memory with the CUDA driver;
NVML shows its pid among the compute processes and the used memory risen by about its bytes.

``host:<slot>`` (the local environment): the device is replica slot K's memory budget, and the
fault plays what a squatted GPU does to a replica that restarts: (1) squat; (2) a preflight
check (device free bytes vs ``replica_need_bytes``) flags the device before the new replica
starts; (3) the replica restarts on it; (4) it fails fast at start-up, never hangs, while the
other replicas keep serving; (5) revert; (6) Serve's next attempt starts and serves. Squatting
beside the *running* replica would make the kernel OOM-kill it, which no GPU does, so inject
first ends the replica's vLLM process group (Serve notices and starts a new replica, which
claims the same slot and budget), waits for its memory to be released, then squats inside the
budget before the new replica arrives. Inject returns once that first attempt has an outcome.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

from inferchaos.errors import (
    ConfigError,
    EnvironmentNotUp,
    FaultError,
    InferchaosError,
    ProbeError,
    Unsupported,
)
from inferchaos.faults.base import (
    Evidence,
    FaultHandle,
    JsonObject,
    Planned,
    TypedFault,
    byte_count,
    env_name,
)
from inferchaos.faults.device.cuda import cuda_available
from inferchaos.faults.device.devices import CUDA, HOST, DeviceRef, gpu_size, parse_device
from inferchaos.faults.device.launch import (
    SquatterSpec,
    end_squatter,
    squatter_process,
    start_squatter,
    wait_ready,
)
from inferchaos.faults.device.restart import (
    RestartAttempt,
    assess_attempts,
    kill_replica_server,
    merge_attempts,
    wait_budget_released,
    watch_restart,
)
from inferchaos.faults.device.squatter import CUDA_MAX_FRACTION, HOST_MAX_MACHINE_FRACTION
from inferchaos.faults.ledger import Ledger
from inferchaos.faults.registry import register
from inferchaos.layers import Layer
from inferchaos.paths import state_root
from inferchaos.primitives.capabilities import BudgetEnvironment
from inferchaos.primitives.memory_budget import (
    MemoryBudget,
    budget_memory,
    budget_name,
    budgets_available,
    find_budget,
)
from inferchaos.primitives.nvml import GpuObservation, GpuProcess, NvmlError, observe_gpu
from inferchaos.primitives.replica_slots import ReplicaRecord, read_records, replica_healthy

logger = logging.getLogger(__name__)

NAME = "device.squat_device_memory"
# What a local replica holds at rest (docs/local-environment.md "What it needs": three processes of about 0.65 GB).
DEFAULT_REPLICA_NEED_BYTES = 1_900_000_000
DEFAULT_FAIL_WITHIN_S = 60.0
# Room for the squatter's own interpreter beside its bytes inside the budget.
SQUATTER_HEADROOM_BYTES = 64 * 1024 * 1024
READY_TIMEOUT_S = 60.0
RELEASE_TIMEOUT_S = 20.0
# How long Serve may take to notice the killed server and start the new replica.
RESTART_WAIT_S = 90.0
# "About the bytes": NVML's used memory must rise by at least this share of the allocation.
RISE_TOLERANCE = 0.9
# Room between NVML's total and the driver's, so a fraction sized from one passes the other's cap.
FRACTION_SLACK = 0.01
# A CUDA context costs some hundreds of MiB beside the allocation itself.
CONTEXT_ALLOWANCE_BYTES = 2 * 1024**3


@dataclass(frozen=True)
class SquatTarget:
    """Everything a squat acts on, resolved and checked by plan; nothing touched yet."""

    device: DeviceRef
    nbytes: int
    total_bytes: int
    free_bytes: int | None
    replica_need_bytes: int | None
    fail_within_s: float
    restart_replica: bool
    max_fraction: float | None = None
    env_id: str = ""
    state_dir: str = ""
    budget: str = ""
    replica: ReplicaRecord | None = None
    others: tuple[str, ...] = ()


@dataclass
class SquatParams:
    """The device (``host:<slot>`` or ``cuda:<index>``), how much of it (``bytes`` or ``fraction``), and the watch."""

    device: str
    # Named as in experiments; YAML may write 2e9, so a whole float is a byte count too.
    bytes: int | float | None = None
    fraction: float | None = None
    backend: str | None = None
    replica_need_bytes: int | float | None = None
    fail_within_s: float = DEFAULT_FAIL_WITHIN_S
    restart_replica: bool | None = None

    def __post_init__(self) -> None:
        ref = self.ref
        if self.backend is not None and self.backend != ref.backend:
            raise ConfigError(
                f"{NAME}: backend {self.backend!r} does not match device {ref.name} ({ref.backend})"
            )
        self.bytes = byte_count(NAME, "bytes", self.bytes)
        self.replica_need_bytes = byte_count(NAME, "replica_need_bytes", self.replica_need_bytes)
        if (self.bytes is None) == (self.fraction is None):
            raise ConfigError(f"{NAME}: give exactly one of 'bytes' or 'fraction' (of the device's total)")
        if self.fraction is not None and not 0.0 < self.fraction <= 1.0:
            raise ConfigError(f"{NAME}: fraction must be in (0, 1], got {self.fraction}")
        if self.fail_within_s <= 0:
            raise ConfigError(f"{NAME}: fail_within_s must be positive, got {self.fail_within_s}")
        if ref.backend == CUDA and self.restart_replica:
            raise ConfigError(f"{NAME}: restart_replica applies to host:<slot> devices only")

    @property
    def ref(self) -> DeviceRef:
        """The device parsed."""
        return parse_device(self.device, NAME)

    def size(self, total: int) -> int:
        """The bytes to squat on a device of ``total`` bytes."""
        return int(self.bytes) if self.bytes is not None else int(total * (self.fraction or 0.0))


def _squat_log(handle_id: str) -> Path:
    return state_root() / "logs" / f"squatter-{handle_id}.log"


@register
class SquatDeviceMemory(TypedFault[SquatParams, object]):
    """Hold device memory in a separate process so the next model load on the device fails."""

    name = NAME
    aliases = ("squat_device_memory",)
    layer = Layer.DEVICE
    params_type = SquatParams

    def _open(self, env: object) -> object:
        # Which environment a squat needs depends on its device: _resolve_host checks it. Revert
        # and evidence work from the ledger entry alone, even with no environment at all.
        return env

    # -- resolve (plan and inject share it) -------------------------------------------------
    def _resolve(self, env: object, params: SquatParams) -> SquatTarget:
        device = params.ref
        if device.backend == CUDA:
            return self._resolve_cuda(env, device, params)
        need = (
            params.replica_need_bytes if params.replica_need_bytes is not None else DEFAULT_REPLICA_NEED_BYTES
        )
        return self._resolve_host(env, device, params, int(need), params.restart_replica is not False)

    def _resolve_host(
        self, env: object, device: DeviceRef, params: SquatParams, need: int, restart: bool
    ) -> SquatTarget:
        if not isinstance(env, BudgetEnvironment):
            raise ConfigError(
                f"{NAME}: {device.name} is a replica's memory budget of the embedded local environment, "
                f"not of {env_name(env)!r}"
            )
        usable, why = budgets_available()
        if not usable:
            # The host, not the experiment, is short of something: the run is skipped, not refused.
            raise Unsupported(
                f"{NAME}: {device.name} is a local replica's memory budget, and budgets cannot be used here: {why}; "
                "no cuda:<index> device can stand in either unless this machine has an NVIDIA GPU"
            )
        state = env.load_state()
        name = budget_name(state.env_id, device.index)
        budget = find_budget(name)
        if budget is None:
            raise ConfigError(
                f"{NAME}: device {device.name} does not exist: environment {state.env_id} has no memory budget {name} "
                f"(replica slots 0..{state.config.workers - 1}, replica_memory_mib {state.config.replica_memory_mib})"
            )
        total = budget.limit_bytes
        size = params.size(total)
        machine = psutil.virtual_memory().total
        if size > HOST_MAX_MACHINE_FRACTION * machine:
            raise ConfigError(
                f"{NAME}: {size} bytes is over the safety cap of {HOST_MAX_MACHINE_FRACTION:.0%} of this machine's {machine} bytes"
            )
        if size + SQUATTER_HEADROOM_BYTES > total:
            raise ConfigError(
                f"{NAME}: {size} bytes does not fit in {device.name}'s {total}-byte budget beside the squatter itself; "
                "the kernel would kill the squatter instead"
            )
        if total - size >= need:
            raise ConfigError(
                f"{NAME}: squatting {size} of {device.name}'s {total} bytes leaves {total - size}, not below the "
                f"{need} a replica needs (replica_need_bytes): the replica would start normally"
            )
        records = read_records(state.replicas_dir)
        replica = next((r for r in records if r.name == f"replica-{device.index}"), None)
        others = tuple(
            r.name for r in records if r.name != f"replica-{device.index}" and r.state == "healthy"
        )
        if restart:
            if replica is None or replica.state != "healthy":
                state_text = replica.state if replica else "absent"
                raise ConfigError(
                    f"{NAME}: replica-{device.index} is {state_text}, not healthy; nothing to restart"
                )
            if not others:
                raise ConfigError(
                    f"{NAME}: restarting replica-{device.index} would leave no healthy replica to serve"
                )
        else:
            free = budget_memory(budget, device.name).free_bytes
            if size + SQUATTER_HEADROOM_BYTES > free:
                raise ConfigError(
                    f"{NAME}: only {free} bytes are free in {device.name} beside the running replica; squatting {size} "
                    "would make the kernel OOM-kill the running replica, which no GPU does (use restart_replica)"
                )
        return SquatTarget(
            device,
            size,
            total,
            None,
            need,
            params.fail_within_s,
            restart,
            None,
            state.env_id,
            str(state.state_dir),
            name,
            replica,
            others,
        )

    def _resolve_cuda(self, env: object, device: DeviceRef, params: SquatParams) -> SquatTarget:
        usable, why = cuda_available()
        if not usable:
            raise Unsupported(f"{NAME}: {device.name} cannot be squatted here: {why}")
        size_info = gpu_size(device.index, self.name)
        size = params.size(size_info.total_bytes)
        # The squatter measures the device with the driver, which may count a little less than NVML.
        cap = params.fraction + FRACTION_SLACK if params.fraction is not None else CUDA_MAX_FRACTION
        if size > CUDA_MAX_FRACTION * size_info.total_bytes:
            raise ConfigError(
                f"{NAME}: {size} bytes is over the safety cap of {CUDA_MAX_FRACTION:.0%} of {device.name}'s "
                f"{size_info.total_bytes} bytes"
            )
        if size_info.free_bytes is not None and size > size_info.free_bytes:
            raise ConfigError(
                f"{NAME}: {device.name} has only {size_info.free_bytes} bytes free; cannot squat {size}"
            )
        env_id = ""
        if isinstance(env, BudgetEnvironment):
            try:
                env_id = env.load_state().env_id
            except EnvironmentNotUp:
                env_id = ""
        need = int(params.replica_need_bytes) if params.replica_need_bytes is not None else None
        return SquatTarget(
            device,
            size,
            size_info.total_bytes,
            size_info.free_bytes,
            need,
            params.fail_within_s,
            False,
            min(cap, CUDA_MAX_FRACTION),
            env_id,
        )

    # -- plan ---------------------------------------------------------------------------------
    def _plan(self, env: object, params: SquatParams) -> Planned:
        target = self._resolve(env, params)
        device = target.device.name
        if target.device.backend == CUDA:
            description = (
                f"start a squatter process that allocates and touches {target.nbytes} of {device}'s "
                f"{target.total_bytes} bytes and holds them until revert"
            )
            targets = [f"device:{device}", "process:squatter (new)"]
        else:
            description = f"squat {target.nbytes} of {device}'s {target.total_bytes} bytes (memory budget {target.budget})"
            targets = [f"device:{device}", f"memory-cgroup:{target.budget}", "process:squatter (new)"]
            if target.restart_replica and target.replica is not None:
                description += (
                    f"; first SIGKILL {target.replica.name}'s vLLM process group (pid {target.replica.vllm_pid}) so Serve "
                    f"restarts it onto the squatted budget, where it must fail within {target.fail_within_s:.0f} s while "
                    f"{', '.join(target.others)} keep serving"
                )
                targets += [f"replica:{target.replica.name}", f"process-group:{target.replica.vllm_pid}"]
        state: JsonObject = {
            "backend": target.device.backend,
            "device": target.device.name,
            "bytes": target.nbytes,
            "total_bytes": target.total_bytes,
            "replica_need_bytes": target.replica_need_bytes,
            "fail_within_s": target.fail_within_s,
            "restart_replica": target.restart_replica,
            "max_fraction": target.max_fraction,
            "env_id": target.env_id,
            "state_dir": target.state_dir,
            "budget": target.budget,
            "replica": target.replica.name if target.replica else "",
            "replica_record": asdict(target.replica) if target.replica else None,
            "other_replicas": list(target.others),
        }
        # Recorded with the bytes the plan sized (a fraction resolved), so revert re-reads the same squat.
        given = {k: v for k, v in asdict(params).items() if v is not None and k != "fraction"}
        return Planned(
            description + "; revert ends the squatter", targets, state, {**given, "bytes": target.nbytes}
        )

    # -- inject -------------------------------------------------------------------------------
    def _act(self, env: object, params: SquatParams, handle: FaultHandle, ledger: Ledger) -> None:
        s = handle.state
        record = s.get("replica_record")
        target = SquatTarget(
            parse_device(s["device"], NAME),
            s["bytes"],
            s["total_bytes"],
            None,
            s["replica_need_bytes"],
            s["fail_within_s"],
            s["restart_replica"],
            s["max_fraction"],
            s["env_id"],
            s["state_dir"],
            s["budget"],
            ReplicaRecord(**record) if record else None,
            tuple(s["other_replicas"]),
        )
        s["squatter_log"] = str(_squat_log(handle.id))
        ledger.record(handle)
        try:
            if target.device.backend == HOST:
                self._inject_host(target, handle, ledger)
            else:
                self._inject_cuda(target, handle, ledger)
        except InferchaosError:
            logger.warning("%s: inject failed; reverting what it did", self.name)
            self.revert(env, handle, ledger)
            raise

    def _start(
        self, target: SquatTarget, handle: FaultHandle, ledger: Ledger, budget: MemoryBudget | None
    ) -> None:
        spec = SquatterSpec(
            backend=target.device.backend,
            device=target.device.name,
            nbytes=target.nbytes,
            squat_id=handle.id,
            log_path=Path(handle.state["squatter_log"]),
            env_id=target.env_id,
            budget=budget,
            max_fraction=target.max_fraction,
        )
        pid = start_squatter(spec)
        handle.state["squatter_pid"] = pid
        handle.state["squatter_started_at"] = time.time()
        ledger.record(handle)
        ready = wait_ready(pid, spec.log_path, READY_TIMEOUT_S)
        handle.state["squat_ready_at"] = ready.at
        handle.state["allocated_bytes"] = ready.allocated_bytes
        handle.state["squatter_report"] = ready.report
        handle.injected_at = handle.injected_at or ready.at

    def _inject_host(self, target: SquatTarget, handle: FaultHandle, ledger: Ledger) -> None:
        budget = find_budget(target.budget)
        if budget is None:
            raise FaultError(f"{NAME}: memory budget {target.budget} vanished before the squat")
        if target.restart_replica and target.replica is not None:
            killed = kill_replica_server(target.replica, target.env_id)
            # The restart is the first action: the fault counts as injected from here.
            handle.injected_at = handle.state["restarted_at"] = time.time()
            handle.state["killed_pids"] = killed
            ledger.record(handle)
            handle.state["budget_released_at"] = wait_budget_released(budget, killed, RELEASE_TIMEOUT_S)
        self._start(target, handle, ledger, budget)
        report = handle.state["squatter_report"]
        handle.state["observed_bytes"] = int(report.get("rss_after_bytes", 0)) - int(
            report.get("rss_before_bytes", 0)
        )
        try:
            memory = budget_memory(budget, target.device.name)
        except ProbeError as e:
            raise FaultError(f"{NAME}: preflight read of {target.device.name} failed: {e}") from e
        self._record_preflight(handle, memory.free_bytes, memory.used_bytes)
        ledger.record(handle)
        if not (target.restart_replica and target.replica is not None):
            return
        # Attempts Serve began before the squat held raced the injector: the one judged is the
        # first to start on the flagged device (restart.py).
        handle.state["attempts_since"] = handle.state["preflight"]["at"]
        watch = watch_restart(
            lambda: read_records(Path(target.state_dir) / "replicas"),
            target.replica.name,
            handle.state["restarted_at"],
            target.fail_within_s,
            RESTART_WAIT_S,
            since=handle.state["attempts_since"],
        )
        handle.state.update(watch.to_state())
        handle.state["squatter_alive_at_outcome"] = bool(
            squatter_process(handle.state["squatter_pid"], handle.id)
        )
        ledger.record(handle)

    def _inject_cuda(self, target: SquatTarget, handle: FaultHandle, ledger: Ledger) -> None:
        index = target.device.index
        try:
            handle.state["used_before_bytes"] = observe_gpu(index).memory.used_bytes
        except NvmlError as e:
            handle.state["nvml_unavailable"] = str(e)
        self._start(target, handle, ledger, None)
        report = handle.state["squatter_report"]
        free_after = report.get("free_after_bytes")
        if "nvml_unavailable" not in handle.state:
            observation = observe_gpu(index)
            handle.state["used_after_bytes"] = observation.memory.used_bytes
            handle.state["compute_processes"] = [asdict(p) for p in observation.processes]
            free_after = observation.memory.free_bytes
        if target.replica_need_bytes is not None and free_after is not None:
            self._record_preflight(handle, int(free_after), None)
        ledger.record(handle)

    @staticmethod
    def _record_preflight(handle: FaultHandle, free_bytes: int, used_bytes: int | None) -> None:
        need = handle.state["replica_need_bytes"]
        flagged = need is not None and free_bytes < need
        now = time.time()
        handle.state["preflight"] = {
            "device_free_bytes": free_bytes,
            "device_used_bytes": used_bytes,
            "replica_need_bytes": need,
            "flagged": flagged,
            "at": now,
        }
        handle.state["preflight_flagged_at"] = now if flagged else None

    # -- revert -------------------------------------------------------------------------------
    def _undo(self, env: object, params: SquatParams, handle: FaultHandle, ledger: Ledger) -> None:
        """End the squatter named in the ledger entry (checked by its command line).

        Needs nothing but the entry: it works in a later process and after a crash. Serve's next
        start-up attempt of the replica then succeeds on its own.
        """
        ended = [end_squatter(proc) for proc in squatter_process(handle.state.get("squatter_pid"), handle.id)]
        if ended:
            handle.state["squatter_ended"] = ended[0]
            logger.info("%s: squatter on %s %s", self.name, handle.state.get("device"), ended[0])
        if handle.reverted_at is None:
            handle.reverted_at = time.time()
            ledger.record(handle)

    # -- evidence -----------------------------------------------------------------------------
    def _evidence(self, env: object, params: SquatParams, handle: FaultHandle) -> Evidence:
        s = handle.state
        alive = bool(squatter_process(s.get("squatter_pid"), handle.id))
        held = int(s.get("allocated_bytes", 0)) >= int(s["bytes"]) and "squat_ready_at" in s
        timestamps = {
            k: float(v)
            for k, v in {
                "squat_ready_at": s.get("squat_ready_at"),
                "preflight_flagged_at": s.get("preflight_flagged_at"),
                "restarted_at": s.get("restarted_at"),
                "budget_released_at": s.get("budget_released_at"),
                "squatter_started_at": s.get("squatter_started_at"),
                "injected_at": handle.injected_at,
                "reverted_at": handle.reverted_at,
            }.items()
            if v
        }
        symptoms: JsonObject = {
            "device": s["device"],
            "requested_bytes": s["bytes"],
            "allocated_bytes": s.get("allocated_bytes"),
            "squatter_pid": s.get("squatter_pid"),
            "squatter_alive": alive,
            "preflight": s.get("preflight"),
            # How long taking and touching the bytes took: the squat's side of the race above.
            "squat_took_s": s.get("squatter_report", {}).get("hold_s"),
        }
        if s["backend"] == HOST:
            return self._host_evidence(env, handle, held, alive, symptoms, timestamps)
        return self._cuda_evidence(handle, held, alive, symptoms, timestamps)

    def _host_evidence(
        self,
        env: object,
        handle: FaultHandle,
        held: bool,
        alive: bool,
        symptoms: JsonObject,
        timestamps: dict[str, float],
    ) -> Evidence:
        s = handle.state
        symptoms.update({"budget": s["budget"], "observed_bytes": s.get("observed_bytes")})
        flagged_at = s.get("preflight_flagged_at")
        if not s.get("restart_replica"):
            holds = held and (alive or handle.reverted_at is not None)
            bit = holds and flagged_at is not None
            reason = (
                f"the squatter holds {s.get('allocated_bytes')} bytes of {s['device']}; the preflight flags it"
                if bit
                else f"the squatter did not hold its bytes on {s['device']} or the preflight did not flag it"
            )
            return Evidence(bit=bit, reason=reason, symptoms=symptoms, timestamps=timestamps)

        restarted_at = float(s["restarted_at"]) if s.get("restarted_at") else None
        records = self._records(env, s)
        replica = s["replica"]
        current = next((r for r in records if r.name == replica), None)
        since = float(s.get("attempts_since") or restarted_at or 0.0)
        seen = [RestartAttempt(**a) for a in s.get("attempts", [])]
        raced = [RestartAttempt(**a) for a in s.get("raced_attempts", [])]
        if restarted_at:
            attempts = merge_attempts(seen, current, since)
            raced = merge_attempts(raced, current, restarted_at, until=since)
        else:
            attempts = seen
        outcome = assess_attempts(
            attempts, raced, restarted_at or 0.0, float(s["fail_within_s"]), time.time()
        )
        first = outcome.attempt
        preflight_before = bool(flagged_at and first and flagged_at < first.started_at)
        others_now = {
            r.name: r.state == "healthy" and replica_healthy(r) for r in records if r.name != replica
        }
        others_seen = s.get("others_unhealthy", [])
        others_healthy = bool(others_now) and all(others_now.values()) and not others_seen
        holds = (
            held and bool(s.get("squatter_alive_at_outcome")) and (alive or handle.reverted_at is not None)
        )
        healthy_again = [a for a in attempts if a.state == "healthy" and a.ready_at]
        if first and first.failed_at:
            timestamps["replica_failed_at"] = float(first.failed_at)
        if first:
            timestamps["replica_started_at"] = float(first.started_at)
        if healthy_again:
            timestamps["replica_healthy_at"] = float(healthy_again[-1].ready_at or 0.0)
        symptoms.update(
            {
                "replica": replica,
                "outcome": outcome.verdict,
                "failure": first.failure if first else "",
                "failed_after_start_s": outcome.failed_after_start_s,
                "restart_to_failure_s": outcome.restart_to_failure_s,
                "fail_within_s": s["fail_within_s"],
                "start_attempts_seen": len(attempts),
                # Begun by Serve before the squat held (judged only where they hung or started).
                "start_attempts_before_the_squat_held": len(raced),
                "preflight_before_restart": preflight_before,
                "other_replicas_healthy": dict(others_now),
                "other_replicas_unhealthy_seen": others_seen,
                "squatter_held_through_outcome": bool(s.get("squatter_alive_at_outcome")),
            }
        )
        bit = holds and preflight_before and outcome.failed_fast and others_healthy
        reason = self._host_reason(
            s, bit, holds, preflight_before, outcome.verdict, first, others_healthy, others_now, others_seen
        )
        if raced and first is not None and first not in raced:
            reason += f"; {len(raced)} earlier attempt(s) began before the squat held and were not judged"
        return Evidence(bit=bit, reason=reason, symptoms=symptoms, timestamps=timestamps)

    @staticmethod
    def _host_reason(
        s: dict[str, Any],
        bit: bool,
        holds: bool,
        preflight_before: bool,
        verdict: str,
        first: RestartAttempt | None,
        others_healthy: bool,
        others_now: dict[str, bool],
        others_seen: list[str],
    ) -> str:
        replica, device, fail_within = s["replica"], s["device"], float(s["fail_within_s"])
        if bit and first is not None and first.failed_at is not None:
            preflight = s["preflight"]
            return (
                f"{replica} failed {first.failed_at - first.started_at:.1f} s into start-up on {device} "
                f"({first.failure}) while the squatter held {s.get('allocated_bytes')} bytes; the preflight had "
                f"flagged {preflight['device_free_bytes']} bytes free < {preflight['replica_need_bytes']} needed "
                f"before it started; {', '.join(sorted(others_now))} kept serving"
            )
        if not holds:
            return f"the squatter did not hold its {s['bytes']} bytes on {device} through the restart"
        if verdict == "hung" and first is not None:
            return (
                f"{replica} hung: still starting {time.time() - first.started_at:.0f} s after it began on the "
                f"squatted {device}, beyond fail_within_s {fail_within:.0f}"
            )
        if verdict == "started":
            return f"{replica} started and became healthy despite the squat on {device}"
        if verdict == "failed_late" and first is not None and first.failed_at is not None:
            return f"{replica} failed only {first.failed_at - first.started_at:.1f} s into start-up, beyond fail_within_s {fail_within:.0f}"
        if verdict == "superseded":
            return f"{replica}'s first attempt ended before its failure reason could be read"
        if verdict == "not_restarted":
            return f"no new start-up of {replica} was seen after its server was killed"
        if verdict == "starting":
            return f"{replica} is still starting on {device}; no outcome yet"
        if first is not None and first.state == "failed" and not first.failure:
            return f"{replica} failed but its failure reason was not captured"
        if not preflight_before:
            return "the preflight did not flag the device before the new replica started"
        if not others_healthy:
            return f"the other replicas did not stay healthy: now {others_now}, seen {others_seen}"
        return f"{replica} did not fail fast on {device}"

    @staticmethod
    def _records(env: object, s: dict[str, Any]) -> list[ReplicaRecord]:
        # Stopped records included: a failed attempt's clean-up may mark it stopped.
        if s.get("state_dir"):
            return read_records(Path(s["state_dir"]) / "replicas")
        if not isinstance(env, BudgetEnvironment):
            raise ConfigError(
                f"{NAME}: the entry names no state_dir, and {env_name(env)!r} records no replicas"
            )
        try:
            return read_records(env.load_state().replicas_dir)
        except EnvironmentNotUp:
            return []

    def _cuda_evidence(
        self,
        handle: FaultHandle,
        held: bool,
        alive: bool,
        symptoms: JsonObject,
        timestamps: dict[str, float],
    ) -> Evidence:
        s = handle.state
        allocated = int(s.get("allocated_bytes", 0))
        observation: GpuObservation | None = None
        if alive and handle.reverted_at is None and "nvml_unavailable" not in s:
            try:
                observation = observe_gpu(int(s["device"].split(":")[1]))
            except NvmlError as e:
                symptoms["nvml_error"] = str(e)
        holds = held and (alive or handle.reverted_at is not None)
        if "nvml_unavailable" in s:
            report = s.get("squatter_report", {})
            drop = int(report.get("free_before_bytes", 0)) - int(report.get("free_after_bytes", 0))
            symptoms.update({"nvml": s["nvml_unavailable"], "driver_free_drop_bytes": drop})
            bit = holds and drop >= RISE_TOLERANCE * allocated
            reason = (
                f"NVML unavailable; the CUDA driver's free memory on {s['device']} fell by {drop} bytes "
                f"for {allocated} allocated" + ("" if bit else ": not the squat's size")
            )
            return Evidence(bit=bit, reason=reason, symptoms=symptoms, timestamps=timestamps)
        used_after = observation.memory.used_bytes if observation else s.get("used_after_bytes")
        processes = (
            observation.processes
            if observation
            else [GpuProcess(**p) for p in s.get("compute_processes", [])]
        )
        pids = [p.pid for p in processes]
        rise = (
            int(used_after) - int(s["used_before_bytes"])
            if used_after is not None and "used_before_bytes" in s
            else None
        )
        listed = s.get("squatter_pid") in pids
        # In a container NVML may list host pids; a process holding about the allocation is then the squatter.
        sized = any(
            p.used_bytes is not None
            and RISE_TOLERANCE * allocated <= p.used_bytes <= allocated + CONTEXT_ALLOWANCE_BYTES
            for p in processes
        )
        rose = rise is not None and rise >= RISE_TOLERANCE * allocated
        symptoms.update(
            {
                "observed_used_before_bytes": s.get("used_before_bytes"),
                "observed_used_after_bytes": used_after,
                "observed_rise_bytes": rise,
                "compute_pids": list(pids),
                "squatter_pid_listed": listed,
            }
        )
        bit = holds and rose and (listed or sized)
        if bit:
            reason = f"NVML shows {s['device']}'s used memory up {rise} bytes for {allocated} allocated, " + (
                "with the squatter's pid among the compute processes"
                if listed
                else "held by one compute process"
            )
        elif not holds:
            reason = f"the squatter did not hold its {s['bytes']} bytes on {s['device']}"
        else:
            reason = f"NVML did not show the squat on {s['device']}: used rose by {rise} bytes, squatter listed: {listed}"
        return Evidence(bit=bit, reason=reason, symptoms=symptoms, timestamps=timestamps)
