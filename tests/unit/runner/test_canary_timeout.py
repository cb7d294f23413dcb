"""An experiment's `canary.request_timeout_s` is the canary's timeout, and its latency SLOs stay
well below it.

A canary request slower than its timeout is a failure with no TTFT, so a latency threshold at
or near the timeout can hardly be breached: the slow requests vanish from the very percentile
that should catch them. The run hands the probe factory that pace, and the replicas its SLOs name.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from inferchaos.run.spec import ExperimentSpec, load_and_validate
from inferchaos.steady_state.canary import CanaryPace
from inferchaos.steady_state.slo import Op
from tests.fakes.scripted_world import DEFAULT_SLOS, make_spec, run_fake_experiment

pytestmark = pytest.mark.long_running

REPO = Path(__file__).resolve().parents[3]
# Controls run these same files against a broken platform.
EXPERIMENTS = sorted((REPO / "experiments").glob("*.yaml"))
LATENCY_PROBES = ("canary.ttft_s", "canary.e2e_s", "canary.itl_s")
# Room between a fixed latency threshold and the timeout: a request a little slower than the
# threshold must still arrive to be counted.
MARGIN = 0.8


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.stem)
def test_fixed_latency_thresholds_stay_well_below_the_canary_timeout(path: Path) -> None:
    spec: ExperimentSpec = load_and_validate(path)
    for slo in spec.slos.slos:
        if slo.probe in LATENCY_PROBES and slo.op in (Op.LE, Op.LT) and slo.scale is None:
            assert slo.threshold <= MARGIN * spec.canary_timeout_s, (
                f"{slo.name}: {slo.threshold:g} s against a canary timeout of {spec.canary_timeout_s:g} s"
            )


def test_the_experiment_sets_the_canary_timeout_and_the_run_keeps_the_rate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INFERCHAOS_HOME", str(tmp_path / "home"))
    spec = replace(make_spec(tmp_path / "fake.yaml"), canary_timeout_s=30.0, canary_max_in_flight=60)
    result = run_fake_experiment(spec, tmp_path / "run")
    assert result.probes.paces == [CanaryPace(rate_per_s=2.0, request_timeout_s=30.0, max_in_flight=60)]


def test_without_a_canary_block_the_timeout_is_ten_seconds_with_eight_in_flight() -> None:
    spec = load_and_validate(REPO / "experiments" / "engine_hang.yaml")
    assert (spec.canary_timeout_s, spec.canary_max_in_flight) == (10.0, 8)


def test_the_run_reads_each_replica_its_slos_and_stop_conditions_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A fleet too large to read whole still reads these each tick (inferchaos/run/probe_set.py).
    monkeypatch.setenv("INFERCHAOS_HOME", str(tmp_path / "home"))
    back = {
        "name": "replica_back",
        "probe": "vllm.healthy",
        "labels": {"replica": "replica-1"},
        "agg": "min",
        "op": ">=",
        "threshold": 1,
        "phase": "recovery",
        "window_s": 0.5,
    }
    guard = {
        "name": "replica_2_serves",
        "probe": "canary.success",
        "labels": {"replica": "replica-2"},
        "op": ">=",
        "threshold": 0.0,
        "agg": "mean",
        "window_s": 1,
    }
    spec = make_spec(tmp_path / "fake.yaml", slos=[*DEFAULT_SLOS, back], stop_conditions=[guard])
    result = run_fake_experiment(spec, tmp_path / "run")
    assert result.probes.named == [frozenset({"replica-1", "replica-2"})]
