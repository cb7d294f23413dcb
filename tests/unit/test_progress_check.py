"""The progress-aware health check fails a hung replica, and only a hung one."""

from __future__ import annotations

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


def _judge_stretch(
    watch: StarvationWatch,
    start: CpuRead,
    periods: int,
    throttled: int,
    seconds: int,
    tokens_per_s: float = 50.0,
    busy_fraction: float = 1.0,
) -> list[str | None]:
    """One read per second from ``start``: each second the cgroup ran in ``periods`` CFS periods, throttled in ``throttled``."""
    read, verdicts = start, []
    for _ in range(seconds):
        read = CpuRead(
            wall_s=read.wall_s + 1,
            busy_s=read.busy_s + busy_fraction,
            periods=read.periods + periods,
            throttled=read.throttled + throttled,
            tokens=read.tokens + tokens_per_s,
            period_s=read.period_s,
        )
        verdicts.append(watch.judge(read))
    return verdicts


ZERO = CpuRead(0, 0, 0, 0, 0)


class _AnyReason:
    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and other.startswith("starved:")


ANY_REASON = _AnyReason()


def test_a_replica_its_quota_throttles_most_of_the_time_is_starved_once_a_stretch_is_judged() -> None:
    watch = StarvationWatch(throttled_share=0.5, min_periods=5, judge_busy_s=2)
    # In no group with a quota: no period is counted, whatever the replica does.
    assert _judge_stretch(watch, ZERO, periods=0, throttled=0, seconds=5) == [None] * 5
    # A tenfold quota: throttled in 9 of the 10 periods of every busy second.
    verdicts = _judge_stretch(watch, CpuRead(5, 5, 0, 0, 250), periods=10, throttled=9, seconds=4)
    # Judged over its last 2 busy seconds, the first of them before the quota: 9 of 10 periods.
    assert verdicts[0] is not None and "throttled it in 9 of the 10 periods" in verdicts[0]
    assert all(v is not None and "throttled it in 18 of the 20 periods" in v for v in verdicts[1:])
    fresh = StarvationWatch(throttled_share=0.5, min_periods=5, judge_busy_s=2)
    # Its first read only starts the stretch: 2 busy seconds have passed at its third.
    assert _judge_stretch(fresh, ZERO, periods=10, throttled=9, seconds=3)[1:] == [None, ANY_REASON]


def test_a_quota_that_throttles_now_and_then_starves_no_replica() -> None:
    watch = StarvationWatch(throttled_share=0.5, min_periods=5, judge_busy_s=2)
    # A limit a busy replica brushes against: throttled in 4 of 10 periods.
    assert _judge_stretch(watch, ZERO, periods=10, throttled=4, seconds=30) == [None] * 30


def test_a_replica_that_barely_ran_is_not_judged() -> None:
    watch = StarvationWatch(throttled_share=0.5, min_periods=5, judge_busy_s=2)
    assert _judge_stretch(watch, ZERO, periods=1, throttled=1, seconds=4) == [None] * 4


def test_sparse_requests_are_judged_over_their_busy_time_only() -> None:
    watch = StarvationWatch(throttled_share=0.5, min_periods=5, judge_busy_s=2)
    # A canary request every second keeps a throttled replica busy a tenth of the time.
    verdicts = _judge_stretch(watch, ZERO, periods=3, throttled=3, seconds=25, busy_fraction=0.1)
    assert verdicts[:18] == [None] * 18, "2 busy seconds take 20 wall seconds to add up"
    assert verdicts[-1] is not None


def test_periods_an_idle_engine_wakes_in_do_not_dilute_the_ones_requests_waited_in() -> None:
    watch = StarvationWatch(throttled_share=0.5, min_periods=5, judge_busy_s=2)
    # An engine that wakes in every 100 ms period while idle, and requests in flight a fifth of
    # each second, throttled in every busy period: 2 of the 10 periods it ran in each second.
    verdicts = _judge_stretch(watch, ZERO, periods=10, throttled=2, seconds=15, busy_fraction=0.2)
    assert verdicts[-1] is not None and "(20 periods' worth)" in verdicts[-1]
    # A quota it only brushes against while busy is still no starvation.
    brushed = StarvationWatch(throttled_share=0.5, min_periods=5, judge_busy_s=2)
    assert _judge_stretch(brushed, ZERO, periods=10, throttled=0, seconds=15, busy_fraction=0.2)[-1] is None
    # A longer quota period spans fewer periods per busy second.
    long_period = _judge_stretch(
        StarvationWatch(throttled_share=0.5, min_periods=5, judge_busy_s=2),
        CpuRead(0, 0, 0, 0, 0, period_s=0.5),
        periods=2,
        throttled=1,
        seconds=15,
        busy_fraction=0.5,
    )
    assert long_period[-1] is not None and "(4 periods' worth)" in long_period[-1]


def test_cpu_without_any_token_is_a_hang_for_the_stall_check_not_starvation() -> None:
    watch = StarvationWatch(throttled_share=0.5, min_periods=5, judge_busy_s=2)
    assert _judge_stretch(watch, ZERO, periods=10, throttled=10, seconds=10, tokens_per_s=0) == [None] * 10


def test_a_replaced_server_or_a_check_turned_back_on_starts_a_new_stretch() -> None:
    watch = StarvationWatch(throttled_share=0.5, min_periods=5, judge_busy_s=2)
    _judge_stretch(watch, CpuRead(0, 0, 100, 90, 0), periods=10, throttled=9, seconds=4)
    # The server was replaced, in a group of its own: its counters start again.
    restarted = CpuRead(wall_s=5, busy_s=5, periods=0, throttled=0, tokens=5)
    assert watch.judge(restarted) is None
    assert _judge_stretch(watch, restarted, periods=10, throttled=9, seconds=1) == [None]
    assert _judge_stretch(watch, CpuRead(6, 6, 10, 9, 55), periods=10, throttled=9, seconds=1)[0] is not None
    watch.restart()
    assert watch.judge(CpuRead(20, 20, 500, 450, 500)) is None, (
        "a restarted check judges no stretch at its first read"
    )


def test_a_starved_replica_stays_starved_until_a_judged_read_clears_it() -> None:
    """Serve acts on consecutive failed checks: a starved replica that had no request in the
    last second must not pass one, or the platform keeps routing users to it."""
    watch = StarvationWatch(throttled_share=0.5, min_periods=5, judge_busy_s=2)
    assert watch.standing is None
    verdicts = _judge_stretch(watch, ZERO, periods=10, throttled=9, seconds=3)
    assert verdicts[-1] is not None and watch.standing == verdicts[-1]
    # Busy again and no longer throttled: once its last 2 busy seconds are clean, it is cleared.
    last = CpuRead(3, 3, 30, 27, 150)
    assert _judge_stretch(watch, last, periods=10, throttled=0, seconds=3)[-1] is None
    assert watch.standing is None
    _judge_stretch(watch, CpuRead(6, 6, 60, 27, 300), periods=10, throttled=9, seconds=3)
    assert watch.standing is not None
    watch.restart()
    assert watch.standing is None, "a check turned off and on judges afresh"
