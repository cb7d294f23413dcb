"""inferchaos.params, the one parser of user input: numbers must be finite wherever they are read."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from inferchaos.errors import ConfigError
from inferchaos.params import InvalidValue, convert, number, parse_params, seconds


@dataclass
class Knobs:
    rate_per_s: float = 0.0
    timeout_s: float | None = None
    weights: list[float] = field(default_factory=list)
    count: int = 1


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"rate_per_s": float("nan")}, "fault.x: parameter 'rate_per_s' must be a finite number, got nan"),
        ({"rate_per_s": float("inf")}, "fault.x: parameter 'rate_per_s' must be a finite number, got inf"),
        ({"timeout_s": float("-inf")}, "fault.x: parameter 'timeout_s' must be a finite number, got -inf"),
        (
            {"weights": [1.0, float("nan")]},
            "fault.x: parameter 'weights' must be a finite number, got [1.0, nan]",
        ),
        ({"timeout_s": "5"}, "fault.x: parameter 'timeout_s' must be float or null, got '5'"),
        ({"count": 1.5}, "fault.x: parameter 'count' must be int, got 1.5"),
    ],
)
def test_parse_params_refuses_nan_inf_and_wrong_types_naming_the_key(
    params: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_params("fault.x", Knobs, params)
    assert str(raised.value) == message
    assert raised.value.exit_code == 2


def test_parse_params_keeps_finite_numbers_and_null() -> None:
    knobs = parse_params("fault.x", Knobs, {"rate_per_s": 2, "timeout_s": None, "weights": [0.5, 1e300]})
    assert (knobs.rate_per_s, knobs.timeout_s, knobs.weights) == (2, None, [0.5, 1e300])


def test_convert_names_the_key_it_is_given() -> None:
    with pytest.raises(InvalidValue) as raised:
        convert(float("nan"), float | None, "method[0].provider.arguments.rate_per_s")
    assert (raised.value.key, raised.value.problem) == (
        "method[0].provider.arguments.rate_per_s",
        "must be a finite number, got nan",
    )
    assert convert(3, int | None, "concurrency") == 3


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (float("nan"), "must be a finite number, got nan"),
        (float("inf"), "must be a finite number, got inf"),
        ("5", "must be a number, got str '5'"),
        (True, "must be a number, got bool True"),
        (None, "must be a number, got null None"),
        (0, "must be more than 0 seconds, got 0"),
        (-1.5, "must be more than 0 seconds, got -1.5"),
    ],
)
def test_seconds_refuses_what_is_not_a_positive_finite_duration(value: object, problem: str) -> None:
    with pytest.raises(InvalidValue) as raised:
        seconds(value, "pauses.after")
    assert str(raised.value) == f"pauses.after: {problem}"


def test_seconds_takes_zero_only_when_allowed_and_number_takes_any_finite_value() -> None:
    assert seconds(0, "hold_s", allow_zero=True) == 0.0
    with pytest.raises(InvalidValue, match=r"^hold_s: must be 0 or more seconds, got -1$"):
        seconds(-1, "hold_s", allow_zero=True)
    assert seconds(2, "within_s") == 2.0
    assert number(-3, "threshold") == -3.0
