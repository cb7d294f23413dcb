"""The baseline gate: a run judges the platform only from a baseline that a healthy platform reads.

Relative bounds (``times_baseline``, ``plus_baseline``) scale with the run's own baseline. A
baseline read from a sick platform or an overloaded machine scales them toward their ceiling,
where they judge little, and a verdict read from it would pass what it should fail. So before
anything is injected, the baseline's canary TTFT p95 is held to the environment's declared sane
range (:class:`~inferchaos.primitives.capabilities.SaneBaseline`); outside it, the run ends as
an error naming the baseline (exit 2): the platform or the machine needs fixing before a fault
can say anything about it.

The runner and `chaos run`'s baseline sampler (inferchaos/ctk/live.py) both ask
:func:`sick_baseline` once their baseline is sampled.
"""

from __future__ import annotations

import logging

from inferchaos.errors import EnvironmentError_
from inferchaos.primitives.capabilities import SaneBaseline
from inferchaos.steady_state.aggregates import p95
from inferchaos.steady_state.censoring import is_censored
from inferchaos.steady_state.evaluation import phase_windows
from inferchaos.steady_state.slo import Phase
from inferchaos.steady_state.timeline import Row, Timeline

logger = logging.getLogger(__name__)

# Every canary request's time to first token, whichever replica served it; a failed request's
# censored sample (at the canary's timeout, steady_state/censoring.py) counts too: a baseline
# that loses requests is as sick as a slow one.
GATED_PROBE = "canary.ttft_s"


class SickBaseline(EnvironmentError_):
    """The baseline read outside the environment's sane range: nothing was injected (exit 2)."""


def _baseline_rows(timeline: Timeline) -> list[Row]:
    window = phase_windows(timeline).get(Phase.BASELINE)
    if window is None:
        return []
    return [row for row in timeline.select(GATED_PROBE) if window.contains(row.t)]


def baseline_ttft_p95(timeline: Timeline) -> float | None:
    """The canary's TTFT p95 over the baseline phase of ``timeline``, failed requests counted at
    their timeout; None without a sample."""
    return p95([(row.t, row.value) for row in _baseline_rows(timeline)])


def sick_baseline(timeline: Timeline, sane: SaneBaseline) -> str | None:
    """Why the baseline of ``timeline`` is outside the ``sane`` range, in one line; None when it
    is within it, or when it holds no canary TTFT to judge (the baseline SLOs judge that)."""
    rows = _baseline_rows(timeline)
    observed = p95([(row.t, row.value) for row in rows])
    logger.debug("baseline %s p95 %s s; sane up to %g s", GATED_PROBE, observed, sane.ttft_p95_max_s)
    if observed is None or observed <= sane.ttft_p95_max_s:
        return None
    failed = sum(1 for row in rows if is_censored(row.labels))
    counted = f", {failed} of {len(rows)} requests failed and counted at the timeout" if failed else ""
    return (
        f"baseline {GATED_PROBE} p95 {observed:.3g} s is outside this environment's sane range"
        f" (<= {sane.ttft_p95_max_s:g} s{counted}): fix the platform or the machine before judging it"
    )
