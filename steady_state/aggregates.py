"""Aggregates that turn a window of ``(t, value)`` points into the one number an SLO compares.

Each aggregate returns ``None`` where it is undefined (no points, or a rate over fewer than
two points or zero seconds) so that "no data" never masquerades as a passing 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from inferchaos.errors import ConfigError

Point = tuple[float, float]
AggregateFn = Callable[[Sequence[Point]], float | None]


def _values(points: Sequence[Point]) -> list[float]:
    return [v for _, v in points]


def mean(points: Sequence[Point]) -> float | None:
    """Arithmetic mean of the values."""
    values = _values(points)
    return sum(values) / len(values) if values else None


def maximum(points: Sequence[Point]) -> float | None:
    """Largest value."""
    return max(_values(points), default=None)


def minimum(points: Sequence[Point]) -> float | None:
    """Smallest value."""
    return min(_values(points), default=None)


def quantile(points: Sequence[Point], q: float) -> float | None:
    """The q-quantile of the values, interpolating linearly between closest ranks.

    This is the "linear" method of numpy and of ``statistics.quantiles(method="inclusive")``:
    the median of ``[1, 2, 3, 4]`` is 2.5 and p100 is the maximum.
    """
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile must be within [0, 1], got {q}")
    values = sorted(_values(points))
    if not values:
        return None
    position = q * (len(values) - 1)
    below = math.floor(position)
    above = min(below + 1, len(values) - 1)
    fraction = position - below
    return values[below] + (values[above] - values[below]) * fraction


def p50(points: Sequence[Point]) -> float | None:
    """Median."""
    return quantile(points, 0.50)


def p95(points: Sequence[Point]) -> float | None:
    """95th percentile."""
    return quantile(points, 0.95)


def p99(points: Sequence[Point]) -> float | None:
    """99th percentile."""
    return quantile(points, 0.99)


def last(points: Sequence[Point]) -> float | None:
    """Value of the latest point (the later one in input order when two share a time)."""
    if not points:
        return None
    latest = max(range(len(points)), key=lambda i: (points[i][0], i))
    return points[latest][1]


def rate(points: Sequence[Point]) -> float | None:
    """Per-second increase of a counter over the window.

    A drop between two points is a counter reset (the process restarted and counts from 0),
    so the increase across it is the new value, as Prometheus ``rate()`` assumes.
    """
    ordered = sorted(points, key=lambda p: p[0])
    if len(ordered) < 2:
        return None
    elapsed = ordered[-1][0] - ordered[0][0]
    if elapsed <= 0:
        return None
    increase = 0.0
    for (_, before), (_, after) in zip(ordered, ordered[1:], strict=False):
        increase += after - before if after >= before else after
    return increase / elapsed


def count(points: Sequence[Point]) -> float | None:
    """Number of points; 0 for an empty window."""
    return float(len(points))


@dataclass(frozen=True)
class Aggregate:
    """A named aggregate and how it treats a window.

    ``per_series``: the aggregate is only meaningful within one label set (a counter's rate
    mixed across two replicas is nonsense), so evaluation applies it per series and sums.
    ``min_points``: the fewest points it needs to say anything.
    """

    name: str
    fn: AggregateFn
    min_points: int = 1
    per_series: bool = False

    def __call__(self, points: Sequence[Point]) -> float | None:
        return self.fn(points)


AGGREGATES: Mapping[str, Aggregate] = MappingProxyType(
    {
        a.name: a
        for a in (
            Aggregate("mean", mean),
            Aggregate("max", maximum),
            Aggregate("min", minimum),
            Aggregate("p50", p50),
            Aggregate("p95", p95),
            Aggregate("p99", p99),
            Aggregate("last", last),
            Aggregate("rate", rate, min_points=2, per_series=True),
            Aggregate("count", count, min_points=0),
        )
    }
)


def get_aggregate(name: str) -> Aggregate:
    """The aggregate called ``name``; ConfigError naming the valid choices otherwise."""
    try:
        return AGGREGATES[name]
    except KeyError as e:
        raise ConfigError(f"unknown aggregate {name!r}; use one of {', '.join(AGGREGATES)}") from e
