"""The SLOs as live Chaos Toolkit hypothesis probes, so a plain `chaos run` judges the steady state.

chaoslib runs an experiment's steady-state hypothesis twice, before the method and after it,
and a hypothesis holds when every probe meets its tolerance both times. Each experiment's
hypothesis therefore lists :func:`sample_steady_state` and one :func:`slo_live` probe per
baseline and recovery SLO:

- before the method, :func:`sample_steady_state` samples every layer for the experiment's
  baseline into a timeline of its own (a ``timeline.csv`` under the working directory), and
  each SLO is judged over that baseline: a recovery SLO must hold at rest too;
- while the fault acts, :func:`sample_during`, the method's first activity and run in the
  background (``background: true``), samples into the same timeline from the injection the
  ledger records until the method's revert removes it;
- after the method (whose last action reverts the fault: chaoslib plays the rollbacks only
  after this hypothesis), it samples until recovery is confirmed as the runner confirms it,
  and each SLO is judged over the recovery hold, a baseline SLO included; a during-phase SLO is
  judged over what :func:`sample_during` sampled, as the runner judges it.

A baseline-relative threshold scales with the baseline this run sampled, once the baseline is
within the environment's sane range (steady_state/baseline_gate.py; outside it the sampler
raises and the method never runs). The timeline is the runner's format, so `inferchaos report`
and the reports read it too.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from inferchaos.ctk.fault_adapter import (
    Configuration,
    Secrets,
    open_ledger,
    open_local_environment,
    shared_fault,
)
from inferchaos.errors import ConfigError, ProbeError
from inferchaos.faults.registry import canonical_name
from inferchaos.primitives.capabilities import Environment
from inferchaos.run.probe_set import build_probes, close_probes, slo_replicas
from inferchaos.steady_state.baseline_gate import SickBaseline, sick_baseline
from inferchaos.steady_state.canary import CanaryPace, phase_between_ticks
from inferchaos.steady_state.evaluation import (
    PhaseWindow,
    RecoveryResult,
    evaluate_slo,
    missing_baselines,
    phase_windows,
    recover,
    recovery_window_s,
)
from inferchaos.steady_state.platform import (
    NO_DETECTOR_FIRING,
    PlatformSteadyState,
    detector_evolution,
    ensure_platform_is_valid,
    judged_again,
    platform_failures,
    promised_availability,
    with_platform,
)
from inferchaos.steady_state.sampler import Sampler
from inferchaos.steady_state.slo import Phase, Slo, SloSpec, ensure_slos_are_valid
from inferchaos.steady_state.timeline import Mark, Timeline, TimelineWriter, read_timeline

# Under chaostoolkit's logger, as Chaos Toolkit's own extensions log: `chaos run` prints it (and
# writes it to chaostoolkit.log), so a long wait for recovery shows its progress.
logger = logging.getLogger(f"chaostoolkit.{__name__}")

# What Chaos Toolkit's discovery lists (inferchaos/ctk/discovery.py).
__all__ = ["sample_during", "sample_steady_state", "sampled", "slo_live", "slo_met"]

INTERVAL_S = 1.0
# A recovery SLO needs this many samples after the revert before it is judged, as in the runner.
MIN_RECOVERY_SAMPLES = 3
PROGRESS_EVERY_S = 10.0

# The timelines whose baseline this process sampled: chaoslib runs both hypotheses in one
# process, so the second call for a timeline is the one after the method. A timeline left by
# an earlier, interrupted `chaos run` is then never mistaken for this run's baseline.
_BASELINES: set[Path] = set()
_LOCK = threading.Lock()


@dataclass(frozen=True)
class Sampled:
    """What :func:`sample_steady_state` recorded, as the journal shows it."""

    phase: str
    ticks: int
    seconds: float
    recovered: bool | None = None
    time_to_recover_s: float | None = None
    reason: str = ""
    # What of the platform steady state failed (README "What steady means"), one line each:
    # over the baseline before the method, over the fault and the recovery after it.
    platform_failures: tuple[str, ...] = ()


def _spec(
    slos: Sequence[Mapping[str, Any]], recovery: Mapping[str, Any] | None, canary_timeout_s: float
) -> SloSpec:
    declared: dict[str, Any] = {"slos": [dict(s) for s in slos]}
    if recovery is not None:
        declared["recovery"] = dict(recovery)
    try:
        # The canary's timeout bounds its latency probes: their relative bounds' ceiling lies below it.
        return ensure_slos_are_valid(declared, canary_timeout_s=canary_timeout_s)
    except ConfigError as e:
        raise ProbeError(f"cannot judge these SLOs: {e}") from e


def sample_steady_state(
    timeline: str = "timeline.csv",
    baseline_s: float = 8.0,
    slos: Sequence[Mapping[str, Any]] = (),
    recovery: Mapping[str, Any] | None = None,
    canary_timeout_s: float = CanaryPace.request_timeout_s,
    canary_max_in_flight: int = CanaryPace.max_in_flight,
    platform: Mapping[str, Any] | None = None,
    configuration: Configuration = None,
    secrets: Secrets = None,
) -> dict[str, Any]:
    """Sample every layer of the local environment into ``timeline``: for ``baseline_s`` the first
    time in this process (and up to as long again while a baseline-relative SLO of ``slos`` has
    nothing to scale from, as in the runner), after the method until ``recovery`` is confirmed or has missed a
    step's own deadline (at most its window plus ``hold_s``) and every recovery SLO of ``slos``
    has samples.

    ``slos`` are the declarations of every SLO the hypothesis judges, during-phase ones included
    (their baselines are sampled here), ``recovery`` the
    experiment's recovery declaration, ``canary_timeout_s`` and ``canary_max_in_flight`` its
    ``canary.request_timeout_s`` and ``canary.max_in_flight``, ``platform`` its ``platform``
    block (what its fault may take out). The platform steady state is judged as the runner
    judges it: over the baseline before the method; over the fault and the recovery after it,
    recovery held at least one canary timeout. Returns what was sampled (phase, ticks, seconds,
    ``platform_failures`` and, after the method, whether and how fast it recovered). Raises
    SickBaseline, and the method never runs, when the baseline reads outside the environment's
    sane range (steady_state/baseline_gate.py), as the runner ends such a run as an error.
    """
    path = Path(timeline).resolve()
    spec = _spec(slos, recovery, canary_timeout_s)
    try:
        allowance = ensure_platform_is_valid(platform)
    except ConfigError as e:
        raise ProbeError(f"cannot judge the platform steady state: {e}") from e
    state = PlatformSteadyState(canary_timeout_s, allowance, promised_availability(spec.slos))
    with _LOCK:
        before = path not in _BASELINES
        _BASELINES.add(path)
    env = open_local_environment(configuration)
    pace = CanaryPace(request_timeout_s=canary_timeout_s, max_in_flight=canary_max_in_flight)
    if before:
        path.unlink(missing_ok=True)
        try:
            sampled = asyncio.run(_sample_baseline(env, path, baseline_s, pace, spec, state))
        except SickBaseline:
            with _LOCK:
                _BASELINES.discard(path)  # no method follows: a later call samples a baseline again
            raise
    else:
        with _LOCK:
            _BASELINES.discard(path)
        sampled = asyncio.run(_sample_recovery(env, path, spec, pace, state))
    for failure in sampled.platform_failures:
        logger.warning("the platform steady state failed: %s", failure)
    return asdict(sampled)


async def _sample_baseline(
    env: Environment, path: Path, seconds: float, pace: CanaryPace, spec: SloSpec, state: PlatformSteadyState
) -> Sampled:
    slos = spec.slos
    logger.info("sampling the steady state for %g s before the method into %s", seconds, path)
    with TimelineWriter(path) as writer:
        timeline = Timeline(writer)
        started = time.time()
        timeline.mark(Mark.BASELINE_START, started)

        def done() -> bool:
            # As the runner's: at most one more baseline's length while an SLO has nothing to
            # scale from (missing_baselines).
            elapsed = time.time() - started
            return elapsed >= seconds and (elapsed >= 2 * seconds or not missing_baselines(timeline, slos))

        ticks = await _sample(env, timeline, pace, done, slo_replicas(slos))
        # As the runner: no bound may scale from a baseline outside the environment's sane range.
        sick = sick_baseline(timeline, env.sane_baseline)
        if sick:
            raise SickBaseline(sick)
        timeline.mark(Mark.INJECTED, time.time())
    failures = platform_failures(timeline, spec, state, (Phase.BASELINE,))
    return Sampled(Phase.BASELINE.value, ticks, time.time() - started, platform_failures=failures)


async def _sample_recovery(
    env: Environment, path: Path, declared: SloSpec, pace: CanaryPace, state: PlatformSteadyState
) -> Sampled:
    if not path.exists():
        raise ProbeError(f"{path}: no baseline was sampled before the method")
    recorded = read_timeline(path)
    # Recovery is held on the whole steady state, the platform's too, as in the runner.
    spec = with_platform(declared, recorded, state)
    rec = spec.recovery
    # The window as the baseline sized it (a number of the replicas' cold starts, maybe).
    within = recovery_window_s(recorded, rec, phase_windows(recorded)) if rec else 0.0
    # A hold as long as a request timeout ends only with a sample past it (as in the runner).
    budget = (within + 1.25 * rec.hold_s + 2 * INTERVAL_S) if rec else 5.0
    needed = [s for s in spec.slos if s.phase is Phase.RECOVERY]
    result: list[RecoveryResult | None] = [None]

    def done() -> bool:
        windows = phase_windows(timeline)
        if Phase.RECOVERY not in windows:
            return False
        if any(evaluate_slo(timeline, s, windows).samples < MIN_RECOVERY_SAMPLES for s in needed):
            return False
        result[0] = recover(
            timeline,
            spec,
            windows,
            extra={NO_DETECTOR_FIRING: detector_evolution(timeline)[0]},
            judged_again=judged_again(spec),
        )
        return result[0] is None or result[0].settled

    logger.info(
        "sampling after the method until the steady state is back (at most %g s) into %s", budget, path
    )
    with TimelineWriter(path) as writer:
        timeline = recorded
        timeline.attach(writer)
        started = time.time()
        timeline.mark(Mark.REVERTED, started)
        deadline = time.monotonic() + budget
        ticks = await _sample(
            env, timeline, pace, lambda: done() or time.monotonic() >= deadline, slo_replicas(spec.slos)
        )
        timeline.mark(Mark.END, time.time())
    final = result[0] if result[0] is not None else recover(timeline, spec)
    return Sampled(
        Phase.RECOVERY.value,
        ticks,
        time.time() - started,
        None if final is None else final.recovered,
        None if final is None else final.time_to_recover_s,
        "" if final is None else final.reason,
        platform_failures(timeline, declared, state, (Phase.DURING, Phase.RECOVERY)),
    )


def sample_during(
    fault: str,
    timeline: str = "timeline.csv",
    wait_for_injection_s: float = 120.0,
    at_most_s: float = 600.0,
    canary_timeout_s: float = CanaryPace.request_timeout_s,
    canary_max_in_flight: int = CanaryPace.max_in_flight,
    configuration: Configuration = None,
    secrets: Secrets = None,
) -> dict[str, Any]:
    """Sample every layer into ``timeline`` while ``fault`` (``<layer>.<verb>``) acts: from the
    injection its ledger entry records until the method's revert removes the entry.

    List it first in the method with ``background: true``, so that chaoslib runs the fault's
    action beside it; chaoslib waits for it before the hypothesis after the method. It gives up
    when no injection is recorded within ``wait_for_injection_s`` and stops after ``at_most_s``
    in all; ``canary_timeout_s`` and ``canary_max_in_flight`` are the experiment's
    ``canary.request_timeout_s`` and ``canary.max_in_flight``. Returns what was sampled (phase,
    ticks, seconds, and the reason it stopped).
    """
    path = Path(timeline).resolve()
    if not path.exists():
        raise ProbeError(f"{path}: no baseline was sampled before the method")
    name = shared_fault(fault).name
    ledger = open_ledger(configuration)
    env = open_local_environment(configuration)

    def injected_at() -> float | None:
        """When the live injection of ``fault`` acted; None while there is none."""
        times = [
            h.injected_at
            for h in ledger.entries()
            if canonical_name(h.fault) == name and h.injected_at is not None
        ]
        return min(times, default=None)

    pace = CanaryPace(request_timeout_s=canary_timeout_s, max_in_flight=canary_max_in_flight)
    return asdict(
        asyncio.run(_sample_during(env, path, name, injected_at, pace, wait_for_injection_s, at_most_s))
    )


async def _sample_during(
    env: Environment,
    path: Path,
    fault: str,
    injected_at: Callable[[], float | None],
    pace: CanaryPace,
    wait_for_injection_s: float,
    at_most_s: float,
) -> Sampled:
    recorded = read_timeline(path)
    started = time.time()
    seen: list[float] = []
    why = [f"no injection of {fault} was recorded within {wait_for_injection_s:g} s"]

    def enough() -> bool:
        at = injected_at()
        if not seen:
            if at is not None:
                seen.append(at)
                # The injection as the fault recorded it, not the end of the baseline sampling.
                timeline.mark(Mark.INJECTED, at)
                return False
            return time.time() - started >= wait_for_injection_s
        if at is None:
            why[0] = f"{fault} was reverted"
            return True
        if time.time() - started >= at_most_s:
            why[0] = f"{fault} still acted after {at_most_s:g} s"
            return True
        return False

    logger.info("sampling while %s acts into %s", fault, path)
    with TimelineWriter(path) as writer:
        timeline = recorded
        timeline.attach(writer)
        # No SLOs are given here: a fleet read in focus reads its outliers alone while the fault
        # acts (no experiment judges a named vLLM replica during one; their canaries are named).
        ticks = await _sample(env, timeline, pace, enough)
    return Sampled(Phase.DURING.value, ticks, time.time() - started, reason=why[0])


async def _sample(
    env: Environment,
    timeline: Timeline,
    pace: CanaryPace,
    enough: Callable[[], bool],
    named: frozenset[str] = frozenset(),
) -> int:
    """Sample every probe of ``env`` (the canary's traffic, at ``pace``, included) until ``enough()``;
    ``named``: the replicas the SLOs judged on this timeline name (see :func:`build_probes`)."""
    env.connect_ray()
    probes, canary = build_probes(env, pace, named)
    # Ray's state API is the slowest reader; it may use the whole interval, as in the runner.
    sampler = Sampler(
        probes, timeline, INTERVAL_S, timeouts={p.name: INTERVAL_S for p in probes if p.name == "ray"}
    )
    await canary.start(phase_between_ticks(pace.rate_per_s, INTERVAL_S))
    sampling = asyncio.create_task(sampler.run())
    began, said = time.monotonic(), time.monotonic()
    try:
        while not enough() and not sampling.done():
            await asyncio.sleep(0.5)
            if time.monotonic() - said >= PROGRESS_EVERY_S:
                said = time.monotonic()
                logger.info("still sampling: %.0f s, %d ticks", said - began, sampler.ticks)
    finally:
        sampler.stop()
        await asyncio.gather(sampling, return_exceptions=True)
        await canary.stop()
        await close_probes(probes)
    return sampler.ticks


def slo_live(
    slo: Mapping[str, Any],
    timeline: str = "timeline.csv",
    recovery: Mapping[str, Any] | None = None,
    steady: Sequence[Mapping[str, Any]] = (),
    canary_timeout_s: float = CanaryPace.request_timeout_s,
) -> dict[str, Any]:
    """Judge ``slo`` (its declaration in the experiment's ``slos``) over what
    :func:`sample_steady_state` last sampled into ``timeline``: the baseline before the method,
    the recovery hold after it (``recovery`` and the ``steady`` SLOs' declarations say where
    recovery was confirmed; unconfirmed, the last moments sampled). A during-phase SLO is
    judged after the method only, over what :func:`sample_during` sampled while the fault acted.
    ``canary_timeout_s`` is the experiment's ``canary.request_timeout_s``, which bounds the
    canary's latency probes (a relative bound's ceiling lies below it).

    Returns the judgement: ``ok``, ``observed``, ``op``, ``threshold`` (scaled by this run's
    baseline where the SLO is relative to it), ``samples`` and ``reason``; its tolerance is
    :func:`slo_met`.
    """
    name = str(slo.get("name"))
    spec = _spec([slo, *(s for s in steady if s.get("name") != name)], recovery, canary_timeout_s)
    try:
        recorded = read_timeline(Path(timeline))
    except ConfigError as e:
        raise ProbeError(f"cannot judge SLO {name!r}: {e}") from e
    windows = phase_windows(recorded)
    declared = spec.slos[0]
    if Phase.RECOVERY not in windows and declared.phase is Phase.DURING:
        # What the platform does while the fault acts cannot be judged at rest (a slow
        # replica's share of the traffic, say): before the method it is not judged.
        return {
            "ok": True,
            "observed": None,
            "op": declared.op.value,
            "threshold": None,
            "phase": declared.phase.value,
            "samples": 0,
            "reason": f"{name} is judged after the method, over the samples taken while the fault acted",
        }
    if Phase.RECOVERY not in windows:
        judged, rec = replace(declared, phase=Phase.BASELINE, after_s=None), None
    elif declared.phase is Phase.DURING:
        judged, rec = declared, None
    else:
        judged, rec = _after_the_method(declared, spec, recorded, windows)
    result = evaluate_slo(recorded, judged, windows, rec)
    threshold = None if math.isnan(result.threshold) else result.threshold
    return {
        "ok": result.ok,
        "observed": result.observed,
        "op": result.op,
        "threshold": threshold,
        "phase": judged.phase.value,
        "samples": result.samples,
        "reason": result.reason,
    }


def _after_the_method(
    declared: Slo, spec: SloSpec, recorded: Timeline, windows: Mapping[Phase, PhaseWindow]
) -> tuple[Slo, RecoveryResult | None]:
    """``declared`` as judged after the method: over the recovery hold, where it was confirmed."""
    rec = recover(recorded, spec, windows)
    hold = spec.recovery.hold_s if spec.recovery else MIN_RECOVERY_SAMPLES * INTERVAL_S
    if declared.phase is Phase.RECOVERY and declared.window_s is not None:
        return declared, rec
    # A phase-long SLO would count the seconds before the platform was back: judge the state it
    # got back to, over the hold that confirmed it, as a windowed recovery SLO is judged.
    return replace(declared, phase=Phase.RECOVERY, window_s=hold, after_s=None), rec


def slo_met(value: Mapping[str, Any] | None = None) -> bool:
    """The tolerance of a :func:`slo_live` probe: its judgement says the SLO held.

    chaoslib passes the probe's output as ``value``; it checks a tolerance's arguments before
    it has one, hence the default.
    """
    return bool(value is not None and value.get("ok"))


def sampled(value: Mapping[str, Any] | None = None) -> bool:
    """The tolerance of :func:`sample_steady_state`: it took samples, and the platform steady
    state held over them. Whether they meet the experiment's own SLOs is for the
    :func:`slo_live` probes after it to say, each by name."""
    return bool(value is not None and value.get("ticks") and not value.get("platform_failures"))
