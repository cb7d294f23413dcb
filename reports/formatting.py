"""Words and numbers shared by every report format, so HTML, JUnit and Markdown say the same."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from inferchaos.reports.load import RunRecord
from inferchaos.reports.verdict_schema import ControlRecord, SloRecord
from inferchaos.steady_state.censoring import is_censored
from inferchaos.steady_state.slo import Op, Phase

# The comparison that makes an SLO fail, for messages such as "observed 2.31 > threshold <= 1.5".
BREACH_OP: dict[Op, str] = {
    Op.LT: ">=",
    Op.LE: ">",
    Op.GT: "<=",
    Op.GE: "<",
    Op.EQ: "!=",
    Op.NE: "==",
}


class SloState(StrEnum):
    """What became of one SLO in a run, as every report words it."""

    OK = "ok"
    BREACHED = "breached"
    NO_DATA = "no data"  # its phase ran but the probe gave nothing to judge
    NOT_RUN = "not run"  # its phase never happened (aborted before injection, say)


def slo_state(run: RunRecord, slo: SloRecord) -> SloState:
    """The state of ``slo`` in ``run``."""
    if not run.slo_ran(slo):
        return SloState.NOT_RUN
    if slo.ok:
        return SloState.OK
    return SloState.NO_DATA if slo.observed is None else SloState.BREACHED


def observed(slo: SloRecord) -> str:
    """The observed value, with as many digits as it takes for the printed number to agree with
    the verdict (1.50004 against ``<= 1.5`` must not print as 1.5)."""
    if slo.observed is None:
        return "no data"
    if slo.threshold is None:
        return f"{slo.observed:.4g}"
    if slo.observed.is_integer() and abs(slo.observed) < 1e15:
        return str(int(slo.observed))  # counts and byte sizes read best in full
    for digits in (4, 6, 10):
        text = f"{slo.observed:.{digits}g}"
        if slo.op.holds(float(text), slo.threshold) == slo.op.holds(slo.observed, slo.threshold):
            return text
    return repr(slo.observed)


def observed_in(run: RunRecord, slo: SloRecord) -> str:
    """The observed value for a table of ``run``: ``-`` where the SLO's phase never happened."""
    return "-" if slo_state(run, slo) is SloState.NOT_RUN else observed(slo)


def exact(value: float) -> str:
    """A declared number as its author wrote it: ``1.5``, ``1073741824`` (never ``1.07374e+09``)."""
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def threshold(slo: SloRecord) -> str:
    """``<= 1.5``: the declared operator and threshold; for a threshold read from the run's
    baseline, how: ``<= 0.27 (3 x baseline 0.09)``."""
    if not slo.scale:
        return f"{slo.op.value} {'?' if slo.threshold is None else exact(slo.threshold)}"
    if slo.threshold is None or slo.baseline is None:
        return f"{slo.op.value} {slo.scale} (no baseline)"
    scaled = slo.scale.replace("baseline", f"baseline {slo.baseline:.4g}", 1)
    return f"{slo.op.value} {slo.threshold:.4g} ({scaled})"


def slo_title(slo: SloRecord) -> str:
    """``canary_ttft_p95 [during]``: an SLO's name within its phase, as JUnit names it."""
    return f"{slo.name} [{slo.phase.value}]"


def slo_breach(slo: SloRecord) -> str:
    """Why ``slo`` failed, with the observed value and the threshold.

    ``canary_ttft_p95 [during]: observed 2.31 > threshold <= 1.5``.
    """
    if slo.observed is None:
        text = f"{slo_title(slo)}: observed no data, threshold {threshold(slo)}"
        return f"{text} ({slo.reason})" if slo.reason else text
    return f"{slo_title(slo)}: observed {observed(slo)} {BREACH_OP[slo.op]} threshold {threshold(slo)}"


def seconds(value: float | None) -> str:
    """``12.3 s``, or ``-`` when not measured."""
    return "-" if value is None else f"{value:.1f} s"


def epoch(t: float | None, *, ms: bool = True) -> str:
    """An epoch time as UTC, to the millisecond: ``2026-01-01 00:00:12.250 UTC``."""
    if t is None:
        return "-"
    text = datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
    return (text[:-3] if ms else text[:-7]) + " UTC"


def day(t: float) -> str:
    """The UTC date of an epoch time, which names a game day."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d")


def value_text(value: Any) -> str:
    """Any JSON value of evidence or params as one line of text."""
    if isinstance(value, str):
        return value
    if isinstance(value, float):
        return f"{value:.6g}"
    return json.dumps(value, sort_keys=True, default=str)


def recovery_summary(run: RunRecord) -> str:
    """Words on recovery: ``11.6 s (limit 30 s)``, ``not recovered (limit 30 s)``, ``not reached ...``."""
    timing = run.verdict.timing
    within = "" if timing.recovery_within_s is None else f" (limit {timing.recovery_within_s:g} s)"
    if not run.phases.ran(Phase.RECOVERY):
        return "not reached (the fault was never reverted)"
    if recovered(run):
        return f"{seconds(timing.time_to_recover_s)}{within}"
    if timing.recovery_within_s is None and timing.recovered is None:
        return "no recovery declared"
    return f"not recovered{within}"


def recovered(run: RunRecord) -> bool:
    """Whether the run recovered: ``timing.recovered`` where stored, else a measured TTR within
    the limit (evaluation only measures a TTR once every steady SLO held again)."""
    timing = run.verdict.timing
    if timing.recovered is not None:
        return timing.recovered
    if timing.time_to_recover_s is None:
        return False
    limit = timing.recovery_within_s
    return limit is None or timing.time_to_recover_s <= limit


def detection_summary(run: RunRecord) -> str:
    """Words on detection: ``2.6 s (canary_ttft_p95_during)``, ``no breach detected``, ``not reached ...``."""
    timing = run.verdict.timing
    if timing.time_to_detect_s is None:
        return "no breach detected" if run.phases.ran(Phase.DURING) else "not reached (nothing injected)"
    by = f" ({timing.detected_by})" if timing.detected_by else ""
    return f"{seconds(timing.time_to_detect_s)}{by}"


# The layers of the README's table, always listed in this order in per-layer verdicts.
STACK_LAYERS: tuple[str, ...] = ("k8s", "ray", "vllm", "device")


class LayerState(StrEnum):
    """The verdict of one layer, from its SLOs."""

    OK = "ok"
    BREACHED = "breached"
    NOT_RUN = "not run"
    NO_SLO = "no SLO"


def layer_states(run: RunRecord) -> dict[str, LayerState]:
    """Per layer: breached when one of its SLOs did not hold where it was judged, ok when all
    held, not run when none was judged; the stack layers first, then others (canary, load)."""
    layers = list(STACK_LAYERS) + sorted({s.layer for s in run.verdict.slos} - set(STACK_LAYERS))
    verdicts: dict[str, LayerState] = {}
    for layer in layers:
        states = [slo_state(run, s) for s in run.verdict.slos if s.layer == layer]
        if not states:
            verdicts[layer] = LayerState.NO_SLO
        elif any(st in (SloState.BREACHED, SloState.NO_DATA) for st in states):
            verdicts[layer] = LayerState.BREACHED
        elif all(st is SloState.NOT_RUN for st in states):
            verdicts[layer] = LayerState.NOT_RUN
        else:
            verdicts[layer] = LayerState.OK
    return verdicts


def control_line(control: ControlRecord) -> str:
    """The one line a negative control's verdict is read by: did the scenario catch the break?"""
    if control.proven:
        return "control: failed as expected"
    if control.result == "passed":
        return "control PASSED: the scenario cannot catch this"
    return f"control not proven: {control.message}"


@dataclass(frozen=True)
class CensoredCount:
    """One phase's canary requests, and how many of them entered TTFT censored at the timeout."""

    phase: Phase
    censored: int
    requests: int


def censored_counts(run: RunRecord) -> tuple[list[CensoredCount], float | None]:
    """Per phase with canary requests (in phase order), the censored ``canary.ttft_s`` samples
    among its requests (``canary.success`` readings), and the timeout they were counted at
    (None when there was none)."""
    requests: dict[Phase, int] = {}
    censored: dict[Phase, int] = {}
    timeout: float | None = None
    phases = run.phases
    for row in run.timeline.rows:
        if not row.ok or row.probe not in ("canary.success", "canary.ttft_s"):
            continue
        phase = phases.phase_at(row.t)
        if phase is None:
            continue
        if row.probe == "canary.success":
            requests[phase] = requests.get(phase, 0) + 1
        elif is_censored(row.labels):
            censored[phase] = censored.get(phase, 0) + 1
            timeout = row.value if timeout is None else max(timeout, row.value)
    counts = [CensoredCount(p, censored.get(p, 0), requests[p]) for p in Phase if p in requests]
    return counts, timeout


def censored_summary(run: RunRecord) -> str | None:
    """How many requests count in TTFT at the timeout, per phase: ``baseline 0 of 20, during 4 of
    61, recovery 0 of 30 requests failed or timed out and count at the 10 s timeout``; None for
    a run without canary requests."""
    counts, timeout = censored_counts(run)
    if not counts:
        return None
    if timeout is None:
        # "0 failed" would be untrue of a run recorded before failures were counted: say only
        # that none was counted.
        return "none (" + ", ".join(f"{c.phase.value} {c.requests}" for c in counts) + " requests)"
    per_phase = ", ".join(f"{c.phase.value} {c.censored} of {c.requests}" for c in counts)
    return f"{per_phase} requests failed or timed out and count at the {timeout:g} s timeout"
