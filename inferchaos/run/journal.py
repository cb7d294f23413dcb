"""A Chaos Toolkit journal of an inferchaos run, in the shape chaoslib writes for `chaos run`.

The mapping (docs/experiments.md "Game days and experiments", the journal): the baseline SLOs are the
``before`` hypothesis, the during SLOs the one ``during`` hypothesis, the recovery SLOs the
``after`` hypothesis; each SLO is one probe (inferchaos/run/hypothesis.py) whose output is the value
observed. The fault's inject is ``run[0]``, its revert ``rollbacks[0]``. inferchaos' own
figures (the verdict) are the ``inferchaos`` extension.
"""

from __future__ import annotations

import platform
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from inferchaos.reports.verdict_schema import SloRecord, Status, Verdict
from inferchaos.run import hypothesis as ctk_slo
from inferchaos.run.spec import ExperimentSpec
from inferchaos.steady_state.slo import Phase
from inferchaos.steady_state.timeline import Mark

EXTENSION = "inferchaos"
# The run folder's timeline, as the SLO probes' provider reads it (relative: run from the folder).
TIMELINE = "timeline.csv"

# Chaos Toolkit's journal status words for our verdict statuses. chaoslib says "aborted" when
# the method hit a fatal error, as an inferchaos error does; a baseline not met is "aborted" in
# both vocabularies, never "completed". An interrupted run is "interrupted" (build_journal).
# chaoslib has no word for a run that never started; it says "aborted" when its method never
# ran, the nearest case, and the inferchaos extension's status says "skipped".
CTK_STATUS = {
    Status.PASSED: "completed",
    Status.FAILED: "failed",
    Status.ABORTED: "aborted",
    Status.ERROR: "aborted",
    Status.SKIPPED: "aborted",
}


@dataclass(frozen=True)
class Act:
    """One call of the runner on the fault (inject or revert): when it ran, what it gave back."""

    start: float
    end: float
    output: Mapping[str, object] | None = None
    # Why the call failed; None when it returned.
    error: str | None = None


@dataclass(frozen=True)
class FaultActs:
    """What the runner did to the fault, beyond what the verdict records."""

    inject: Act | None = None
    revert: Act | None = None
    interrupted: bool = False
    # Whether the runner sampled the recovery phase; it does not after a signal or an error,
    # and then, as chaoslib, the journal has no ``after`` hypothesis.
    recovery_sampled: bool = False


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat()


def _timed(start: float, end: float) -> dict[str, object]:
    return {"start": _iso(start), "end": _iso(end), "duration": round(max(0.0, end - start), 3)}


def _activity_run(activity: Mapping[str, object], act: Act) -> dict[str, object]:
    """An activity result as chaoslib's ``execute_activity`` writes it (``exception`` when it failed)."""
    run: dict[str, object] = {
        "activity": dict(activity),
        "output": None if act.output is None else dict(act.output),
        "status": "failed" if act.error else "succeeded",
        **_timed(act.start, act.end),
    }
    if act.error:
        # chaoslib stores traceback.format_exception's lines; ours is the one line the runner kept.
        run["exception"] = [act.error]
    return run


def _slo_activity(
    declared: Mapping[str, object],
    threshold: float | None,
    canary_timeout_s: float,
    recovery: Mapping[str, Any] | None = None,
) -> dict[str, object]:
    """The SLO as a hypothesis probe: its declaration is the provider's argument, its
    comparison (with the threshold this run used) the tolerance. ``recovery`` (the recovery
    declaration and the steady SLOs' declarations) goes with a windowed recovery SLO, which is
    judged where recovery was confirmed; the canary's timeout gives a relative latency bound
    the ceiling the run gave it."""
    name = str(declared["name"])
    return {
        "type": "probe",
        "name": name,
        "provider": {
            "type": "python",
            "module": ctk_slo.__name__,
            "func": ctk_slo.slo_observed.__name__,
            "arguments": {
                "timeline": TIMELINE,
                "slo": dict(declared),
                **(recovery or {}),
                "canary_timeout_s": canary_timeout_s,
            },
        },
        "tolerance": {
            "type": "probe",
            "name": f"{name}-holds",
            "provider": {
                "type": "python",
                "module": ctk_slo.__name__,
                "func": ctk_slo.slo_holds.__name__,
                "arguments": {"op": declared["op"], "threshold": threshold},
            },
        },
    }


def _probe_run(
    declared: Mapping[str, object],
    slo: SloRecord,
    start: float,
    end: float,
    canary_timeout_s: float,
    recovery: Mapping[str, Any] | None = None,
) -> dict[str, object]:
    """One SLO's judgement as chaoslib's hypothesis writes a probe's run: ``failed`` with an
    ``exception`` when no value judged it, else ``succeeded`` with the value as ``output``."""
    judged = ctk_slo.value_decides(slo.observed, slo.ok, slo.op, slo.threshold)
    steady = {str(s.get("name")) for s in (recovery or {}).get("steady", [])}
    # A recovery SLO judged where recovery was confirmed: a windowed one at the hold's end, a
    # steady one over the hold (evaluation.evaluate_slo).
    held_recovery = declared.get("phase") == Phase.RECOVERY.value and (
        declared.get("window_s") is not None or declared.get("name") in steady
    )
    run: dict[str, object] = {
        "activity": _slo_activity(
            declared, slo.threshold, canary_timeout_s, recovery if held_recovery else None
        ),
        "output": slo.observed if judged else None,
        "status": "succeeded" if judged else "failed",
        **_timed(start, end),
        "tolerance_met": slo.ok,
    }
    if not judged:
        run["exception"] = [f"SLO {slo.name} [{slo.phase}]: {slo.reason}"]
    return run


def _phase_span(verdict: Verdict, phase: Phase) -> tuple[float, float] | None:
    """When ``phase`` ran, from the timeline's marks; None when the run never got there."""
    marks = verdict.phases
    end = marks.get(Mark.END, verdict.ended_at)
    start_mark, end_mark = {
        Phase.BASELINE: (Mark.BASELINE_START, Mark.INJECTED),
        Phase.DURING: (Mark.INJECTED, Mark.REVERTED),
        Phase.RECOVERY: (Mark.REVERTED, Mark.END),
    }[phase]
    if start_mark not in marks:
        return None
    return marks[start_mark], marks.get(end_mark, end)


def _hypothesis(spec: ExperimentSpec, verdict: Verdict, phase: Phase) -> dict[str, object] | None:
    """The SLOs of ``phase`` as chaoslib's ``run_steady_state_hypothesis`` result; None when the
    phase never ran, as chaoslib leaves a hypothesis it never ran.

    Every SLO is listed, not only those up to the first miss where chaoslib would stop: the
    runner judged them all.
    """
    span = _phase_span(verdict, phase)
    if span is None:
        return None
    declared = {str(entry["name"]): entry for entry in spec.raw.get("slos", [])}
    slos = [s for s in verdict.slos if s.phase == phase]
    recovery_declared = spec.raw.get("recovery")
    recovery = (
        {
            "recovery": dict(recovery_declared),
            "steady": [declared[name] for name in recovery_declared.get("steady", []) if name in declared],
        }
        if isinstance(recovery_declared, Mapping)
        else None
    )
    return {
        "steady_state_met": all(s.ok for s in slos),
        # An SLO not in the file (the platform steady state's) is described by the verdict.
        "probes": [
            _probe_run(declared[s.name], s, *span, spec.canary_timeout_s, recovery)
            if s.name in declared
            else _probe_run(
                _declared_from(s),
                s,
                *span,
                spec.canary_timeout_s,
                _platform_recovery(recovery, _declared_from(s), verdict),
            )
            for s in slos
        ],
    }


def _platform_recovery(
    recovery: Mapping[str, Any] | None, declared: Mapping[str, object], verdict: Verdict
) -> dict[str, object] | None:
    """The recovery a platform SLO's replay judges it by: the scenario's, held as long as the
    verdict's platform held it, with this SLO among the steady ones when it was one there."""
    if recovery is None or declared.get("phase") != Phase.RECOVERY.value:
        return dict(recovery) if recovery is not None else None
    hold = verdict.platform.hold_s if verdict.platform is not None else None
    rec = dict(recovery["recovery"])
    if hold is not None:
        rec["hold_s"] = hold
    return {"recovery": rec, "steady": [*recovery["steady"], dict(declared)]}


def _declared_from(slo: SloRecord) -> dict[str, object]:
    # The platform steady state's SLOs carry their own declaration (runner: ``declared``).
    if slo.declared is not None:
        return dict(slo.declared)
    return {"name": slo.name, "phase": slo.phase.value, "op": slo.op.value, "threshold": slo.threshold}


def deviated(steady_states: Mapping[str, Any]) -> bool:
    """Whether the steady state deviated: the ``during`` or the ``after`` hypothesis was not met.

    chaoslib sets it from ``after`` alone, the one hypothesis after its method; ours judges the
    during phase too. A baseline miss is no deviation but a precondition not met (chaoslib's
    method never runs then either).
    """
    judged = [*steady_states["during"], steady_states["after"]]
    return any(state is not None and not state["steady_state_met"] for state in judged)


def _rollback_activity(spec: ExperimentSpec, fault_name: str) -> Mapping[str, object]:
    rollbacks: Sequence[Mapping[str, object]] = spec.raw.get("rollbacks") or []
    return rollbacks[0] if rollbacks else {"type": "action", "name": f"revert-{fault_name}"}


def _extension(verdict: Verdict) -> dict[str, object]:
    """inferchaos' own figures: the whole verdict (status, SLO details, timing, triage, detection,
    control, ...), as verdict.json holds it."""
    return {"name": EXTENSION, **verdict.to_dict()}


def build_journal(spec: ExperimentSpec, verdict: Verdict, acts: FaultActs) -> dict[str, object]:
    """The Chaos Toolkit journal of one run (plain JSON data, as chaoslib's run journal is)."""
    import chaoslib

    run = []
    if acts.inject is not None:
        run.append(_activity_run(spec.raw["method"][spec.fault.index], acts.inject))
    rollbacks = []
    if acts.revert is not None:
        rollbacks.append(_activity_run(_rollback_activity(spec, spec.fault.fault), acts.revert))
    during = _hypothesis(spec, verdict, Phase.DURING)
    steady_states = {
        "before": _hypothesis(spec, verdict, Phase.BASELINE),
        "after": _hypothesis(spec, verdict, Phase.RECOVERY) if acts.recovery_sampled else None,
        # One entry: the runner judges the during phase once, over all of it; chaoslib appends
        # one per run of its continuous hypothesis. Empty without during SLOs (nothing to judge).
        "during": [during] if during is not None and during["probes"] else [],
    }
    return {
        "chaoslib-version": chaoslib.__version__,
        "platform": platform.platform(),
        "node": platform.node(),
        "experiment": spec.raw,
        **_timed(verdict.started_at, verdict.ended_at),
        "status": "interrupted" if acts.interrupted else CTK_STATUS[verdict.status],
        "deviated": deviated(steady_states),
        "steady_states": steady_states,
        "run": run,
        "rollbacks": rollbacks,
        "extensions": [_extension(verdict)],
    }
