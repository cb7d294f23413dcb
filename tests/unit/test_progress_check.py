"""The progress-aware health check fails a hung replica, and only a hung one."""

from __future__ import annotations

import pytest

from inferchaos.environments.local.progress_check import CpuRead, ProgressWatch, StarvationWatch


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


def _judge_stretch(watch: StarvationWatch, start: CpuRead, ran: float, waited: float, seconds: int,
                   tokens_per_s: float = 50.0, busy_fraction: float = 1.0) -> list[str | None]:  # fmt: skip
    """One read per second from ``start``: each second the replica's threads ran ``ran`` s and waited ``waited`` s."""
    read, verdicts = start, []
    for _ in range(seconds):
        read = CpuRead(wall_s=read.wall_s + 1, busy_s=read.busy_s + busy_fraction, cpu_s=read.cpu_s + ran,
                       wait_s=read.wait_s + waited, tokens=read.tokens + tokens_per_s)  # fmt: skip
        verdicts.append(watch.judge(read))
    return verdicts


ZERO = CpuRead(0, 0, 0, 0, 0)


def test_a_replica_held_to_a_tenth_of_its_cpu_is_starved_once_a_stretch_is_judged() -> None:
    watch = StarvationWatch(starved_share=0.25, min_demand_cores=0.3, judge_busy_s=2)
    assert _judge_stretch(watch, ZERO, ran=1.4, waited=0.1, seconds=5) == [None] * 5
    # A quota: the engine runs 0.15 s of every second and waits, runnable, the rest.
    verdicts = _judge_stretch(watch, CpuRead(5, 5, 7.0, 0.5, 250), ran=0.15, waited=0.85, seconds=5)
    # The stretch judged is its last 2 busy seconds: starved once most of them are throttled.
    assert verdicts[0] is None
    assert all(v is not None and "got 0.15 of the CPU it was ready to use" in v for v in verdicts[2:])
    assert watch.take_lowest() == pytest.approx(0.15)
    assert watch.take_lowest() is None, "taken: the next log line covers what is judged after it"


def test_a_busy_machine_starves_no_replica_that_gets_its_turn() -> None:
    watch = StarvationWatch(starved_share=0.25, min_demand_cores=0.3, judge_busy_s=2)
    # Two replicas, the flood and a CPU hog on 2 cores: each engine waits as long as it runs.
    assert _judge_stretch(watch, ZERO, ran=0.6, waited=0.6, seconds=30) == [None] * 30
    assert watch.take_lowest() == pytest.approx(0.5)


def test_a_replica_that_asks_for_little_cpu_is_not_judged() -> None:
    watch = StarvationWatch(starved_share=0.25, min_demand_cores=0.3, judge_busy_s=2)
    # Waiting on its client, not on a CPU: a tiny share of a tiny demand is noise.
    assert _judge_stretch(watch, ZERO, ran=0.02, waited=0.1, seconds=30) == [None] * 30


def test_sparse_requests_are_judged_over_their_busy_time_only() -> None:
    watch = StarvationWatch(starved_share=0.25, min_demand_cores=0.3, judge_busy_s=2)
    # A canary request every second keeps the replica busy a tenth of the time, at full speed then.
    assert _judge_stretch(watch, ZERO, ran=0.12, waited=0.01, seconds=60, busy_fraction=0.1) == [None] * 60
    throttled = _judge_stretch(watch, CpuRead(60, 6, 7.2, 0.6, 3000), ran=0.02, waited=0.1, seconds=40,
                               busy_fraction=0.1)  # fmt: skip
    assert throttled[-1] is not None, "a tenth of the time busy, and throttled then: starved"


def test_cpu_without_any_token_is_a_hang_for_the_stall_check_not_starvation() -> None:
    watch = StarvationWatch(starved_share=0.25, min_demand_cores=0.3, judge_busy_s=2)
    assert _judge_stretch(watch, ZERO, ran=0.1, waited=0.9, seconds=10, tokens_per_s=0) == [None] * 10


def test_a_replaced_server_or_a_check_turned_back_on_starts_a_new_stretch() -> None:
    watch = StarvationWatch(starved_share=0.25, min_demand_cores=0.3, judge_busy_s=2)
    _judge_stretch(watch, ZERO, ran=0.1, waited=0.9, seconds=4)
    # The server was replaced: its counters start again.
    restarted = CpuRead(wall_s=5, busy_s=5, cpu_s=0.05, wait_s=0.4, tokens=5)
    assert watch.judge(restarted) is None
    assert _judge_stretch(watch, restarted, ran=0.1, waited=0.9, seconds=1) == [None]
    assert _judge_stretch(watch, CpuRead(6, 6, 0.15, 1.3, 55), ran=0.1, waited=0.9, seconds=1)[0] is not None
    watch.restart()
    assert watch.judge(CpuRead(20, 20, 2.0, 10, 500)) is None, (
        "a restarted check judges no stretch at its first read"
    )
