"""Slow-failure detectors: actor leaks, stalled placement groups, pending tasks beside free GPUs."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from inferchaos.steady_state.detectors import (
    DetectorConfig,
    detect_actor_growth,
    detect_stalled_placement_groups,
    detect_stalled_requests,
    detect_tasks_pending_with_free_gpus,
    least_squares_slope,
    run_detectors,
)

if TYPE_CHECKING:
    from conftest import Synth

    from inferchaos.steady_state.timeline import Timeline


def test_least_squares_slope() -> None:
    assert least_squares_slope([(0, 1), (1, 3), (2, 5)]) == pytest.approx(2.0)
    assert least_squares_slope([(0, 4), (10, 4), (20, 4)]) == 0.0
    assert least_squares_slope([(0, 1)]) is None
    assert least_squares_slope([(3, 1), (3, 2)]) is None


def test_a_leaking_actor_class_is_flagged_and_a_steady_one_is_not(synth: Synth) -> None:
    leak = [2 + t // 5 for t in range(60)]  # one more actor every 5 s: 0.2/s
    steady = [4, 5, 4, 4, 5, 4] * 10  # noisy but flat
    timeline = synth.timeline(
        synth.rows("ray.actors_alive", leak, labels={"class": "Leaky"}),
        synth.rows("ray.actors_alive", steady, labels={"class": "ServeReplica"}),
    )
    findings = detect_actor_growth(timeline, window_s=30, threshold_per_s=0.05)
    assert [f.subject for f in findings] == ["Leaky"]
    finding = findings[0]
    assert finding.kind == "actor_growth" and finding.layer == "ray"
    assert finding.evidence["slope_per_s"] == pytest.approx(0.2, abs=0.05)
    assert finding.evidence["alive_last"] == 13.0
    assert synth.t0 <= finding.at <= synth.t0 + 30


def test_growth_needs_enough_points(synth: Synth) -> None:
    timeline = synth.timeline(synth.rows("ray.actors_alive", [1, 2, 3], labels={"class": "A"}))
    assert detect_actor_growth(timeline, min_points=5) == []


def test_a_placement_group_pending_while_gpus_are_free_is_a_stall(synth: Synth) -> None:
    timeline = synth.timeline(
        synth.rows("ray.pg_pending_age_s", range(0, 30), labels={"pg": "pg-1", "strategy": "STRICT_SPREAD"}),
        synth.rows("ray.gpus_available", [2.0] * 30),
    )
    findings = detect_stalled_placement_groups(timeline, min_pending_s=10)
    assert len(findings) == 1
    finding = findings[0]
    assert (finding.kind, finding.subject, finding.at) == ("placement_group_stall", "pg-1", synth.t0 + 10)
    assert finding.evidence == {
        "pg": "pg-1",
        "strategy": "STRICT_SPREAD",
        "pending_s": 10.0,
        "gpus_available": 2.0,
    }


def test_a_placement_group_pending_with_no_free_gpu_is_a_shortage_not_a_stall(synth: Synth) -> None:
    timeline = synth.timeline(
        synth.rows("ray.pg_pending_age_s", range(0, 30), labels={"pg": "pg-1", "strategy": "PACK"}),
        synth.rows("ray.gpus_available", [0.0] * 30),
    )
    assert detect_stalled_placement_groups(timeline, min_pending_s=10) == []


def test_stale_gpu_readings_do_not_describe_now(synth: Synth) -> None:
    timeline = synth.timeline(
        synth.rows("ray.pg_pending_age_s", [20.0], start=60, labels={"pg": "pg-1", "strategy": "PACK"}),
        synth.rows("ray.gpus_available", [2.0], start=0),
    )
    assert detect_stalled_placement_groups(timeline, min_pending_s=10) == []


def test_tasks_pending_beside_free_gpus_for_long_enough(synth: Synth) -> None:
    pending = [0, 0, 3, 3, 3, 4, 4, 4, 4, 4, 4]
    timeline = synth.timeline(
        synth.rows("ray.tasks_pending_node_assignment", pending),
        synth.rows("ray.gpus_available", [1.0] * len(pending)),
    )
    findings = detect_tasks_pending_with_free_gpus(timeline, min_duration_s=5)
    assert len(findings) == 1
    assert findings[0].at == synth.t0 + 2
    assert findings[0].evidence["pending_tasks"] == 4.0 and findings[0].evidence["duration_s"] >= 5


def test_a_brief_pending_blip_is_not_a_finding(synth: Synth) -> None:
    pending = [0, 2, 2, 0, 0, 2, 0, 0]
    timeline = synth.timeline(
        synth.rows("ray.tasks_pending_node_assignment", pending),
        synth.rows("ray.gpus_available", [1.0] * len(pending)),
    )
    assert detect_tasks_pending_with_free_gpus(timeline, min_duration_s=5) == []


def test_pending_tasks_without_free_gpus_are_waiting_rightly(synth: Synth) -> None:
    timeline = synth.timeline(
        synth.rows("ray.tasks_pending_node_assignment", [3] * 20),
        synth.rows("ray.gpus_available", [0.0] * 20),
    )
    assert detect_tasks_pending_with_free_gpus(timeline) == []


def test_run_detectors_orders_findings_by_time(synth: Synth) -> None:
    timeline = synth.timeline(
        synth.rows("ray.actors_alive", [t for t in range(40)], labels={"class": "Leaky"}),
        synth.rows("ray.pg_pending_age_s", range(0, 40), labels={"pg": "pg-7", "strategy": "STRICT_PACK"}),
        synth.rows("ray.tasks_pending_node_assignment", [1] * 40),
        synth.rows("ray.gpus_available", [1.0] * 40),
    )
    findings = run_detectors(timeline, DetectorConfig(pg_min_pending_s=20))
    assert {f.kind for f in findings} == {
        "actor_growth",
        "placement_group_stall",
        "tasks_pending_with_free_gpus",
    }
    assert [f.at for f in findings] == sorted(f.at for f in findings)


def hang_timeline(synth: Synth, waits: list[float], ttft: float = 0.1) -> Timeline:
    """A baseline of TTFT ``ttft`` (0-10 s), the fault at 10, and ``waits`` read from 10 on."""
    return synth.timeline(
        synth.rows("canary.ttft_s", [ttft] * 20, step=0.5),
        synth.rows("canary.oldest_wait_s", waits, start=10),
        baseline_start=0,
        injected=10,
    )


def test_a_request_waiting_for_its_first_token_is_noticed_long_before_its_timeout(synth: Synth) -> None:
    # A hung engine: the request sent at 10.2 waits on, 0.8 s, 1.8 s, ... until it would time out.
    waits = [0.0, 0.8, 1.8, 2.8, 3.8, 4.8, 0.0]
    (finding,) = detect_stalled_requests(hang_timeline(synth, waits))
    assert finding.kind == "stalled_request" and finding.at - synth.t0 == 12.0
    assert finding.evidence["threshold_s"] == 1.0 and finding.evidence["wait_s"] == 1.8


def test_the_threshold_follows_the_baseline_so_a_slow_machine_is_not_a_hang(synth: Synth) -> None:
    # Healthy TTFT was 0.4 s here: 5 x 0.4 = 2 s, so waits of up to 1.8 s are not a stall.
    assert detect_stalled_requests(hang_timeline(synth, [0.4, 1.8, 1.2, 0.3], ttft=0.4)) == []
    (finding,) = detect_stalled_requests(hang_timeline(synth, [0.4, 1.8, 2.4], ttft=0.4))
    assert finding.evidence["threshold_s"] == pytest.approx(2.0)


def test_baseline_failures_counted_at_the_timeout_do_not_scale_the_stall_threshold(synth: Synth) -> None:
    # Three baseline requests timed out (censored TTFT samples at the 10 s timeout). Had they
    # counted, the threshold would have been 5 x 10 s and no request could ever stall long enough.
    timeline = synth.timeline(
        synth.rows("canary.ttft_s", [0.4] * 20, step=0.5),
        synth.rows(
            "canary.ttft_s", [10.0] * 3, start=2, step=2, labels={"censored": "1", "replica": "replica-0"}
        ),
        synth.rows("canary.oldest_wait_s", [0.4, 1.8, 2.4], start=10),
        baseline_start=0,
        injected=10,
    )
    (finding,) = detect_stalled_requests(timeline)
    assert finding.evidence["threshold_s"] == pytest.approx(2.0)
    assert finding.evidence["baseline_censored_left_out"] == 3
    assert "3 failed baseline request(s) left out of that p95" in finding.message


def test_one_finding_per_episode_and_run_detectors_includes_it(synth: Synth) -> None:
    timeline = hang_timeline(synth, [0.0, 1.5, 2.5, 0.0, 0.0, 1.2, 0.0])
    findings = detect_stalled_requests(timeline)
    assert [f.at - synth.t0 for f in findings] == [11.0, 15.0]
    assert [f.kind for f in run_detectors(timeline)] == ["stalled_request", "stalled_request"]
    (higher,) = run_detectors(timeline, DetectorConfig(stall_min_wait_s=2.0))
    assert (higher.at - synth.t0, higher.evidence["wait_s"]) == (12.0, 2.5)
