"""The baseline gate: a baseline outside the environment's sane range is named, and never scales a bound.

A failed canary request enters canary.ttft_s at the timeout, labelled censored: a baseline that
loses requests reads as sick as a slow one.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from inferchaos.environments.k8s_env import K8sEnvironment
from inferchaos.environments.local.env import LocalEnvironment
from inferchaos.primitives.capabilities import SaneBaseline
from inferchaos.steady_state.baseline_gate import baseline_ttft_p95, sick_baseline
from inferchaos.steady_state.timeline import Mark, Row, Timeline

T0 = 1_800_000_000.0
SANE = SaneBaseline(ttft_p95_max_s=1.5)
CENSORED = {"replica": "replica-0", "censored": "1"}


def _baseline(ttfts: list[float], *, censored: int = 0, injected: list[float] | None = None) -> Timeline:
    """A baseline of one request a second at ``ttfts`` s, then ``censored`` failed requests at the
    10 s timeout; with ``injected``, a during phase at those TTFTs after it."""
    timeline = Timeline()
    timeline.mark(Mark.BASELINE_START, T0)
    t = T0
    for value in ttfts:
        timeline.append_tick([Row(t, "canary.ttft_s", {"replica": "replica-1"}, value)])
        t += 1
    for _ in range(censored):
        timeline.append_tick([Row(t, "canary.ttft_s", CENSORED, 10.0)])
        t += 1
    if injected is not None:
        timeline.mark(Mark.INJECTED, t)
        for value in injected:
            timeline.append_tick([Row(t, "canary.ttft_s", {}, value)])
            t += 1
    return timeline


def test_a_healthy_baseline_passes_the_gate() -> None:
    timeline = _baseline([0.05, 0.08, 0.1, 0.3] * 5)
    assert sick_baseline(timeline, SANE) is None
    assert baseline_ttft_p95(timeline) == pytest.approx(0.3)


def test_a_slow_baseline_is_named_in_one_line() -> None:
    reason = sick_baseline(_baseline([2.4] * 20), SANE)
    assert reason == (
        "baseline canary.ttft_s p95 2.4 s is outside this environment's sane range (<= 1.5 s):"
        " fix the platform or the machine before judging it"
    )


def test_failed_requests_count_at_their_timeout() -> None:
    # Every answered request is fast; two in twenty never answered.
    timeline = _baseline([0.05] * 18, censored=2)
    reason = sick_baseline(timeline, SANE)
    assert reason is not None
    assert reason.startswith("baseline canary.ttft_s p95 10 s is outside this environment's sane range")
    assert "2 of 20 requests failed and counted at the timeout" in reason


def test_only_the_baseline_is_gated() -> None:
    # A fault that slows every request afterwards says nothing about the baseline.
    assert sick_baseline(_baseline([0.1] * 10, injected=[9.0] * 10), SANE) is None


def test_a_baseline_without_a_first_token_is_left_to_the_baseline_slos() -> None:
    assert sick_baseline(Timeline(), SANE) is None
    timeline = Timeline()
    timeline.mark(Mark.BASELINE_START, T0)
    timeline.append_tick([Row(T0, "canary.success", {}, 1.0)])
    assert sick_baseline(timeline, SANE) is None


def test_the_threshold_is_inclusive() -> None:
    assert sick_baseline(_baseline([1.5] * 20), SANE) is None


def _k8s(env: str) -> K8sEnvironment:
    config: Any = SimpleNamespace(env=env)
    return K8sEnvironment(config)


def test_every_environment_declares_a_range_above_the_healthy_baselines_and_below_the_ceiling() -> None:
    # Healthy local baselines read 0.03-0.68 s (experiments/*.yaml); the default ceiling of a
    # relative bound is 5 s (half the canary's 10 s timeout).
    for env in (LocalEnvironment(), _k8s("kind"), _k8s("cluster")):
        assert 0.7 < env.sane_baseline.ttft_p95_max_s < 5.0, env.name
    assert _k8s("cluster").sane_baseline.ttft_p95_max_s <= _k8s("kind").sane_baseline.ttft_p95_max_s
