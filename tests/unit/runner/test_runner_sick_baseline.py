"""A baseline outside the environment's sane range ends the run as an error naming it, nothing
injected (exit 2), in the runner and in a plain `chaos run`: no bound scales from a sick baseline."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from inferchaos.ctk import live as ctk_live
from inferchaos.primitives.capabilities import SaneBaseline
from inferchaos.reports.verdict_schema import Status
from inferchaos.steady_state.baseline_gate import SickBaseline
from inferchaos.steady_state.canary import CanaryPace
from inferchaos.steady_state.timeline import Row, Timeline
from tests.fakes.scripted_world import FakeEnv, RunResult, World, make_spec, run_fake_experiment

# No baseline SLO on latency: the platform serves, it is just slow, which only the gate judges.
SLOS: list[dict[str, Any]] = [
    {
        "name": "serves_before",
        "probe": "canary.success",
        "agg": "mean",
        "op": ">=",
        "threshold": 0.9,
        "phase": "baseline",
    },
    {
        "name": "availability",
        "probe": "canary.success",
        "agg": "mean",
        "op": ">=",
        "threshold": 0.9,
        "phase": "during",
    },
    {
        "name": "ttft_after",
        "probe": "canary.ttft_s",
        "agg": "p95",
        "op": "<=",
        "threshold": {"times_baseline": 3, "at_least": 0.3},
        "phase": "recovery",
        "window_s": 0.5,
    },
]
# Slower than the fake local environment's range (2 s), and than every healthy baseline.
SICK = {
    "canary.success": 1.0,
    "canary.ttft_s": 3.0,
    "vllm.kv_cache_usage": 0.1,
    "vllm.num_requests_waiting": 0.0,
}


def _run(tmp_path: Path, env: FakeEnv) -> RunResult:
    return run_fake_experiment(
        make_spec(tmp_path / "sick.yaml", slos=SLOS),
        tmp_path / "run",
        world=World(baseline=dict(SICK)),
        env=env,
    )


def test_a_sick_baseline_ends_the_run_as_an_error_with_nothing_injected(
    tmp_path: Path, private_home: Path
) -> None:
    result = _run(tmp_path, FakeEnv())
    verdict = result.verdict
    assert verdict.status is Status.ERROR and verdict.exit_code == 2, verdict.reason
    assert verdict.reason.startswith(
        "baseline canary.ttft_s p95 3 s is outside this environment's sane range (<= 2 s)"
    ), verdict.reason
    names = result.world.names()
    assert "inject" not in names and "revert" not in names, names
    assert verdict.fault is None
    assert not result.ledger.folder.exists() or not any(result.ledger.folder.iterdir())
    assert "phase.injected" not in result.read("timeline.csv")


def test_the_same_baseline_goes_on_where_the_environment_declares_it_sane(
    tmp_path: Path, private_home: Path
) -> None:
    # The gate, not an SLO, stopped the run above.
    result = _run(tmp_path, FakeEnv(sane_baseline=SaneBaseline(ttft_p95_max_s=5.0)))
    assert "inject" in result.world.names()
    assert "outside this environment's sane range" not in result.verdict.reason


def _fake_sampling(ttft_s: float) -> Callable[..., Any]:
    async def sample(env: Any, timeline: Timeline, pace: CanaryPace, enough: Any, named: Any = None) -> int:
        now = time.time()
        for i in range(10):
            timeline.append_tick(
                [
                    Row(now + i * 0.01, "canary.success", {}, 1.0),
                    Row(now + i * 0.01, "canary.ttft_s", {}, ttft_s),
                ]
            )
        return 10

    return sample


@pytest.mark.parametrize(("ttft_s", "sick"), [(3.0, True), (0.1, False)])
def test_chaos_runs_baseline_sampler_refuses_a_sick_baseline_before_the_method(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ttft_s: float, sick: bool
) -> None:
    monkeypatch.setattr(ctk_live, "open_local_environment", lambda configuration: FakeEnv())
    monkeypatch.setattr(ctk_live, "_sample", _fake_sampling(ttft_s))
    path = tmp_path / "timeline.csv"
    if not sick:
        assert ctk_live.sample_steady_state(str(path), baseline_s=0.01, slos=SLOS)["phase"] == "baseline"
        return
    with pytest.raises(SickBaseline, match=r"^baseline canary.ttft_s p95 3 s is outside this environment's"):
        ctk_live.sample_steady_state(str(path), baseline_s=0.01, slos=SLOS)
    # No method follows a refused baseline: the next call samples a baseline again.
    assert path.resolve() not in ctk_live._BASELINES
