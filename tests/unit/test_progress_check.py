"""The progress-aware health check fails a hung replica, and only a hung one."""

from __future__ import annotations

import pytest

from inferchaos.environments.local.progress_check import ProgressWatch, StarvationWatch


def test_an_idle_replica_is_never_judged() -> None:
    watch = ProgressWatch(stall_after_s=5)
    assert not watch.suspect(1000.0)


def test_requests_without_progress_make_the_replica_hung_one_check_after_the_counters_are_read() -> None:
    watch = ProgressWatch(stall_after_s=5)
    watch.started(100.0)
    assert not watch.suspect(104.0)
    assert watch.suspect(105.0)
    # The first read of vLLM's counters only starts the comparison.
    assert watch.stalled(105.0, tokens=42) is None
    reason = watch.stalled(106.0, tokens=42)
    assert reason is not None
    assert "1 request(s) in flight" in reason and "no progress for 6.0 s" in reason


def test_tokens_produced_without_bytes_relayed_are_progress() -> None:
    # A non-streaming request answers only at its end; vLLM's counters show it working.
    watch = ProgressWatch(stall_after_s=5)
    watch.started(0.0)
    assert watch.stalled(5.0, tokens=10) is None
    assert watch.stalled(6.0, tokens=30) is None
    assert not watch.suspect(10.0), "progress seen at 6 s restarts the stall clock"
    assert watch.suspect(11.0)


def test_streamed_bytes_keep_a_saturated_replica_healthy() -> None:
    watch = ProgressWatch(stall_after_s=5)
    for request in range(8):
        watch.started(float(request))
    for t in range(8, 60):
        watch.progressed(float(t))
        assert not watch.suspect(t + 0.9)


def test_the_stall_clock_starts_when_the_first_request_arrives_not_when_the_replica_fell_idle() -> None:
    watch = ProgressWatch(stall_after_s=5)
    watch.started(0.0)
    watch.finished(1.0)
    watch.started(500.0)
    assert not watch.suspect(501.0)


def test_a_finished_request_is_progress_and_never_leaves_a_negative_count() -> None:
    watch = ProgressWatch(stall_after_s=5)
    watch.started(0.0)
    watch.started(0.0)
    watch.finished(4.0)
    assert not watch.suspect(8.0)
    assert watch.suspect(9.0)
    watch.finished(9.0)
    watch.finished(9.0)
    assert watch.in_flight == 0
    assert not watch.suspect(100.0)


def test_busy_time_counts_only_stretches_with_requests_in_flight() -> None:
    watch = ProgressWatch()
    watch.started(10.0)
    watch.started(11.0)
    watch.finished(12.0)
    assert watch.busy_total(13.0) == 3.0, "one request still in flight"
    watch.finished(14.0)
    watch.started(100.0)
    assert watch.busy_total(101.5) == 5.5, "the idle 86 s are not busy"


def _judge_stretch(watch: StarvationWatch, start: tuple[float, float, float], cores: float,
                   busy_s: float, tokens_per_s: float = 50.0) -> list[str | None]:  # fmt: skip
    """Reads once per busy second from ``start`` (busy s, CPU s, tokens) with ``cores`` of CPU."""
    busy, cpu, tokens = start
    verdicts = []
    for _ in range(int(busy_s)):
        busy, cpu, tokens = busy + 1, cpu + cores, tokens + tokens_per_s
        verdicts.append(watch.judge(busy, cpu, tokens))
    return verdicts


def test_a_replica_getting_a_tenth_of_its_cpu_is_starved_once_a_stretch_is_judged() -> None:
    watch = StarvationWatch(fraction=0.25, judge_busy_s=3)
    watch.seed(cpu_s=0.95, wall_s=1.0)
    assert _judge_stretch(watch, (0, 0, 0), cores=1.0, busy_s=5) == [None] * 5
    verdicts = _judge_stretch(watch, (5, 5.0, 250), cores=0.1, busy_s=6)
    # The stretch judged is the last 3 busy seconds: starved once they are all slow.
    assert verdicts[:2] == [None, None]
    assert all(v is not None and "starved: 0.10 CPU cores" in v and "1.00 it had" in v for v in verdicts[3:])


def test_a_busy_machine_sharing_its_cores_starves_no_replica() -> None:
    watch = StarvationWatch(fraction=0.25, judge_busy_s=3)
    watch.seed(cpu_s=1.0, wall_s=1.0)
    # Two replicas, the flood and a CPU hog on 2 cores: each replica gets about half a core.
    assert _judge_stretch(watch, (0, 0, 0), cores=0.45, busy_s=30) == [None] * 30


def test_cpu_without_any_token_is_a_hang_for_the_stall_check_not_starvation() -> None:
    watch = StarvationWatch(fraction=0.25, judge_busy_s=3)
    watch.seed(cpu_s=1.0, wall_s=1.0)
    assert _judge_stretch(watch, (0, 0, 0), cores=0.0, busy_s=10, tokens_per_s=0) == [None] * 10


def test_the_best_stretch_is_the_reference_and_a_replaced_server_starts_a_new_stretch() -> None:
    watch = StarvationWatch(fraction=0.25, judge_busy_s=3)
    # Without a warm-up, the first stretch is the reference.
    assert _judge_stretch(watch, (0, 0, 0), cores=0.8, busy_s=4) == [None] * 4
    assert watch.best_cores == pytest.approx(0.8)
    # The server was replaced: its counters start again; nothing is judged across the change.
    assert watch.judge(1.0, 0.1, 5.0) is None
    assert _judge_stretch(watch, (1.0, 0.1, 5.0), cores=0.1, busy_s=2) == [None, None]
    assert _judge_stretch(watch, (3.0, 0.3, 105.0), cores=0.1, busy_s=1)[0] is not None
    watch.restart()
    assert watch.judge(10.0, 2.0, 500.0) is None, "a restarted check judges no stretch at its first read"
