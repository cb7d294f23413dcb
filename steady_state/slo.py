"""The ``slos`` and ``recovery`` keys of an experiment: models and their complete validation.

Validation runs before anything is injected and stops at the first problem, raising a
ConfigError whose one-line message starts with the key path, e.g.
``slos[1].op: unknown operator '=>'; use one of <, <=, >, >=, ==, !=``.
"""

from __future__ import annotations

import difflib
import math
import operator
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from inferchaos.errors import ConfigError
from inferchaos.params import number, seconds
from inferchaos.steady_state.aggregates import AGGREGATES
from inferchaos.steady_state.catalog import KNOWN_PROBES, OPEN_FAMILIES, PROBE_FAMILIES, probe_layer


class Op(StrEnum):
    """How an observed value is compared with the threshold; the SLO holds when it is true."""

    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="
    EQ = "=="
    NE = "!="

    def holds(self, observed: float, threshold: float) -> bool:
        """``observed <op> threshold``."""
        return _COMPARE[self](observed, threshold)


_COMPARE: dict[Op, Callable[[float, float], bool]] = {
    Op.LT: operator.lt,
    Op.LE: operator.le,
    Op.GT: operator.gt,
    Op.GE: operator.ge,
    Op.EQ: operator.eq,
    Op.NE: operator.ne,
}


class Phase(StrEnum):
    """Where in a run an SLO is judged: before injection, while the fault is active, after revert."""

    BASELINE = "baseline"
    DURING = "during"
    RECOVERY = "recovery"


# The canary's latency probes. A canary request that has not answered by its timeout fails, and
# a failed request enters these percentiles at that timeout (steady_state/censoring.py): none of
# them can read more than the timeout, so a bound at or above it can never be breached.
CANARY_LATENCY_PROBES: frozenset[str] = frozenset({"canary.ttft_s", "canary.e2e_s", "canary.itl_s"})
# CanaryPace.request_timeout_s's default (steady_state/canary.py, which this module may not
# import: reports read SLOs without the canary's HTTP client); a unit test keeps them equal.
DEFAULT_CANARY_TIMEOUT_S = 10.0
# A relative bound on a canary latency probe that declares no ceiling is capped at this share
# of the canary's timeout. Half leaves a request slower than the cap time to arrive and count
# as a breach, and failed requests (at the timeout) exceed it by a margin no baseline closes;
# it is also several times every healthy value a relative bound here has read.
DEFAULT_CEILING_SHARE = 0.5
# Aggregates whose value is one of the readings or lies between them: a probe's timeout bounds
# them too. A count or a rate is not in seconds.
BOUNDED_BY_READINGS: frozenset[str] = frozenset({"mean", "max", "min", "p50", "p95", "p99", "last"})


def probe_timeout_s(probe: str, canary_timeout_s: float) -> float | None:
    """The most a reading of ``probe`` can be, its own timeout: the canary's request timeout
    for the canary's latency probes; None for a probe without one."""
    return canary_timeout_s if probe in CANARY_LATENCY_PROBES else None


@dataclass(frozen=True)
class BaselineScale:
    """A threshold read from the run's own baseline: ``times`` x the same aggregate of the same
    probe over the baseline phase, plus ``plus``, never below ``at_least`` and never above
    ``at_most``.

    Latency on 2 shared cores and on a GPU cluster differ by an order of magnitude; a scenario
    that says "TTFT may triple, not more" means the same thing on both, where a fixed number
    would fail a healthy slow machine or pass a broken fast one. ``at_least`` keeps a tiny
    baseline (a few milliseconds) from turning scheduler jitter into a breach.

    A fault that adds a fixed delay (a slowed link) costs users the same seconds on either
    machine, whatever their baseline: ``plus`` says "the baseline and at most this much more".
    A ratio would give it no teeth on a slow machine: a CI run whose baseline p95 read 0.6 s
    allowed 1.8 s under "3 x baseline", and passed a platform whose every path paid a second.

    ``at_most`` keeps a slow baseline from scaling the bound out of reach: the canary's latency
    probes cannot read more than its request timeout, so "30 x baseline" on a 0.34 s baseline
    could never fail. Validation gives every such bound a ceiling below the timeout.
    """

    times: float = 1.0
    plus: float = 0.0
    at_least: float = 0.0
    at_most: float = math.inf

    def threshold(self, baseline: float) -> float:
        """The threshold a baseline of ``baseline`` gives."""
        return min(self.at_most, max(self.at_least, self.times * baseline + self.plus))

    def describe(self) -> str:
        """``3 x baseline`` or ``baseline + 0.75`` (``, at least 0.3``, ``, at most 5``), for
        verdicts and reports."""
        scaled = "baseline" if self.times == 1 and self.plus else f"{self.times:g} x baseline"
        added = f" + {self.plus:g}" if self.plus else ""
        floor = f", at least {self.at_least:g}" if self.at_least else ""
        ceiling = f", at most {self.at_most:g}" if math.isfinite(self.at_most) else ""
        return f"{scaled}{added}{floor}{ceiling}"


@dataclass(frozen=True)
class Slo:
    """``agg(probe{labels})`` over ``phase`` (or over every ``window_s`` window of it) ``op threshold``.

    With ``scale`` the threshold comes from the run's baseline (:class:`BaselineScale`); until
    :meth:`scaled_by` has been given that baseline, ``threshold`` is NaN, which no observation
    meets: an SLO whose baseline is missing fails closed.
    """

    name: str
    probe: str
    agg: str
    op: Op
    threshold: float
    phase: Phase
    labels: Mapping[str, str] = field(default_factory=dict)
    window_s: float | None = None
    scale: BaselineScale | None = None
    # Judge the during phase from this many seconds after the injection: the time the platform
    # is given to notice a fault and act (take a hung replica out of rotation) before users'
    # requests must succeed again.
    after_s: float | None = None
    # Count only requests a replica answered: a failure the front door could not attribute
    # (:data:`~inferchaos.steady_state.evaluation.UNATTRIBUTED_FAILURES`) is left out. The
    # platform steady state judges a surviving replica this way while its peer is allowed out.
    attributed_only: bool = False

    @property
    def layer(self) -> str:
        """Layer of the probe, e.g. ``canary`` for ``canary.ttft_s``."""
        return probe_layer(self.probe)

    def holds(self, observed: float) -> bool:
        """Whether ``observed`` meets this SLO."""
        return self.op.holds(observed, self.threshold)

    @property
    def threshold_text(self) -> str:
        """``0.5``, or ``3 x baseline`` for a threshold read from the run's baseline."""
        return self.scale.describe() if self.scale else f"{self.threshold:g}"

    def scaled_by(self, baseline: float | None) -> Slo:
        """This SLO with its threshold taken from ``baseline`` (None: no baseline, NaN threshold)."""
        if self.scale is None:
            return self
        return replace(self, threshold=math.nan if baseline is None else self.scale.threshold(baseline))


@dataclass(frozen=True)
class RecoverySpec:
    """Recovered: every ``steady`` SLO holds, from a moment at most the recovery window after the
    revert, continuously for ``hold_s`` seconds (so a run samples the window plus ``hold_s``).

    The window is ``within_s``; with ``within_cold_starts`` it is that many of the platform's own
    replica cold starts where that is longer (:meth:`window_s`), for a recovery that must start
    a replica again: the cold start of the environment's slowest replica, as the run's baseline
    read it (``vllm.cold_start_s``, steady_state/cold_start.py). ``within_s`` stays the floor,
    and the whole window where the environment cannot say how long its replicas take to start.

    ``first_within_s`` gives some steady SLOs a deadline of their own, shorter than the window:
    each must first hold for ``hold_s`` from a moment at most that long after the revert. A step
    that comes early in a long recovery (the replacement node joins, then a replica starts cold
    on it) then fails the run once its deadline has passed, not at the end of the whole window.
    """

    within_s: float
    hold_s: float
    steady: tuple[str, ...]
    within_cold_starts: float | None = None
    first_within_s: Mapping[str, float] = field(default_factory=dict)

    def window_s(self, cold_start_s: float | None) -> float:
        """The recovery window given the baseline's cold start (None: not read, the floor)."""
        if self.within_cold_starts is None or cold_start_s is None:
            return self.within_s
        return max(self.within_s, self.within_cold_starts * cold_start_s)

    def describe(self) -> str:
        """``90 s of the revert`` (``, or 1.6 replica cold starts if longer``), for plans and reports."""
        scaled = (
            f", or {self.within_cold_starts:g} replica cold starts if longer"
            if self.within_cold_starts is not None
            else ""
        )
        firsts = "".join(f"; {name} first within {s:g} s" for name, s in self.first_within_s.items())
        return f"{self.within_s:g} s of the revert{scaled}{firsts}"


@dataclass(frozen=True)
class SloSpec:
    """The validated ``slos`` and ``recovery`` of one experiment."""

    slos: tuple[Slo, ...]
    recovery: RecoverySpec | None = None

    def by_name(self, name: str) -> Slo:
        """The SLO called ``name``."""
        for slo in self.slos:
            if slo.name == name:
                return slo
        raise KeyError(name)


SLO_KEYS: tuple[str, ...] = (
    "name",
    "probe",
    "agg",
    "op",
    "threshold",
    "phase",
    "labels",
    "window_s",
    "after_s",
    "attributed_only",
)
SLO_REQUIRED: tuple[str, ...] = ("name", "probe", "agg", "op", "threshold", "phase")
RECOVERY_KEYS: tuple[str, ...] = ("within_s", "within_cold_starts", "hold_s", "steady", "first_within_s")


def _fail(path: str, message: str) -> ConfigError:
    return ConfigError(f"{path}: {message}")


def _type_name(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _number(value: object, path: str) -> float:
    # One reading of a number for every user input (NaN and inf refused): inferchaos.params.
    return number(value, path)


def _duration(value: object, path: str, *, allow_zero: bool) -> float:
    return seconds(value, path, allow_zero=allow_zero)


def _choice(value: object, path: str, what: str, choices: Collection[str]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise _fail(path, f"unknown {what} {value!r}; use one of {', '.join(choices)}")
    return value


def _mapping(value: object, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _fail(path, f"must be a mapping, got {_type_name(value)}")
    return value


def _no_unknown_keys(entry: Mapping[str, Any], path: str, allowed: Collection[str]) -> None:
    for key in entry:
        if key not in allowed:
            raise _fail(f"{path}.{key}", f"unknown key; use one of {', '.join(allowed)}")


def _probe(value: object, path: str, known: Collection[str], open_families: Collection[str]) -> str:
    if not isinstance(value, str) or not value:
        raise _fail(path, f"must be a probe name such as 'vllm.kv_cache_usage', got {value!r}")
    if value in known or any(value.startswith(family) for family in open_families):
        return value
    if not any(value.startswith(family) for family in PROBE_FAMILIES):
        raise _fail(path, f"unknown probe {value!r}; names start with one of {', '.join(PROBE_FAMILIES)}")
    close = difflib.get_close_matches(value, sorted(known), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise _fail(path, f"unknown probe {value!r}{hint}")


def _labels(value: object, path: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    for key, label in _mapping(value, path).items():
        if not isinstance(key, str) or not isinstance(label, str):
            raise _fail(
                f"{path}.{key}", f"label values must be strings (quote them), got {_type_name(label)}"
            )
        labels[key] = label
    return labels


def _slo(
    entry: object, path: str, known: Collection[str], open_families: Collection[str], canary_timeout_s: float
) -> Slo:
    entry = _mapping(entry, path)
    _no_unknown_keys(entry, path, SLO_KEYS)
    for key in SLO_REQUIRED:
        if key not in entry:
            raise _fail(f"{path}.{key}", "required")
    name = entry["name"]
    if not isinstance(name, str) or not name.strip():
        raise _fail(f"{path}.name", f"must be a non-empty string, got {name!r}")
    window = entry.get("window_s")
    probe = _probe(entry["probe"], f"{path}.probe", known, open_families)
    agg = _choice(entry["agg"], f"{path}.agg", "aggregate", AGGREGATES)
    op = Op(_choice(entry["op"], f"{path}.op", "operator", [o.value for o in Op]))
    if not isinstance(entry["threshold"], Mapping):
        _number(entry["threshold"], f"{path}.threshold")
    phase = Phase(_choice(entry["phase"], f"{path}.phase", "phase", [p.value for p in Phase]))
    timeout = probe_timeout_s(probe, canary_timeout_s) if agg in BOUNDED_BY_READINGS else None
    threshold, scale = _threshold(entry["threshold"], f"{path}.threshold", op, phase, timeout)
    if timeout is not None and scale is None and op in (Op.LT, Op.LE) and threshold >= timeout:
        raise _fail(
            f"{path}.threshold",
            f"{threshold:g} can never be breached: {probe} reads at most the canary's"
            f" {timeout:g} s request timeout (canary.request_timeout_s); give a bound below it",
        )
    after = entry.get("after_s")
    if after is not None and phase is not Phase.DURING:
        raise _fail(f"{path}.after_s", f"applies to the during phase only, not to {phase.value}")
    attributed_only = entry.get("attributed_only", False)
    if not isinstance(attributed_only, bool):
        raise _fail(f"{path}.attributed_only", f"must be true or false, got {attributed_only!r}")
    return Slo(
        name=name,
        probe=probe,
        agg=agg,
        op=op,
        threshold=threshold,
        phase=phase,
        labels=_labels(entry.get("labels", {}), f"{path}.labels"),
        window_s=None if window is None else _duration(window, f"{path}.window_s", allow_zero=False),
        scale=scale,
        after_s=None if after is None else _duration(after, f"{path}.after_s", allow_zero=False),
        attributed_only=attributed_only,
    )


SCALE_KEYS: tuple[str, ...] = ("times_baseline", "plus_baseline", "at_least", "at_most")


def _threshold(
    value: object, path: str, op: Op, phase: Phase, timeout_s: float | None = None
) -> tuple[float, BaselineScale | None]:
    """A number, or ``{times_baseline: N, plus_baseline: P, at_least: M, at_most: C}`` (either of
    the first two, or both) for a threshold read from the baseline.

    ``timeout_s`` is the probe's own timeout (:func:`probe_timeout_s`), None where it has none:
    an upper bound then gets a ceiling below it, ``at_most`` or by default
    :data:`DEFAULT_CEILING_SHARE` of it.
    """
    if not isinstance(value, Mapping):
        return _number(value, path), None
    _no_unknown_keys(value, path, SCALE_KEYS)
    if "times_baseline" not in value and "plus_baseline" not in value:
        raise _fail(
            path,
            "needs times_baseline (how many times the baseline value the threshold is)"
            " or plus_baseline (how much above it)",
        )
    if phase is Phase.BASELINE:
        raise _fail(path, "a baseline-phase SLO cannot be relative to the baseline it judges; give a number")
    if op not in (Op.LT, Op.LE, Op.GT, Op.GE):
        raise _fail(path, f"a threshold relative to the baseline needs <, <=, > or >=, not {op.value}")
    times = _number(value.get("times_baseline", 1.0), f"{path}.times_baseline")
    if times <= 0:
        raise _fail(f"{path}.times_baseline", f"must be more than 0, got {value['times_baseline']!r}")
    plus = _number(value.get("plus_baseline", 0.0), f"{path}.plus_baseline")
    if "plus_baseline" in value and plus <= 0:
        raise _fail(f"{path}.plus_baseline", f"must be more than 0, got {value['plus_baseline']!r}")
    at_least = _number(value.get("at_least", 0.0), f"{path}.at_least")
    if at_least < 0:
        raise _fail(f"{path}.at_least", f"must be 0 or more, got {value['at_least']!r}")
    upper_only = (
        ("plus_baseline", "headroom above the baseline", plus),
        ("at_least", "a floor", at_least),
        ("at_most", "a ceiling", "at_most" in value),
    )
    for key, what, given in upper_only:
        if given and op in (Op.GT, Op.GE):
            raise _fail(f"{path}.{key}", f"{what} only makes sense for < and <=, not {op.value}")
    at_most, named = _ceiling(value, path, op, timeout_s)
    if at_least >= at_most:
        raise _fail(f"{path}.at_least", f"must be below the ceiling ({named}), got {value['at_least']!r}")
    return math.nan, BaselineScale(times, plus, at_least, at_most)


def _ceiling(value: Mapping[str, Any], path: str, op: Op, timeout_s: float | None) -> tuple[float, str]:
    """The ceiling of a relative threshold (inf: none), and its name for an error message.

    A probe with a timeout reads no more than it: an upper bound at or above the timeout could
    never be breached, however slow the platform, so it is refused, and a bound that declares
    no ceiling gets :data:`DEFAULT_CEILING_SHARE` of the timeout.
    """
    if "at_most" not in value:
        if timeout_s is None or op not in (Op.LT, Op.LE):
            return math.inf, "none"
        ceiling = DEFAULT_CEILING_SHARE * timeout_s
        return (
            ceiling,
            f"{ceiling:g}: by default {DEFAULT_CEILING_SHARE:g} x the {timeout_s:g} s canary timeout",
        )
    at_most = _number(value["at_most"], f"{path}.at_most")
    if at_most <= 0:
        raise _fail(f"{path}.at_most", f"must be more than 0, got {value['at_most']!r}")
    if timeout_s is not None and at_most >= timeout_s:
        raise _fail(
            f"{path}.at_most",
            f"must be below the canary's {timeout_s:g} s request timeout (canary.request_timeout_s):"
            f" a bound at or above it can never be breached; got {value['at_most']!r}",
        )
    return at_most, f"at_most {at_most:g}"


def _recovery(value: object, slo_names: Collection[str]) -> RecoverySpec:
    entry = _mapping(value, "recovery")
    _no_unknown_keys(entry, "recovery", RECOVERY_KEYS)
    for key in ("within_s", "steady"):
        if key not in entry:
            raise _fail(f"recovery.{key}", "required")
    within = _duration(entry["within_s"], "recovery.within_s", allow_zero=False)
    cold_starts = None
    if "within_cold_starts" in entry:
        cold_starts = _number(entry["within_cold_starts"], "recovery.within_cold_starts")
        if cold_starts <= 0:
            raise _fail(
                "recovery.within_cold_starts",
                f"must be more than 0 (how many replica cold starts recovery may take), "
                f"got {entry['within_cold_starts']!r}",
            )
    hold = _duration(entry.get("hold_s", 0), "recovery.hold_s", allow_zero=True)
    steady = entry["steady"]
    if not isinstance(steady, list) or not steady:
        raise _fail("recovery.steady", f"must be a non-empty list of SLO names, got {steady!r}")
    for index, name in enumerate(steady):
        if name not in slo_names:
            raise _fail(
                f"recovery.steady[{index}]", f"no SLO named {name!r}; declared: {', '.join(slo_names)}"
            )
    firsts = _mapping(entry.get("first_within_s", {}), "recovery.first_within_s")
    deadlines: dict[str, float] = {}
    for name, limit in firsts.items():
        path = f"recovery.first_within_s.{name}"
        if name not in steady:
            raise _fail(path, f"{name!r} is not a steady SLO; recovery.steady: {', '.join(steady)}")
        deadlines[name] = _duration(limit, path, allow_zero=False)
        if deadlines[name] >= within:
            raise _fail(path, f"must be shorter than recovery.within_s ({within:g} s), got {limit!r}")
    return RecoverySpec(
        within_s=within,
        hold_s=hold,
        steady=tuple(steady),
        within_cold_starts=cold_starts,
        first_within_s=deadlines,
    )


def ensure_slos_are_valid(
    experiment: Mapping[str, Any],
    known_probes: Collection[str] = KNOWN_PROBES,
    open_families: Collection[str] = OPEN_FAMILIES,
    canary_timeout_s: float = DEFAULT_CANARY_TIMEOUT_S,
) -> SloSpec:
    """Validate the ``slos`` and ``recovery`` keys of ``experiment`` and return them as models.

    ``known_probes`` are the exact probe names the run will produce (the catalog by default);
    names in ``open_families`` (prefixes such as ``load.``) are accepted unchecked.
    ``canary_timeout_s`` is the experiment's ``canary.request_timeout_s``: the canary's latency
    probes read no more than it, so their bounds must lie below it, and their relative bounds
    get a ceiling below it. Raises ConfigError at the first problem, its message led by the key
    path.
    """
    slos = experiment.get("slos")
    if slos is None:
        raise _fail("slos", "required; declare at least one SLO")
    if not isinstance(slos, list) or not slos:
        raise _fail("slos", f"must be a non-empty list of SLOs, got {_type_name(slos)}")
    parsed: list[Slo] = []
    first_index: dict[str, int] = {}
    for index, entry in enumerate(slos):
        slo = _slo(entry, f"slos[{index}]", known_probes, open_families, canary_timeout_s)
        if slo.name in first_index:
            raise _fail(
                f"slos[{index}].name", f"duplicate SLO name {slo.name!r} (also slos[{first_index[slo.name]}])"
            )
        first_index[slo.name] = index
        parsed.append(slo)
    recovery = experiment.get("recovery")
    return SloSpec(
        slos=tuple(parsed),
        recovery=None if recovery is None else _recovery(recovery, list(first_index)),
    )
