"""Aggregates turn a window of (t, value) into the number an SLO compares."""

from __future__ import annotations

import pytest

from inferchaos.errors import ConfigError
from inferchaos.steady_state.aggregates import AGGREGATES, get_aggregate

POINTS = [(0.0, 4.0), (1.0, 1.0), (2.0, 3.0), (3.0, 2.0)]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("mean", 2.5),
        ("max", 4.0),
        ("min", 1.0),
        ("p50", 2.5),
        ("p95", 3.85),  # rank 0.95 * 3 = 2.85 between 3 and 4
        ("p99", 3.97),
        ("last", 2.0),
        ("count", 4.0),
    ],
)
def test_each_aggregate_over_a_window(name: str, expected: float) -> None:
    assert get_aggregate(name)(POINTS) == pytest.approx(expected)


def test_quantiles_of_one_point_are_that_point() -> None:
    for name in ("p50", "p95", "p99"):
        assert get_aggregate(name)([(5.0, 0.7)]) == 0.7


def test_last_is_the_latest_in_time_not_in_input_order() -> None:
    assert get_aggregate("last")([(2.0, 9.0), (1.0, 5.0)]) == 9.0


def test_rate_is_per_second_increase_of_a_counter() -> None:
    assert get_aggregate("rate")([(0.0, 10.0), (5.0, 20.0), (10.0, 40.0)]) == pytest.approx(3.0)


def test_rate_survives_a_counter_reset() -> None:
    # 10 -> 20 (+10), restart: 20 -> 5 counts as +5 (from 0), 5 -> 15 (+10): 25 over 10 s.
    points = [(0.0, 10.0), (4.0, 20.0), (6.0, 5.0), (10.0, 15.0)]
    assert get_aggregate("rate")(points) == pytest.approx(2.5)


def test_rate_needs_two_points_and_elapsed_time() -> None:
    rate = get_aggregate("rate")
    assert rate([(1.0, 3.0)]) is None
    assert rate([(1.0, 3.0), (1.0, 4.0)]) is None
    assert rate.min_points == 2 and rate.per_series


def test_empty_window_is_undefined_except_for_count() -> None:
    for name in AGGREGATES:
        expected = 0.0 if name == "count" else None
        assert get_aggregate(name)([]) == expected, name


def test_unknown_aggregate_names_the_choices() -> None:
    with pytest.raises(
        ConfigError, match=r"unknown aggregate 'p90'; use one of mean, max, min, p50, p95, p99"
    ):
        get_aggregate("p90")
