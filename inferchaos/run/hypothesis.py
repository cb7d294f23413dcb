"""An inferchaos SLO as a Chaos Toolkit hypothesis probe and tolerance.

The journal of a run (inferchaos/run/journal.py) lists each SLO as a probe whose provider is
:func:`slo_observed` and whose tolerance is :func:`slo_holds`, so that chaoslib can replay
the judgement from the run folder: run from that folder, the probe reads ``timeline.csv`` and
returns the value the runner observed, and the tolerance says whether it met the threshold.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from inferchaos.errors import ConfigError, ProbeError
from inferchaos.steady_state.evaluation import evaluate_slo, recover
from inferchaos.steady_state.slo import DEFAULT_CANARY_TIMEOUT_S, Op, ensure_slos_are_valid
from inferchaos.steady_state.timeline import read_timeline

# The probe and its tolerance, as Chaos Toolkit's discovery lists them (inferchaos/ctk/discovery.py).
__all__ = ["slo_holds", "slo_observed"]


def value_decides(observed: float | None, ok: bool, op: str, threshold: float | None) -> bool:
    """Whether comparing ``observed`` with ``threshold`` is what judged the SLO.

    Not so when there was no value, no threshold (a baseline-relative one without a baseline),
    or when the SLO failed although the value meets the threshold (a silent replica in the
    phase fails it closed). chaoslib's word for such a probe is ``failed``: its tolerance
    could not be validated.
    """
    if observed is None or threshold is None:
        return False
    return ok or not Op(op).holds(observed, threshold)


def slo_observed(
    timeline: str,
    slo: Mapping[str, Any],
    recovery: Mapping[str, Any] | None = None,
    steady: Sequence[Mapping[str, Any]] = (),
    canary_timeout_s: float = DEFAULT_CANARY_TIMEOUT_S,
) -> float:
    """The value ``slo`` (its declaration in the experiment's ``slos``) observed over its phase of
    ``timeline`` (a run's timeline.csv; a relative path is read from the current directory).

    ``recovery`` and ``steady`` (the experiment's recovery declaration and the declarations of
    its steady SLOs) let a windowed recovery SLO be judged where recovery was confirmed, as the
    runner's verdict judged it. ``canary_timeout_s`` (the experiment's
    ``canary.request_timeout_s``) gives a relative latency bound the ceiling the runner gave it.

    Raises ProbeError, which chaoslib records as a failed probe, when the SLO could not be
    judged by its value (see :func:`value_decides`).
    """
    name = slo.get("name")
    declared: dict[str, Any] = {"slos": [dict(slo), *(dict(s) for s in steady if s.get("name") != name)]}
    if recovery is not None:
        declared["recovery"] = dict(recovery)
    try:
        spec = ensure_slos_are_valid(declared, canary_timeout_s=canary_timeout_s)
        recorded = read_timeline(Path(timeline))
        held = spec.recovery is not None and spec.slos[0].name in spec.recovery.steady
        result = evaluate_slo(recorded, spec.slos[0], recovery=recover(recorded, spec), held=held)
    except ConfigError as e:
        raise ProbeError(f"cannot judge SLO {name!r}: {e}") from e
    # NaN: a baseline-relative threshold without a baseline to scale.
    threshold = None if math.isnan(result.threshold) else result.threshold
    if result.observed is None or not value_decides(result.observed, result.ok, result.op, threshold):
        raise ProbeError(f"SLO {result.name} [{result.phase}] was not judged by a value: {result.reason}")
    return result.observed


def slo_holds(op: str, threshold: float | None, value: float | None = None) -> bool:
    """The tolerance of an SLO probe: ``value <op> threshold``; no value or no threshold never holds.

    chaoslib passes the probe's output as ``value``; it checks a tolerance's arguments before
    it has one, hence the default.
    """
    if value is None or threshold is None:
        return False
    return Op(op).holds(float(value), float(threshold))
