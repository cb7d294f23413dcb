"""bench/detection_ladder.py without an environment: the experiments it builds validate, and its table."""

from __future__ import annotations

import pytest

from bench.detection_ladder import FAULTS, SignalSummary, experiment_spec, format_table, summarize
from inferchaos.errors import ConfigError
from inferchaos.faults.registry import get_fault
from inferchaos.steady_state.detection import SignalDetection


@pytest.mark.parametrize(("fault", "arguments"), FAULTS, ids=[name for name, _ in FAULTS])
def test_each_fault_gets_a_valid_short_experiment(fault: str, arguments: dict[str, object]) -> None:
    try:
        get_fault(fault)
    except ConfigError:
        pytest.skip(f"{fault} is not registered in this inferchaos")  # ray.kill_gcs is being written
    spec = experiment_spec(fault, arguments, baseline_s=10, during_s=15)
    assert spec.fault.fault == fault and spec.fault.duration_s == 15 and spec.baseline_s == 10
    assert {s.name for s in spec.slos.slos} >= {"availability", "serves_after"}


def run(inferchaos: float | None, health: float | None, serve: float | None = None) -> list[SignalDetection]:
    entries = [
        SignalDetection("inferchaos", "inferchaos.slo_or_detector", inferchaos),
        SignalDetection("vllm", "vllm.health", health),
    ]
    if serve is not None:
        entries.append(SignalDetection("ray", "ray.serve_replicas", serve))
    return entries


def test_median_and_max_per_signal_count_only_the_runs_that_noticed() -> None:
    results = {
        "vllm.hang_engine": [run(1.0, None), run(2.0, None), run(1.5, None)],
        "vllm.kill_engine": [run(0.5, 1.0, 6.0), run(0.7, 3.0)],
    }
    assert summarize(results) == [
        SignalSummary("vllm.hang_engine", "inferchaos", "inferchaos.slo_or_detector", 3, 3, 1.5, 2.0),
        SignalSummary("vllm.hang_engine", "vllm", "vllm.health", 3, 0, None, None),
        SignalSummary("vllm.kill_engine", "inferchaos", "inferchaos.slo_or_detector", 2, 2, 0.6, 0.7),
        SignalSummary("vllm.kill_engine", "vllm", "vllm.health", 2, 2, 2.0, 3.0),
        # Listed by one run only: the other could not have it.
        SignalSummary("vllm.kill_engine", "ray", "ray.serve_replicas", 1, 1, 6.0, 6.0),
    ]


def test_the_table_puts_inferchaos_beside_the_platform_and_says_never() -> None:
    table = format_table(summarize({"vllm.hang_engine": [run(1.0, None), run(2.0, None)]}))
    lines = table.splitlines()
    assert lines[0].split() == ["fault", "layer", "signal", "noticed", "median", "max"]
    assert lines[1].split() == ["vllm.hang_engine", "inferchaos", "inferchaos", "2/2", "1.5", "s", "2.0", "s"]
    assert lines[2].split() == ["vllm.hang_engine", "vllm", "vllm", "/health", "0/2", "never", "never"]
