"""The slos/recovery keys of an experiment: a valid one parses, every mistake names its key path."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from inferchaos.errors import ConfigError
from inferchaos.steady_state.slo import Op, Phase, ensure_slos_are_valid

EXAMPLE = yaml.safe_load(
    """
slos:
  - {name: canary_ttft_p95, probe: canary.ttft_s, agg: p95, op: "<=", threshold: 1.5, phase: during}
  - {name: availability, probe: canary.success, agg: mean, op: ">=", threshold: 0.99, phase: during}
  - {name: kv_headroom, probe: vllm.kv_cache_usage, agg: max, op: "<=", threshold: 0.95, phase: baseline,
     labels: {replica: replica-0}, window_s: 10}
recovery: {within_s: 90, hold_s: 5, steady: [canary_ttft_p95, availability]}
"""
)


DELETE = object()


def with_change(path: tuple[Any, ...], value: object) -> dict[str, Any]:
    """EXAMPLE with the key at ``path`` set to ``value`` (a ``DELETE`` value removes it)."""
    doc = copy.deepcopy(EXAMPLE)
    target = doc
    for key in path[:-1]:
        target = target[key]
    if value is DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return doc


def test_the_documented_example_is_valid() -> None:
    spec = ensure_slos_are_valid(EXAMPLE)
    assert [s.name for s in spec.slos] == ["canary_ttft_p95", "availability", "kv_headroom"]
    ttft = spec.slos[0]
    assert (ttft.probe, ttft.agg, ttft.op, ttft.threshold, ttft.phase) == (
        "canary.ttft_s",
        "p95",
        Op.LE,
        1.5,
        Phase.DURING,
    )
    assert ttft.layer == "canary" and ttft.window_s is None and ttft.labels == {}
    kv = spec.slos[2]
    assert kv.labels == {"replica": "replica-0"} and kv.window_s == 10.0 and kv.layer == "vllm"
    assert spec.recovery is not None
    assert (spec.recovery.within_s, spec.recovery.hold_s, spec.recovery.steady) == (
        90.0,
        5.0,
        ("canary_ttft_p95", "availability"),
    )


def test_a_recovery_window_may_be_a_number_of_replica_cold_starts() -> None:
    spec = ensure_slos_are_valid(with_change(("recovery", "within_cold_starts"), 1.5))
    assert spec.recovery is not None and spec.recovery.within_cold_starts == 1.5
    # within_s stays the floor, and the whole window where no cold start was read.
    assert (spec.recovery.window_s(80.0), spec.recovery.window_s(20.0), spec.recovery.window_s(None)) == (
        120.0,
        90.0,
        90.0,
    )
    assert spec.recovery.describe() == "90 s of the revert, or 1.5 replica cold starts if longer"


def test_a_steady_slo_may_have_a_deadline_of_its_own() -> None:
    spec = ensure_slos_are_valid(with_change(("recovery", "first_within_s"), {"availability": 30}))
    assert spec.recovery is not None and spec.recovery.first_within_s == {"availability": 30.0}
    assert spec.recovery.describe() == "90 s of the revert; availability first within 30 s"


def test_recovery_is_optional_and_hold_defaults_to_zero() -> None:
    assert ensure_slos_are_valid(with_change(("recovery",), DELETE)).recovery is None
    spec = ensure_slos_are_valid(with_change(("recovery", "hold_s"), DELETE))
    assert spec.recovery is not None and spec.recovery.hold_s == 0.0


def test_ops_compare_as_written() -> None:
    assert Op.LE.holds(1.5, 1.5) and not Op.LT.holds(1.5, 1.5)
    assert Op.GE.holds(0.99, 0.99) and Op.NE.holds(1, 2) and Op.EQ.holds(0, 0.0)


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("slos",), DELETE, "slos: required; declare at least one SLO"),
        (("slos",), [], "slos: must be a non-empty list"),
        (("slos",), {"name": "x"}, "slos: must be a non-empty list of SLOs, got dict"),
        (("slos", 1), "availability", "slos[1]: must be a mapping, got str"),
        (("slos", 1, "op"), "=>", "slos[1].op: unknown operator '=>'; use one of <, <=, >, >=, ==, !="),
        (("slos", 0, "agg"), "p90", "slos[0].agg: unknown aggregate 'p90'; use one of mean, max, min"),
        (
            ("slos", 2, "phase"),
            "after",
            "slos[2].phase: unknown phase 'after'; use one of baseline, during, recovery",
        ),
        (("slos", 0, "threshold"), "1.5", "slos[0].threshold: must be a number, got str '1.5'"),
        (("slos", 0, "threshold"), True, "slos[0].threshold: must be a number, got bool"),
        (("slos", 0, "threshold"), float("nan"), "slos[0].threshold: must be a finite number"),
        (("slos", 0, "threshold"), None, "slos[0].threshold: must be a number, got null"),
        (
            ("slos", 1, "probe"),
            "vllm.kv_cache_usge",
            "slos[1].probe: unknown probe 'vllm.kv_cache_usge'; did you mean 'vllm.kv_cache_usage'?",
        ),
        (
            ("slos", 1, "probe"),
            "gpu.memory",
            "slos[1].probe: unknown probe 'gpu.memory'; names start with one of vllm., ray.",
        ),
        (("slos", 1, "probe"), 3, "slos[1].probe: must be a probe name"),
        (("slos", 2, "window_s"), -5, "slos[2].window_s: must be more than 0 seconds, got -5"),
        (("slos", 2, "window_s"), 0, "slos[2].window_s: must be more than 0 seconds"),
        (("slos", 2, "window_s"), float("inf"), "slos[2].window_s: must be a finite number, got inf"),
        (("slos", 2, "window_s"), float("nan"), "slos[2].window_s: must be a finite number, got nan"),
        (("slos", 2, "window_s"), "5s", "slos[2].window_s: must be a number, got str '5s'"),
        (("slos", 2, "labels"), ["replica-0"], "slos[2].labels: must be a mapping, got list"),
        (("slos", 2, "labels"), {"gpu": 0}, "slos[2].labels.gpu: label values must be strings (quote them)"),
        (("slos", 0, "treshold"), 2, "slos[0].treshold: unknown key; use one of name, probe, agg"),
        (("slos", 0, "phase"), DELETE, "slos[0].phase: required"),
        (("slos", 0, "name"), "", "slos[0].name: must be a non-empty string"),
        (
            ("slos", 2, "name"),
            "canary_ttft_p95",
            "slos[2].name: duplicate SLO name 'canary_ttft_p95' (also slos[0])",
        ),
        (("recovery",), [90], "recovery: must be a mapping, got list"),
        (("recovery", "within_s"), -1, "recovery.within_s: must be more than 0 seconds, got -1"),
        (("recovery", "within_s"), DELETE, "recovery.within_s: required"),
        (("recovery", "within_s"), float("nan"), "recovery.within_s: must be a finite number, got nan"),
        (("recovery", "within_s"), float("inf"), "recovery.within_s: must be a finite number, got inf"),
        (("recovery", "hold_s"), float("inf"), "recovery.hold_s: must be a finite number, got inf"),
        (("slos", 0, "threshold"), float("-inf"), "slos[0].threshold: must be a finite number, got -inf"),
        (("recovery", "hold_s"), -2, "recovery.hold_s: must be 0 or more seconds, got -2"),
        (("recovery", "hold_s"), "5", "recovery.hold_s: must be a number, got str '5'"),
        (("recovery", "steady"), [], "recovery.steady: must be a non-empty list of SLO names"),
        (
            ("recovery", "steady"),
            "availability",
            "recovery.steady: must be a non-empty list of SLO names, got 'availability'",
        ),
        (
            ("recovery", "steady"),
            ["availability", "latency"],
            "recovery.steady[1]: no SLO named 'latency'; declared: canary_ttft_p95, availability, kv_headroom",
        ),
        (
            ("recovery", "hold"),
            5,
            "recovery.hold: unknown key; use one of within_s, within_cold_starts, hold_s, steady, first_within_s",
        ),
        (
            ("recovery", "within_cold_starts"),
            0,
            "recovery.within_cold_starts: must be more than 0 (how many replica cold starts recovery may take), got 0",
        ),
        (
            ("recovery", "within_cold_starts"),
            "2",
            "recovery.within_cold_starts: must be a number, got str '2'",
        ),
        (("recovery", "first_within_s"), 30, "recovery.first_within_s: must be a mapping, got int"),
        (
            ("recovery", "first_within_s"),
            {"kv_headroom": 30},
            "recovery.first_within_s.kv_headroom: 'kv_headroom' is not a steady SLO; recovery.steady: canary_ttft_p95, availability",
        ),
        (
            ("recovery", "first_within_s"),
            {"availability": 90},
            "recovery.first_within_s.availability: must be shorter than recovery.within_s (90 s), got 90",
        ),
        (
            ("recovery", "first_within_s"),
            {"availability": 0},
            "recovery.first_within_s.availability: must be more than 0 seconds, got 0",
        ),
    ],
)
def test_each_mistake_is_reported_with_its_key_path(
    path: tuple[Any, ...], value: object, message: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        ensure_slos_are_valid(with_change(path, value))
    text = str(raised.value)
    assert text.startswith(message), text
    assert "\n" not in text
    assert raised.value.exit_code == 2


def test_the_first_error_in_document_order_is_reported() -> None:
    doc = with_change(("slos", 1, "op"), "=>")
    doc["slos"][2]["phase"] = "after"
    with pytest.raises(ConfigError, match=r"^slos\[1\]\.op"):
        ensure_slos_are_valid(doc)


def test_probes_are_checked_against_the_names_the_caller_knows() -> None:
    doc = with_change(("slos", 0, "probe"), "ray.object_store_bytes")
    with pytest.raises(ConfigError, match=r"slos\[0\]\.probe: unknown probe 'ray.object_store_bytes'"):
        ensure_slos_are_valid(doc)
    spec = ensure_slos_are_valid(
        doc, known_probes={"ray.object_store_bytes", "canary.success", "vllm.kv_cache_usage"}
    )
    assert spec.slos[0].probe == "ray.object_store_bytes"


def test_open_families_accept_any_name() -> None:
    spec = ensure_slos_are_valid(with_change(("slos", 0, "probe"), "load.requests_per_s"))
    assert spec.slos[0].layer == "load"
