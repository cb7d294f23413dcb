"""A Chaos Toolkit journal (the shape `chaos run` writes) for an inferchaos run."""

from __future__ import annotations

import platform
from datetime import UTC, datetime
from typing import Any

from inferchaos.experiments.spec import ExperimentSpec
from inferchaos.experiments.verdict import Status, Verdict

# Chaos Toolkit's journal status words for our verdict statuses: a run whose baseline was not
# met is "aborted" in both vocabularies, never "completed". chaoslib has no word for a run
# that never started; it says "aborted" when its method never ran, the nearest case, and the
# journal's ``inferchaos.status`` says "skipped".
CTK_STATUS = {
    Status.PASSED: "completed",
    Status.FAILED: "failed",
    Status.ABORTED: "aborted",
    Status.ERROR: "failed",
    Status.SKIPPED: "aborted",
}


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat()


def build_journal(
    spec: ExperimentSpec,
    verdict: Verdict,
    action_output: dict[str, Any] | None,
    rollback_output: dict[str, Any] | None,
) -> dict[str, Any]:
    """Journal keys as chaoslib writes them, plus an ``inferchaos`` summary of the verdict."""
    import chaoslib

    fault = verdict.fault
    baseline = [s for s in verdict.slos if s["phase"] == "baseline"]
    recovery = [s for s in verdict.slos if s["phase"] == "recovery"]
    action = spec.raw["method"][spec.fault.index]
    run = []
    if fault is not None and fault.injected_at:
        run.append(
            {
                "activity": action,
                "status": "succeeded" if fault.effect_observed else "failed",
                "output": action_output,
                "start": _iso(fault.injected_at),
                "end": _iso(fault.reverted_at or verdict.ended_at),
                "duration": round((fault.reverted_at or verdict.ended_at) - fault.injected_at, 3),
            }
        )
    rollbacks = []
    if rollback_output is not None and fault is not None:
        rollbacks.append(
            {
                "activity": (
                    spec.raw.get("rollbacks") or [{"type": "action", "name": f"revert-{fault.name}"}]
                )[0],
                "status": "succeeded" if rollback_output.get("ok") else "failed",
                "output": rollback_output,
                "start": _iso(fault.reverted_at or verdict.ended_at),
                "end": _iso(fault.reverted_at or verdict.ended_at),
                "duration": 0,
            }
        )
    return {
        "chaoslib-version": chaoslib.__version__,
        "platform": platform.platform(),
        "node": platform.node(),
        "experiment": spec.raw,
        "start": _iso(verdict.started_at),
        "end": _iso(verdict.ended_at),
        "duration": round(verdict.ended_at - verdict.started_at, 3),
        "status": CTK_STATUS[verdict.status],
        "deviated": verdict.status is Status.FAILED,
        "steady_states": {
            "before": {"steady_state_met": all(s["ok"] for s in baseline), "probes": baseline},
            "after": {
                "steady_state_met": all(s["ok"] for s in recovery) if recovery else None,
                "probes": recovery,
            },
            "during": [s for s in verdict.slos if s["phase"] == "during"],
        },
        "run": run,
        "rollbacks": rollbacks,
        "inferchaos": {"status": str(verdict.status), "reason": verdict.reason},
    }
