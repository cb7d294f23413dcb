"""The inferchaos runner: baseline, inject, sample during, always revert, measure recovery, judge.

Order (issue "Experiments and the runner"): everything is validated before anything is
touched; the baseline is sampled and judged (not met -> `aborted`, never a pass); the fault is
injected with its ledger entry first; stop conditions are checked on every tick; the revert
always happens (success, failure, exception, Ctrl-C/SIGTERM); recovery is measured; the run
folder is written and the exit code follows the verdict.
"""

from __future__ import annotations

import asyncio
import logging
import math
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from inferchaos.errors import (
    ConfigError,
    EnvironmentError_,
    InferchaosError,
    PlatformDidNotRecover,
    Unsupported,
)
from inferchaos.faults.base import NODE_DEAD_AT, Evidence, Fault, FaultHandle, FaultPlan
from inferchaos.faults.ledger import Ledger
from inferchaos.faults.registry import get_fault
from inferchaos.primitives.alert_rules import CLUSTER, alerts_for
from inferchaos.primitives.capabilities import Environment
from inferchaos.reports.verdict_schema import (
    NO_EFFECT,
    AllowsRecord,
    DetectorFiringRecord,
    FaultRecord,
    HealedRecord,
    LayerRecord,
    PlatformFailureRecord,
    PlatformRecord,
    SloRecord,
    Status,
    TimingRecord,
    TriageRecord,
    Verdict,
)
from inferchaos.run.controls import ControlSpec, SabotageAt, control_outcome
from inferchaos.run.env_config import AllowList, ensure_plan_is_allowed
from inferchaos.run.journal import Act, FaultActs, build_journal
from inferchaos.run.probe_set import ProbeFactory, build_probes, close_probes, slo_replicas
from inferchaos.run.redact import redact, secret_values
from inferchaos.run.spec import ExperimentSpec
from inferchaos.steady_state.baseline_gate import sick_baseline
from inferchaos.steady_state.canary import CanaryPace, phase_between_ticks
from inferchaos.steady_state.detection import FaultAlert, detect_signals
from inferchaos.steady_state.evaluation import (
    Evaluation,
    RecoveryResult,
    SloResult,
    counts_toward,
    evaluate,
    evaluate_slo,
    layer_verdicts,
    missing_baselines,
    phase_windows,
    recover,
    recovery_window_s,
)
from inferchaos.steady_state.platform import (
    NO_DETECTOR_FIRING,
    PlatformFailure,
    PlatformSteadyState,
    declaration,
    detector_evolution,
    failure_beside,
    fault_symptoms,
    healed_replicas,
    is_platform,
    judged_again,
    platform_failure,
    promised_availability,
    stop_condition_failure,
    triage_failure,
    with_platform,
)
from inferchaos.steady_state.probe_base import Probe
from inferchaos.steady_state.sampler import Sampler, Tick
from inferchaos.steady_state.slo import Phase, SloSpec
from inferchaos.steady_state.timeline import Mark, Timeline, TimelineWriter
from inferchaos.steady_state.triage import triage

logger = logging.getLogger(__name__)

ProgressFn = Callable[[str], None]
# Seconds after a breach in which triage still looks for its cause (see steady_state.triage).
TRIAGE_LOOKAHEAD_S = 10.0


class StopConditionBreached(InferchaosError):
    """A guardrail fired during the fault: roll back at once and end `aborted`."""


class SamplerStopped(InferchaosError):
    """The sampler ended with an exception: no more rows, no stop conditions; roll back and end `error`."""


@dataclass
class RunOptions:
    out_dir: Path = Path("runs")
    interval_s: float = 1.0
    dry_run: bool = False
    canary_rate_per_s: float = 2.0
    run_dir: Path | None = None
    allow: AllowList | None = None
    # A negative control: the scenario runs against a platform this breaks (inferchaos.run.controls).
    control: ControlSpec | None = None
    # End the run once an SLO of the baseline or the fault window has failed (or a stop condition
    # fired): revert and release at once, without waiting out a recovery that cannot pass it.
    fail_fast: bool = False


@dataclass
class _RunState:
    handle: FaultHandle | None = None
    evidence_during: Evidence | None = None
    evidence_after: Evidence | None = None
    action_output: dict[str, Any] | None = None
    rollback_output: dict[str, Any] | None = None
    stop: dict[str, Any] | None = None
    interrupted: bool = False
    errors: list[str] = field(default_factory=list)
    # Reverts that did their part while the platform did not come back (PlatformDidNotRecover):
    # the platform's failure, so the run ends `failed`, not `error` as for the harness's own.
    no_recovery: list[str] = field(default_factory=list)
    sampler_error: BaseException | None = None
    # The phase an exception broke, kept before the revert renames the phase to "reverting".
    failed_phase: str | None = None
    # A control's sabotage faults, and what reverting them and a held fault after the run did.
    sabotage: list[FaultHandle] = field(default_factory=list)
    released: list[dict[str, Any]] = field(default_factory=list)
    # For the journal: when the scenario fault's inject and revert ran (epoch seconds), why the
    # inject failed, and whether the recovery phase was sampled.
    inject_times: tuple[float, float] | None = None
    inject_error: str | None = None
    revert_times: tuple[float, float] | None = None
    recovery_sampled: bool = False
    # With RunOptions.fail_fast: what had failed when the run ended without its recovery phase.
    failed_fast: list[str] = field(default_factory=list)


def check_environment(env: Environment) -> None:
    """The environment must answer and serve before anything is injected."""
    status = env.status()
    if not status.up:
        raise EnvironmentError_(f"the {env.name} environment is not up; start it with `inferchaos env up`")
    if not status.front_door.healthy:
        raise EnvironmentError_(
            f"the front door {status.front_door.url} does not serve; check `inferchaos env status`"
        )


def plan_run(spec: ExperimentSpec, env: Environment) -> tuple[Fault, FaultPlan]:
    """Validate the fault against the live environment (blast radius included); touches nothing."""
    check_environment(env)
    fault = get_fault(spec.fault.fault)
    try:
        return fault, fault.plan(env, dict(spec.fault.params))
    except ConfigError as e:
        # Arguments that only the live environment can refuse (a replica it does not have)
        # are still bad input in the file: name the file and the key, as validation does.
        raise ConfigError(f"{spec.path}: method[{spec.fault.index}].provider.arguments: {e}") from e


def plan_sabotage(control: ControlSpec, env: Environment) -> list[FaultPlan]:
    """Plan every sabotage fault of a control against the live environment; touches nothing."""
    plans = []
    for step in control.sabotage:
        try:
            plans.append(get_fault(step.fault).plan(env, dict(step.params)))
        except ConfigError as e:
            raise ConfigError(f"{control.path}: control.sabotage[{step.index}].arguments: {e}") from e
    return plans


def describe_plan(
    spec: ExperimentSpec,
    plan: FaultPlan,
    control: ControlSpec | None = None,
    sabotage: Sequence[FaultPlan] = (),
) -> str:
    """The --dry-run text: what would run and what would be touched (a control's sabotage too)."""
    lines = [
        f"experiment: {spec.name} — {spec.title}",
        f"environment: {spec.env}",
        f"baseline: {spec.baseline_s:g} s, then {plan.fault} ({plan.layer}) for {spec.fault.duration_s:g} s",
        f"fault: {plan.description}",
        "would touch:",
        *[f"  - {target}" for target in plan.targets],
        "SLOs:",
        *[
            f"  - {s.name}: {s.agg}({s.probe}) {s.op.value} {s.threshold_text} [{s.phase.value}]"
            for s in spec.slos.slos
        ],
    ]
    if spec.slos.recovery:
        r = spec.slos.recovery
        lines.append(f"recovery: {', '.join(r.steady)} hold {r.hold_s:g} s within {r.describe()}")
    lines += [
        f"stop condition: {s.name}: {s.agg}({s.probe}) {s.op.value} {s.threshold:g}"
        for s in spec.stop_conditions
    ]
    if control is not None:
        lines.append(f"negative control: {control.describe()}")
        for step, each in zip(control.sabotage, sabotage, strict=True):
            lines.append(f"  sabotage at {step.at.value}: {each.fault}: {each.description}")
            lines += [f"    - {target}" for target in each.targets]
    return "\n".join(lines)


def _latest(timeline: Timeline, probe: str, since: float, agg: str = "last") -> float | None:
    values = [
        r.value
        for r in timeline.rows
        if r.probe == probe and r.t >= since and r.ok and not math.isnan(r.value)
    ]
    if not values:
        return None
    if agg == "max":
        return max(values)
    if agg == "sum_last":
        return values[-1]
    if agg == "mean":
        return sum(values) / len(values)
    if agg == "p95":
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return values[-1]


def key_probes(timeline: Timeline, now: float) -> str:
    """One line of the numbers a person watches during a run."""
    window = now - 5.0
    parts = []
    for label, probe, agg, fmt in (
        ("ok", "canary.success", "mean", "{:.0%}"),
        ("ttft p95", "canary.ttft_s", "p95", "{:.2f}s"),
        ("kv", "vllm.kv_cache_usage", "max", "{:.2f}"),
        ("waiting", "vllm.num_requests_waiting", "max", "{:g}"),
        ("nodes", "ray.nodes_alive", "last", "{:g}"),
        ("free gpus", "ray.gpus_available", "last", "{:g}"),
        ("pending pgs", "ray.pending_pgs", "last", "{:g}"),
        ("load ttft p95", "load.ttft_p95_s", "last", "{:.2f}s"),
    ):
        value = _latest(timeline, probe, window, agg)
        parts.append(f"{label} {fmt.format(value) if value is not None else '-'}")
    return " | ".join(parts)


class Runner:
    """Runs one validated experiment against one environment."""

    def __init__(
        self,
        spec: ExperimentSpec,
        env: Environment,
        options: RunOptions,
        progress: ProgressFn | None = None,
        probe_factory: ProbeFactory = build_probes,
    ) -> None:
        self.spec = spec
        self._probe_factory = probe_factory
        self.env = env
        self.options = options
        self._progress = progress or (lambda message: logger.info("%s", message))
        self.ledger = Ledger()
        self.fault = get_fault(spec.fault.fault)
        self.run_dir = options.run_dir or options.out_dir / f"{time.strftime('%Y%m%d-%H%M%S')}-{spec.name}"
        self._state = _RunState()
        self._phase = "starting"
        self._phase_ends = 0.0
        self._last_progress = 0.0
        # Set by every tick: recovery is judged as soon as new rows are in, not up to an
        # interval later (each run of a game day otherwise idles about half an interval).
        self._ticked: asyncio.Event | None = None

    # -- entry ------------------------------------------------------------------------------
    def run(self) -> Verdict:
        """Run the experiment; the verdict is also written to the run folder."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        writer = TimelineWriter(self.run_dir / "timeline.csv")
        timeline = Timeline(writer)
        started = time.time()
        try:
            asyncio.run(self._run(timeline))
        except KeyboardInterrupt:
            self._state.interrupted = True
        finally:
            writer.close()
        verdict = self._judge(timeline, started)
        self._write_outputs(verdict)
        return verdict

    def skip(self, why: Unsupported) -> Verdict:
        """Record a run the fault's plan found this host cannot hold: status ``skipped``, nothing touched.

        The run folder holds what every run folder holds (an empty timeline, the journal, the
        verdict, the reports), so a game day's index and a CI's junit show the skip and its reason.
        """
        self.run_dir.mkdir(parents=True, exist_ok=True)
        TimelineWriter(self.run_dir / "timeline.csv").close()
        now = time.time()
        verdict = Verdict(
            experiment=self.spec.name,
            title=self.spec.title,
            env=self.env.name,
            status=Status.SKIPPED,
            reason=str(why),
            started_at=now,
            ended_at=now,
            triage=TriageRecord("unknown", "nothing was injected: the scenario cannot run here"),
        )
        # No progress line: the verdict's own line says "skipped: <reason>" once.
        self._write_outputs(verdict)
        return verdict

    # -- the run ----------------------------------------------------------------------------
    async def _run(self, timeline: Timeline) -> None:
        loop = asyncio.get_running_loop()
        main = asyncio.current_task()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._interrupt, main)
        try:
            await self._phases(timeline)
        except asyncio.CancelledError:
            self._state.interrupted = True
        except InferchaosError as e:
            # Whatever was injected has been reverted on the way out (_fault_window's finally);
            # the run still ends with a verdict that names the phase and the cause.
            self._state.errors.append(f"{self._state.failed_phase or self._phase} failed: {e}")
        except Exception as e:  # a bug must not cost the verdict; its traceback is logged
            phase = self._state.failed_phase or self._phase
            logger.exception("the %s phase of %s raised", phase, self.spec.name)
            self._state.errors.append(f"{phase} failed: {type(e).__name__}: {e}")
        finally:
            try:
                await self._release_control()
            finally:
                for sig in (signal.SIGINT, signal.SIGTERM):
                    loop.remove_signal_handler(sig)

    def _interrupt(self, task: asyncio.Task[Any] | None) -> None:
        if self._state.interrupted:
            # One cancellation is enough: a second one could only cut short the revert or the
            # canary's stop that the first one started.
            self._progress("interrupted again: still rolling back; the revert runs to its end")
            return
        self._progress("interrupted: rolling back before exit")
        self._state.interrupted = True
        if task is not None:
            task.cancel()

    async def _phases(self, timeline: Timeline) -> None:
        spec = self.spec
        self.env.connect_ray()
        pace = CanaryPace(self.options.canary_rate_per_s, spec.canary_timeout_s, spec.canary_max_in_flight)
        named = slo_replicas((*spec.slos.slos, *spec.stop_conditions))
        probes, canary = self._probe_factory(self.env, pace, named)
        sampler = Sampler(
            probes,
            timeline,
            self.options.interval_s,
            on_tick=self._on_tick(timeline),
            timeouts=self._timeouts(probes),
        )
        await canary.start(phase_between_ticks(self.options.canary_rate_per_s, self.options.interval_s))
        sampling = asyncio.create_task(sampler.run())
        sampling.add_done_callback(self._sampler_ended)
        try:
            timeline.mark(Mark.BASELINE_START, time.time())
            await self._inject_sabotage(SabotageAt.BASELINE)
            if self._state.errors:
                return
            await self._wait_phase("baseline", spec.baseline_s)
            await self._extend_baseline(timeline)
            baseline_failures = self._baseline_failures(timeline)
            if baseline_failures:
                await self._let_stuck_requests_end(timeline, baseline_failures)
                self._state.stop = {
                    "kind": "baseline",
                    "reason": "the platform was not steady before the fault: " + "; ".join(baseline_failures),
                }
                return
            # After the platform's own baseline checks, which name a failure; a slow baseline
            # otherwise scales no bound: an error, nothing injected.
            if sick := sick_baseline(timeline, self.env.sane_baseline):
                self._state.errors.append(sick)
                return
            await self._fault_window(timeline)
        finally:
            sampler.stop()
            await asyncio.gather(sampling, return_exceptions=True)
            await canary.stop()
            await close_probes(probes)
            timeline.mark(Mark.END, time.time())

    async def _let_stuck_requests_end(self, timeline: Timeline, failures: list[str]) -> None:
        """After a baseline that failed, sample on while a canary request is stuck (at most one
        request timeout): a request stuck in a hung replica ends at its timeout, and its failure
        names the replica, so the verdict can name what was not steady."""
        timeout_s = self.spec.canary_timeout_s
        end = time.monotonic() + timeout_s
        while time.monotonic() < end and (_latest(timeline, "canary.oldest_wait_s", 0.0) or 0.0) > 1.0:
            if self._phase != "baseline (stuck)":
                self._progress(
                    f"baseline not met ({'; '.join(failures)}); a request is stuck: "
                    f"sampling up to {timeout_s:g} s more to name what failed"
                )
            await self._wait_phase("baseline (stuck)", min(1.0, end - time.monotonic()))

    async def _extend_baseline(self, timeline: Timeline) -> None:
        """Sample on, for at most one more baseline's length, while a baseline-relative SLO has
        nothing to scale from (:func:`missing_baselines`)."""
        missing = missing_baselines(timeline, self.spec.slos.slos)
        if not missing:
            return
        extra = self.spec.baseline_s
        self._progress(
            f"baseline: nothing yet to scale {', '.join(slo.name for slo in missing)} from; "
            f"sampling up to {extra:g} s more"
        )
        end = time.monotonic() + extra
        while missing and time.monotonic() < end:
            await self._wait_phase("baseline", min(1.0, end - time.monotonic()))
            missing = missing_baselines(timeline, self.spec.slos.slos)

    def _sampler_ended(self, task: asyncio.Task[int]) -> None:
        # An exception in a tick (its on_tick: stop conditions, progress) ends the sampler; the
        # run must not go on blind, without its guardrails: the phase waits raise SamplerStopped.
        if not task.cancelled() and task.exception() is not None:
            self._state.sampler_error = task.exception()

    def _ensure_sampling(self) -> None:
        e = self._state.sampler_error
        if e is not None:
            raise SamplerStopped(f"the sampler stopped: {type(e).__name__}: {e}") from e

    def _timeouts(self, probes: list[Probe]) -> dict[str, float]:
        # Ray's state API is the slowest reader; it may use the whole interval.
        return {p.name: self.options.interval_s for p in probes if p.name == "ray"}

    async def _fault_window(self, timeline: Timeline) -> None:
        spec = self.spec
        self._phase, self._phase_ends = "injecting", time.time()
        # The during phase starts when inferchaos starts to act, not when the fault's own act
        # lands: a probe read that began before the act may finish after it, and would
        # otherwise count a symptom as baseline. The fault's exact times stay in its evidence.
        timeline.mark(Mark.INJECTED, time.time())
        try:
            await self._inject_sabotage(SabotageAt.BEFORE_INJECT)
            if self._state.errors:
                return
            errors_before, inject_started = len(self._state.errors), time.time()
            try:
                self._state.handle = await self._inject(self.fault, spec.fault.params)
            finally:
                self._state.inject_times = (inject_started, time.time())
                self._state.inject_error = "; ".join(self._state.errors[errors_before:]) or None
                # The ledger holds the handle even if inject failed midway: find it for the revert.
                if self._state.handle is None:
                    live = [h for h in self.ledger.entries() if h.fault == spec.fault.fault]
                    self._state.handle = live[-1] if live else None
            handle = self._state.handle
            if handle is None or self._state.errors:
                return
            self._progress(f"injected {spec.fault.fault}")
            await self._inject_sabotage(SabotageAt.INJECT)
            if self._state.errors:
                return
            remaining = spec.fault.duration_s - (time.time() - (handle.injected_at or time.time()))
            await self._wait_phase("during", max(0.0, remaining))
            await self._read_evidence_during(handle)
            # A control's break that would have kept the fault from biting starts now, before
            # the revert, so that it is in place for the whole recovery window.
            await self._inject_sabotage(SabotageAt.REVERT)
        except StopConditionBreached:
            self._progress(f"stop condition fired: {self._state.stop['reason'] if self._state.stop else ''}")
            if self._state.handle is not None:
                # What the fault did before the guardrail fired still belongs in the verdict.
                await self._read_evidence_during(self._state.handle)
        except Exception:
            self._state.failed_phase = self._phase
            raise
        finally:
            await self._revert(timeline)
        if self.options.fail_fast and not (self._state.interrupted or self._state.errors):
            self._state.failed_fast = self._failed_before_recovery(timeline)
            if self._state.failed_fast:
                self._progress(
                    f"--fail-fast: {', '.join(self._state.failed_fast[:3])} failed; "
                    "ending without waiting out recovery"
                )
                return
        # Only into a recovery that will be sampled: not after a revert that waited out the platform.
        if self._state.handle is not None and not (
            self._state.interrupted or self._state.errors or self._state.no_recovery
        ):
            await self._inject_sabotage(SabotageAt.RECOVERY)
        # A revert that waited out the platform leaves no recovery to sample (its wait outlasts the window).
        if self._state.handle is not None and not (
            self._state.interrupted or self._state.errors or self._state.no_recovery
        ):
            self._state.recovery_sampled = True
            await self._recovery(timeline)
            self._state.evidence_after = await asyncio.to_thread(
                self.fault.evidence, self.env, self._state.handle
            )

    async def _inject(
        self, fault: Fault, params: dict[str, Any], on_done: Callable[[FaultHandle], None] | None = None
    ) -> FaultHandle | None:
        """Inject in a thread; a Ctrl-C waits for the act to finish so the revert undoes all of it.

        ``on_done`` receives the handle of an act that finished after a Ctrl-C (the scenario's
        fault by default), so that whoever reverts it knows it.
        """
        act = asyncio.ensure_future(asyncio.to_thread(fault.inject, self.env, dict(params), self.ledger))
        try:
            return await asyncio.shield(act)
        except asyncio.CancelledError:
            self._state.interrupted = True
            # The thread cannot be stopped midway; reverting before it ends would leave the
            # rest of its act in place. Wait for it, then let the cancellation go on.
            await asyncio.wait([act])
            if not act.cancelled() and act.exception() is None:
                (on_done or self._keep_handle)(act.result())
            raise
        except InferchaosError as e:
            self._state.errors.append(f"{self._act_name(fault, 'inject')} failed: {e}")
        except Exception as e:  # recorded with its traceback; the run ends as an error
            logger.exception("inject of %s failed", fault.name)
            self._state.errors.append(f"{self._act_name(fault, 'inject')} failed: {type(e).__name__}: {e}")
        return None

    def _act_name(self, fault: Fault, act: str) -> str:
        # The scenario's own fault is "the" inject/revert; a control's sabotage names itself.
        return act if fault is self.fault else f"sabotage {fault.name}: {act}"

    def _keep_handle(self, handle: FaultHandle) -> None:
        self._state.handle = handle

    async def _inject_sabotage(self, at: SabotageAt) -> None:
        """A control's sabotage faults due ``at`` this point; each is reverted after the run is judged."""
        control = self.options.control
        if control is None:
            return
        for step in control.sabotage:
            if step.at is not at:
                continue
            known = {h.id for h in self._state.sabotage}
            handle = await self._inject(get_fault(step.fault), step.params, self._state.sabotage.append)
            if handle is None:
                # A failed act may still have recorded itself: release it with the others.
                self._state.sabotage += [
                    h for h in self.ledger.entries() if h.fault == step.fault and h.id not in known
                ]
                return
            self._state.sabotage.append(handle)
            self._progress(f"control: sabotage {step.fault} injected ({control.breaks})")

    async def _read_evidence_during(self, handle: FaultHandle) -> None:
        self._state.evidence_during = await asyncio.to_thread(self.fault.evidence, self.env, handle)
        self._state.action_output = {"handle": handle.id, "evidence": asdict(self._state.evidence_during)}

    async def _revert(self, timeline: Timeline) -> None:
        handle = self._state.handle
        if handle is None:
            return
        self._phase = "reverting"
        timeline.mark(Mark.REVERTED, time.time())
        control = self.options.control
        if control is not None and control.hold_fault:
            # The recovery window starts where the revert would have been; the platform under
            # test never heals the fault within it. _release_control reverts it afterwards.
            self._progress(f"control: {handle.fault} is held until the run is judged ({control.breaks})")
            cancelled = False
        else:
            self._state.rollback_output, cancelled = await self._revert_handle(self.fault, handle)
        if cancelled:
            raise asyncio.CancelledError

    async def _revert_handle(self, fault: Fault, handle: FaultHandle) -> tuple[dict[str, Any], bool]:
        """Revert one injection to its end, signals or not; its rollback output and whether a signal came."""
        started = time.time()
        try:
            return await self._revert_to_end(fault, handle)
        finally:
            if handle is self._state.handle:
                self._state.revert_times = (started, time.time())

    async def _revert_to_end(self, fault: Fault, handle: FaultHandle) -> tuple[dict[str, Any], bool]:
        act = asyncio.ensure_future(asyncio.to_thread(fault.revert, self.env, handle, self.ledger))
        cancelled = False
        # Waited for to its end, signals or not: a signal during the revert must neither leave the
        # fault in place nor end the run (canary stopped, verdict written) while it still acts.
        while not act.done():
            try:
                await asyncio.wait([act])  # never cancels `act`, never raises its exception
            except asyncio.CancelledError:
                cancelled = self._state.interrupted = True
        error = act.exception()
        if error is None:
            self._progress(f"reverted {handle.fault}")
            return {"ok": True, "handle": handle.id}, cancelled
        cause = str(error) if isinstance(error, InferchaosError) else f"{type(error).__name__}: {error}"
        if not isinstance(error, InferchaosError):
            logger.error("revert of %s raised", handle.fault, exc_info=error)
        keeps = f"the ledger keeps {handle.id}: run `inferchaos cleanup`"
        if isinstance(error, PlatformDidNotRecover):
            who = handle.fault if fault is self.fault else f"sabotage {handle.fault}"
            self._state.no_recovery.append(
                f"no recovery: {who} revert: {cause.removeprefix(f'{handle.fault}: ')}; {keeps}"
            )
        else:
            self._state.errors.append(f"{self._act_name(fault, 'revert')} failed: {cause}; {keeps}")
        self._progress(f"revert of {handle.fault} failed: {cause}")
        return {"ok": False, "error": cause}, cancelled

    async def _release_control(self) -> None:
        """After the run: revert a control's held fault and its sabotage, newest first."""
        control = self.options.control
        if control is None:
            return
        pending = [(get_fault(h.fault), h) for h in reversed(self._state.sabotage)]
        if control.hold_fault and self._state.handle is not None:
            pending.append((self.fault, self._state.handle))
        if pending:
            self._phase = "releasing"
            self._progress(f"control judged: reverting {', '.join(h.fault for _, h in pending)}")
        for fault, handle in pending:
            output, _ = await self._revert_handle(fault, handle)
            self._state.released.append({"fault": handle.fault, **output})
            if handle is self._state.handle:
                self._state.rollback_output = output

    async def _recovery(self, timeline: Timeline) -> None:
        rec = self.judged_spec(timeline).recovery
        # The window as this run's baseline sized it (a number of its replica cold starts, maybe).
        within = recovery_window_s(timeline, rec, phase_windows(timeline)) if rec else 0.0
        # A hold as long as a request timeout ends only with a sample past it: on a loaded
        # machine ticks come late, so the budget gives a quarter of the hold on top.
        budget = (within + 1.25 * rec.hold_s + 2 * self.options.interval_s) if rec else 5.0
        self._phase, self._phase_ends = "recovery", time.time() + budget
        deadline = time.monotonic() + budget
        ticked = self._ticked = asyncio.Event()
        while time.monotonic() < deadline:
            self._ensure_sampling()
            ticked.clear()
            try:
                # A tick may be skipped (overran) or late: never wait longer than two intervals.
                left = max(0.0, deadline - time.monotonic())
                await asyncio.wait_for(ticked.wait(), timeout=min(2 * self.options.interval_s, left))
            except TimeoutError:
                pass
            self._report(timeline)
            if rec is not None:
                judged = self.judged_spec(timeline)
                result = recover(
                    timeline,
                    judged,
                    extra={NO_DETECTOR_FIRING: detector_evolution(timeline)[0]},
                    judged_again=judged_again(judged),
                )
                # Stop as soon as recovery is confirmed, or has failed for good: a game day should
                # not idle, nor a negative control wait out a window it has already failed (nor wait
                # for samples of a replica the router no longer sends requests to).
                if (
                    result is not None
                    and result.settled
                    and (not result.recovered or self._recovery_slos_sampled(timeline))
                ):
                    return

    def _recovery_slos_sampled(self, timeline: Timeline) -> bool:
        """Recovery-phase SLOs need a few samples after the revert before the run may end."""
        windows = phase_windows(timeline)
        if Phase.RECOVERY not in windows:
            return False
        needed = [s for s in self.spec.slos.slos if s.phase is Phase.RECOVERY]
        return all(evaluate_slo(timeline, s, windows).samples >= 3 for s in needed)

    async def _wait_phase(self, phase: str, seconds: float) -> None:
        self._phase, self._phase_ends = phase, time.time() + seconds
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self._ensure_sampling()
            if self._state.stop and self._state.stop.get("kind") == "stop_condition":
                raise StopConditionBreached(self._state.stop["reason"])
            await asyncio.sleep(min(0.5, max(0.0, end - time.monotonic())))

    def _on_tick(self, timeline: Timeline) -> Callable[[Tick], None]:
        def on_tick(tick: Tick) -> None:
            if self._phase == "during" and self._state.stop is None:
                breach = self._stop_condition_breach(timeline)
                if breach:
                    self._state.stop = {"kind": "stop_condition", **breach}
            self._report(timeline)
            if self._ticked is not None:
                self._ticked.set()

        return on_tick

    def _report(self, timeline: Timeline) -> None:
        now = time.time()
        if now - self._last_progress < 3.0:
            return
        self._last_progress = now
        left = max(0.0, self._phase_ends - now)
        self._progress(f"{self._phase:9s} {left:5.0f} s left | {key_probes(timeline, now)}")

    def _stop_condition_breach(self, timeline: Timeline) -> dict[str, Any] | None:
        injected = timeline.marks.get(Mark.INJECTED)
        if injected is None:
            return None
        for slo in self.spec.stop_conditions:
            window = slo.window_s or self.options.interval_s * 3
            # Judged over the whole window it declares: right after a kill, its first three
            # samples alone can read far below the bound in a healthy run and would abort a run
            # that the declared window lets through.
            if time.time() - injected < window:
                continue
            since = time.time() - window
            # The rows its evaluation would read (unattributed canary failures included).
            rows = [r for r in timeline.rows if r.t >= since and r.ok and counts_toward(r, slo)]
            if len(rows) < 3:
                continue
            values = [r.value for r in rows]
            observed = {
                "last": values[-1],
                "mean": sum(values) / len(values),
                "max": max(values),
                "min": min(values),
            }.get(slo.agg, values[-1])
            if not slo.holds(observed):
                return {
                    "name": slo.name,
                    "reason": f"stop condition {slo.name}: {slo.agg}({slo.probe}) = {observed:g}, needs {slo.op.value} {slo.threshold:g}",
                    "observed": observed,
                    "threshold": slo.threshold,
                }
        return None

    def platform(self) -> PlatformSteadyState:
        """The shared platform steady state as this run judges it (steady_state/platform.py)."""
        spec = self.spec
        return PlatformSteadyState(
            spec.canary_timeout_s, spec.platform, promised_availability(spec.slos.slos)
        )

    def judged_spec(self, timeline: Timeline) -> SloSpec:
        """The scenario's SLOs and the platform steady state, as this run's baseline shaped it."""
        return with_platform(self.spec.slos, timeline, self.platform())

    def _failed_before_recovery(self, timeline: Timeline) -> list[str]:
        """What already fails the run before its recovery: a stop condition that fired, a revert
        that waited out the platform, the SLOs of the baseline and the fault window that failed."""
        failed = [str(self._state.stop.get("name", "a stop condition"))] if self._state.stop else []
        failed += self._state.no_recovery
        windows = phase_windows(timeline)
        for slo in self.judged_spec(timeline).slos:
            if slo.phase is not Phase.RECOVERY and not evaluate_slo(timeline, slo, windows).ok:
                failed.append(slo.name)
        return failed

    def _baseline_failures(self, timeline: Timeline) -> list[str]:
        windows = phase_windows(timeline)
        failures = []
        for slo in self.judged_spec(timeline).slos:
            if slo.phase is not Phase.BASELINE:
                continue
            result = evaluate_slo(timeline, slo, windows)
            if not result.ok:
                failures.append(f"{slo.name}: {result.reason}")
        return failures

    # -- judging ----------------------------------------------------------------------------
    def _judge(self, timeline: Timeline, started: float) -> Verdict:
        spec = self.spec
        state = self._state
        handle = state.handle
        judged = self.judged_spec(timeline)
        evolution, firing = detector_evolution(timeline)
        evaluation = evaluate(
            timeline, judged, extra={NO_DETECTOR_FIRING: evolution}, judged_again=judged_again(judged)
        )
        if state.failed_fast:
            evaluation = _without_recovery(evaluation, state.failed_fast[0])
        # The platform's SLOs carry their declaration: no experiment file holds it, and a journal's
        # probe replays an SLO from its declaration.
        slos = tuple(
            SloRecord.of(r, declaration(judged.by_name(r.name)) if is_platform(r.name) else None)
            for r in evaluation.slos
        )
        layers = {v.layer: LayerRecord(v.ok, tuple(v.slos)) for v in evaluation.layers}
        fault_outcome = None
        if handle is not None:
            during, after = state.evidence_during, state.evidence_after
            merged = _merge_evidence(during, after)
            fault_outcome = FaultRecord(
                name=handle.fault,
                layer=str(handle.layer),
                params=handle.params,
                injected_at=handle.injected_at,
                reverted_at=handle.reverted_at,
                effect_observed=bool(during and during.bit),
                evidence=merged,
            )
        recovery = evaluation.recovery
        timing = TimingRecord(
            time_to_detect_s=evaluation.detection.time_to_detect_s if evaluation.detection else None,
            detected_by=evaluation.detection.slo if evaluation.detection else None,
            time_to_recover_s=recovery.time_to_recover_s if recovery else None,
            recovered=recovery.recovered if recovery else None,
            recovery_within_s=recovery.within_s if recovery else None,
            recovery_confirmed_at=recovery.confirmed_at if recovery else None,
            recovery_blocked_by=tuple(recovery.blocked_by) if recovery else (),
        )
        status, reason = self._status(evaluation, fault_outcome, recovery)
        stopped = status is Status.ABORTED and state.stop and state.stop.get("kind") == "stop_condition"
        failure = (
            platform_failure(
                timeline,
                judged,
                _judged(evaluation.slos),
                self.platform(),
                recovery.blocked_by if recovery and not recovery.recovered else (),
            )
            if status is Status.FAILED or stopped
            else None
        )
        if failure is None and stopped and state.stop is not None:
            failure = stop_condition_failure(
                timeline, str(state.stop["name"]), str(state.stop["reason"]), self.platform()
            )
        if failure is None and status is Status.FAILED:
            # A replica that stopped answering where no platform window judged it: Serve
            # replaced it first (the bite, which checks the other replicas, still read it
            # down), or --fail-fast ended the run before the recovery that would have.
            failure = failure_beside(timeline, self.platform(), time.time())
        if failure is not None and failure.replica is None and failure.phase != Phase.BASELINE.value:
            # Without a replica to single out, a failure after the injection is the fault's own
            # business as far as triage can tell: the scenario's triage names it.
            failure = None
        if failure is not None and reason.startswith(NO_EFFECT):
            # A bite that checks the rest of the platform (the other replicas stay healthy) fails
            # where something else broke meanwhile: the run fails on that, not on the fault.
            reason = f"the platform failed beside the fault, whose bite could not be judged ({reason})"
        if status is Status.FAILED and recovery is not None and NO_DETECTOR_FIRING in recovery.failing_at_end:
            last = [
                f for f in firing if recovery is not None and f.t >= (timeline.marks.get(Mark.REVERTED) or 0)
            ]
            if last:
                reason += f"; detector {last[-1].detector} still firing: {last[-1].message}"
        breach_at = (
            evaluation.detection.at
            if evaluation.detection
            else (timeline.marks.get(Mark.INJECTED) or started)
        )
        injected = timeline.marks.get(Mark.INJECTED)
        # Without a breach, the fault's own symptom is looked for over the whole fault window:
        # some surface late (a kind node turns NotReady ~40 s after its container stops).
        reverted = timeline.marks.get(Mark.REVERTED)
        lookahead_s = TRIAGE_LOOKAHEAD_S
        if not evaluation.detection and reverted is not None:
            lookahead_s = max(lookahead_s, reverted - breach_at + 5.0)
        triage_result = (
            triage(
                timeline,
                breach_at,
                since=injected,
                lookahead_s=lookahead_s,
                thresholds=triage_thresholds(spec),
                breached_layers=frozenset(s.layer for s in _judged(evaluation.slos) if not s.ok),
            )
            if injected
            else None
        )
        healed: dict[str, float] = {}
        if status is Status.PASSED and recovery is not None and recovery.steady_at is not None:
            healed = healed_replicas(timeline, self.platform(), recovery.steady_at)
            injected_at = timeline.marks.get(Mark.INJECTED) or started
            for replica, at in healed.items():
                # The one exception a failure the scenario did not inject is allowed: the
                # platform itself put it right within the window. The verdict says so.
                reason += (
                    f"; {replica} failed at +{at - injected_at:.1f} s, outside what the fault may take out, "
                    f"and the platform replaced or healed it: the whole steady state held again "
                    f"from +{recovery.steady_at - injected_at:.1f} s"
                )
        if failure is not None:
            symptoms = (
                fault_symptoms(
                    timeline,
                    str(handle.layer),
                    injected,
                    (reverted or time.time()) + 5.0,
                    triage_thresholds(spec),
                    triage_result,
                    lost_a_node=_lost_a_node(state.evidence_during, state.evidence_after),
                )
                if handle is not None and injected is not None
                else ()
            )
            triage_result = triage_failure(timeline, failure, triage_thresholds(spec), symptoms)
            failure = failure.traced_to(triage_result)
            reason = f"{reason}; not injected by the scenario: {_failure_line(failure)}"
        stop_condition = state.stop if state.stop and state.stop.get("kind") == "stop_condition" else None
        triage_record = (
            TriageRecord(triage_result.layer, triage_result.reason, triage_result.evidence)
            if triage_result
            else TriageRecord("unknown", "no fault was injected")
        )
        control = self.options.control
        outcome = (
            control_outcome(
                control, status, reason, str(triage_record.layer), stop_condition is not None, state.released
            )
            if control is not None
            else None
        )
        return Verdict(
            experiment=spec.name,
            title=spec.title,
            env=self.env.name,
            status=status,
            reason=reason,
            started_at=started,
            ended_at=time.time(),
            phases={k: v for k, v in timeline.marks.items()},
            fault=fault_outcome,
            slos=slos,
            layers=layers,
            timing=timing,
            triage=triage_record,
            platform=PlatformRecord(
                steady=all(r.ok for r in evaluation.slos if r.name.startswith("platform.")),
                allows=AllowsRecord(
                    tuple(sorted(spec.platform.replicas)), tuple(sorted(spec.platform.unread))
                ),
                hold_s=judged.recovery.hold_s if judged.recovery else None,
                failure=PlatformFailureRecord(
                    failure.slo, failure.phase, failure.replica, failure.at, failure.reason
                )
                if failure
                else None,
                healed=tuple(HealedRecord(r, at) for r, at in healed.items()),
                detectors_after_revert=tuple(
                    DetectorFiringRecord(f.t, f.detector, f.message) for f in firing
                )[-5:],
            ),
            stop_condition=stop_condition,
            control=outcome,
            detection=tuple(
                detect_signals(
                    timeline,
                    injected_at=self._first_act(handle),
                    breach=evaluation.detection,
                    fault=handle.fault if handle is not None else None,
                    fault_alerts=[
                        FaultAlert(a.name, a.layer, a.reads) for a in alerts_for(handle.fault, CLUSTER)
                    ]
                    if handle is not None
                    else (),
                )
            ),
        )

    def _first_act(self, handle: FaultHandle | None) -> float | None:
        """When the first fault acted: the scenario's, or a control's sabotage injected before it
        (``at: before_inject``), which the platform may notice first."""
        acts = [h.injected_at for h in (handle, *self._state.sabotage) if h is not None and h.injected_at]
        return min(acts, default=None)

    def _status(
        self, evaluation: Evaluation, fault: FaultRecord | None, recovery: RecoveryResult | None
    ) -> tuple[Status, str]:
        state = self._state
        if state.interrupted:
            if state.handle is None:
                return Status.ABORTED, "interrupted before the injection; nothing was injected"
            if state.rollback_output is not None and not state.rollback_output.get("ok"):
                return Status.ABORTED, "interrupted; " + "; ".join([*state.errors, *state.no_recovery])
            return Status.ABORTED, "interrupted; the fault was rolled back"
        if state.stop and state.stop.get("kind") == "baseline":
            # Nothing was injected, and the platform was already failing its users: a failure
            # of the platform, which the game day must not pass over as a run that never began.
            return Status.FAILED, state.stop["reason"]
        if state.stop and state.stop.get("kind") == "stop_condition":
            return Status.ABORTED, f"{state.stop['reason']}; rolled back at once"
        if state.errors:
            return Status.ERROR, "; ".join(state.errors)
        if state.no_recovery:
            return Status.FAILED, "; ".join(state.no_recovery)
        if fault is None:
            return Status.ERROR, "the fault was not injected"
        if not fault.effect_observed:
            reason = state.evidence_during.reason if state.evidence_during else ""
            return Status.FAILED, f"{NO_EFFECT}: {reason}"
        # An SLO left unjudged by --fail-fast is never the reason: one judged before it failed.
        failed = [s for s in _judged(evaluation.slos) if not s.ok]
        if failed:
            first = failed[0]
            fast = "; --fail-fast: the run ended without its recovery phase" if state.failed_fast else ""
            return Status.FAILED, f"SLO {first.name} [{first.phase}] breached: {first.reason}{fast}"
        if state.failed_fast:
            # A stop condition or a revert that waited out the platform failed it (above).
            return (
                Status.FAILED,
                f"{', '.join(state.failed_fast)}; --fail-fast: the run ended without its recovery phase",
            )
        if recovery is not None and not recovery.recovered:
            return Status.FAILED, f"no recovery in time: {recovery.reason}"
        ttr = (
            f"; recovered in {recovery.time_to_recover_s:.1f} s"
            if recovery and recovery.time_to_recover_s is not None
            else ""
        )
        return Status.PASSED, f"every SLO held and the fault bit ({fault.evidence.get('reason', '')}){ttr}"

    # -- outputs ----------------------------------------------------------------------------
    def _secrets(self) -> list[str]:
        secrets = secret_values(self.spec.raw)
        try:
            secrets.append(self.env.load_state().read_token())
        except (InferchaosError, OSError):
            pass  # no Ray token to hide
        return secrets

    def _fault_acts(self) -> FaultActs:
        """The scenario fault's inject and revert as the journal records them."""
        state = self._state
        inject = revert = None
        if state.inject_times is not None:
            inject = Act(*state.inject_times, output=state.action_output, error=state.inject_error)
        if state.revert_times is not None and state.rollback_output is not None:
            output = state.rollback_output
            error = None if output.get("ok") else str(output.get("error", "the revert failed"))
            revert = Act(*state.revert_times, output=output, error=error)
        return FaultActs(inject, revert, state.interrupted, state.recovery_sampled)

    def _write_outputs(self, verdict: Verdict) -> None:
        import json

        secrets = self._secrets()
        journal = build_journal(self.spec, verdict, self._fault_acts())
        (self.run_dir / "journal.json").write_text(
            json.dumps(redact(journal, secrets), indent=2, default=str)
        )
        (self.run_dir / "verdict.json").write_text(
            json.dumps(redact(verdict.to_dict(), secrets), indent=2, default=str)
        )
        _render_reports(self.run_dir)


NOT_JUDGED = "not judged: --fail-fast"


def _judged(slos: Sequence[SloResult]) -> list[SloResult]:
    """``slos`` less those --fail-fast left unjudged: they failed nothing, so neither a
    platform failure, nor triage, nor the run's reason may be read from them."""
    return [s for s in slos if not s.reason.startswith(NOT_JUDGED)]


def _without_recovery(evaluation: Evaluation, first_failed: str) -> Evaluation:
    """``evaluation`` of a run that --fail-fast ended before its recovery phase: its recovery
    SLOs read as not judged (and count in no layer's verdict), and no recovery is claimed."""
    unjudged = f"{NOT_JUDGED} ended the run once {first_failed} had failed"
    slos = tuple(
        replace(r, ok=False, observed=None, samples=0, reason=unjudged)
        if r.phase == Phase.RECOVERY.value
        else r
        for r in evaluation.slos
    )
    judged = [r for r in slos if r.phase != Phase.RECOVERY.value]
    return replace(evaluation, slos=slos, layers=layer_verdicts(judged), recovery=None)


def _failure_line(failure: PlatformFailure) -> str:
    who = failure.replica or "the platform"
    return f"{who} failed the platform steady state ({failure.slo}, {failure.phase})"


def triage_thresholds(spec: ExperimentSpec) -> dict[str, float]:
    """Thresholds triage cannot know by itself: how much device memory a replica needs."""
    from inferchaos.faults.device.squat import DEFAULT_REPLICA_NEED_BYTES

    need = spec.fault.params.get("replica_need_bytes") or DEFAULT_REPLICA_NEED_BYTES
    return {"device.free_bytes": float(need)}


def _lost_a_node(*evidence: Evidence | None) -> bool:
    """Whether the fault's own evidence saw Ray mark the node it acted on DEAD."""
    return any(e is not None and e.timestamps.get(NODE_DEAD_AT) is not None for e in evidence)


def _merge_evidence(during: Evidence | None, after: Evidence | None) -> dict[str, Any]:
    if during is None and after is None:
        return {}
    base = asdict(during) if during else {}
    if after is not None:
        before = base.get("symptoms", {})
        changed = {k: v for k, v in after.symptoms.items() if before.get(k) != v}
        base.setdefault("symptoms", {}).update({f"after_revert.{k}": v for k, v in changed.items()})
        base.setdefault("timestamps", {}).update(after.timestamps)
        base["reason_after_revert"] = after.reason
    return base


def _render_reports(run_dir: Path) -> None:
    """report.html, junit.xml, summary.md and openmetrics.txt, where the reports layer is installed."""
    from inferchaos.reports.render import ReportError, render_run

    try:
        render_run(run_dir)
    except ReportError as e:
        # A report problem must not change the run's verdict or exit code; the stored files
        # can be re-rendered later with `inferchaos report`.
        logger.error("could not render the reports of %s: %s", run_dir, e)


def run_experiment(
    spec: ExperimentSpec,
    env: Environment,
    options: RunOptions,
    progress: ProgressFn | None = None,
    probe_factory: ProbeFactory = build_probes,
) -> Verdict | None:
    """Validate against the environment, then run the experiment; with ``dry_run`` only print the plan.

    Returns None for a dry run: nothing was touched. A fault whose plan finds this host lacks
    what it needs (:class:`Unsupported`) makes the run ``skipped``, recorded in its run folder;
    a dry run records nothing and raises it.
    """
    try:
        _, plan = plan_run(spec, env)
        plans = [plan, *(plan_sabotage(options.control, env) if options.control else [])]
    except Unsupported as e:
        if options.dry_run:
            raise
        return Runner(spec, env, options, progress, probe_factory).skip(e)
    if options.allow is not None:
        for each in plans:
            ensure_plan_is_allowed(each.targets, options.allow, env.load_state().ray_address)
    if options.dry_run:
        print(describe_plan(spec, plan, options.control, plans[1:]))
        return None
    return Runner(spec, env, options, progress, probe_factory).run()
