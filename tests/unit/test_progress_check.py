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


def _judge_stretch(watch: StarvationWatch, start: CpuRead, cores: float, seconds: int, idle_cores: float = 1.5,
                   tokens_per_s: float = 50.0, busy_fraction: float = 1.0) -> list[str | None]:  # fmt: skip
    """One read per second from ``start``: the replica gets ``cores``, the machine leaves ``idle_cores`` idle."""
    read, verdicts = start, []
    for _ in range(seconds):
        read = CpuRead(wall_s=read.wall_s + 1, busy_s=read.busy_s + busy_fraction, cpu_s=read.cpu_s + cores,
                       machine_idle_s=read.machine_idle_s + idle_cores, tokens=read.tokens + tokens_per_s)  # fmt: skip
        verdicts.append(watch.judge(read))
    return verdicts


ZERO = CpuRead(0, 0, 0, 0, 0)


def test_a_replica_getting_a_tenth_of_a_core_beside_idle_cpu_is_starved_once_a_stretch_is_judged() -> None:
    watch = StarvationWatch(starved_cores=0.3, idle_cores=0.5, judge_busy_s=3)
    assert _judge_stretch(watch, ZERO, cores=1.4, seconds=5) == [None] * 5
    verdicts = _judge_stretch(watch, CpuRead(5, 5, 7.0, 7.5, 250), cores=0.12, seconds=6)
    # The stretch judged is its last 3 busy seconds: starved once most of them are slow.
    assert verdicts[:2] == [None, None]
    assert all(v is not None and "0.12 CPU cores per busy second" in v and "1.50 cores idle" in v
               for v in verdicts[3:])  # fmt: skip
    assert watch.take_lowest() == pytest.approx(0.12)
    assert watch.take_lowest() is None, "taken: the next log line covers what is judged after it"


def test_a_busy_machine_starves_no_replica_however_little_cpu_each_gets() -> None:
    watch = StarvationWatch(starved_cores=0.3, idle_cores=0.5, judge_busy_s=3)
    # Two replicas, the flood and a CPU hog on 2 cores: nothing idle, every replica gets little.
    assert _judge_stretch(watch, ZERO, cores=0.2, seconds=30, idle_cores=0.1) == [None] * 30


def test_cpu_per_busy_second_ignores_the_idle_time_between_sparse_requests() -> None:
    watch = StarvationWatch(starved_cores=0.3, idle_cores=0.5, judge_busy_s=3)
    # A canary request every second keeps the replica busy a tenth of the time, at 1.2 cores then.
    assert _judge_stretch(watch, ZERO, cores=0.12, seconds=60, busy_fraction=0.1) == [None] * 60


def test_cpu_without_any_token_is_a_hang_for_the_stall_check_not_starvation() -> None:
    watch = StarvationWatch(starved_cores=0.3, idle_cores=0.5, judge_busy_s=3)
    assert _judge_stretch(watch, ZERO, cores=0.0, seconds=10, tokens_per_s=0) == [None] * 10


def test_a_replaced_server_or_a_check_turned_back_on_starts_a_new_stretch() -> None:
    watch = StarvationWatch(starved_cores=0.3, idle_cores=0.5, judge_busy_s=3)
    _judge_stretch(watch, ZERO, cores=0.1, seconds=4)
    # The server was replaced: its CPU seconds and token counters start again.
    restarted = CpuRead(wall_s=5, busy_s=5, cpu_s=0.05, machine_idle_s=7.5, tokens=5)
    assert watch.judge(restarted) is None
    assert _judge_stretch(watch, restarted, cores=0.1, seconds=2) == [None, None]
    assert _judge_stretch(watch, CpuRead(7, 7, 0.25, 10.5, 105), cores=0.1, seconds=1)[0] is not None
    watch.restart()
    assert watch.judge(CpuRead(20, 20, 2.0, 30, 500)) is None, (
        "a restarted check judges no stretch at its first read"
    )
