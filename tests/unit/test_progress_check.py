"""The progress-aware health check fails a hung replica and a replica several times slower than
its own warm-up, and neither a busy nor a flooded one."""

from __future__ import annotations

from inferchaos.environments.local.progress_check import ProgressWatch, SpeedWatch


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
    assert watch.busy_total(12.5) == 2.5  # still one in flight
    watch.finished(13.0)
    assert watch.busy_total(20.0) == 3.0  # idle from 13 s on
    watch.started(30.0)
    assert watch.busy_total(31.0) == 4.0


def test_a_replica_far_slower_than_its_warm_up_is_slow_until_a_stretch_says_otherwise() -> None:
    speed = SpeedWatch(reference_tokens_per_s=300.0, slow_factor=5, judge_after_busy_s=2)
    assert speed.judge(peer_rate=250.0, busy_s=0.0, tokens=1000) is None  # the first read starts the stretch
    assert speed.judge(peer_rate=250.0, busy_s=1.0, tokens=1030) is None  # too little busy time to judge
    reason = speed.judge(peer_rate=250.0, busy_s=2.5, tokens=1075)  # 30 tokens per busy second, below 60
    assert reason is not None and "30 tokens per busy second" in reason and "warm-up's 300" in reason
    assert "1/3 of a peer's 250" in reason
    # The judgement stands while the next stretch fills, so Serve sees failed checks in a row.
    assert speed.judge(peer_rate=250.0, busy_s=3.0, tokens=1090) == reason
    assert speed.judge(peer_rate=250.0, busy_s=5.0, tokens=1700) is None  # 312 per busy second: fast again


def test_a_flooded_replica_queues_but_keeps_up_and_an_unmeasured_one_is_never_slow() -> None:
    # Long prompts' prefill and batched decoding count in full: thousands of tokens per busy second.
    speed = SpeedWatch(reference_tokens_per_s=300.0, slow_factor=5, judge_after_busy_s=2)
    speed.judge(peer_rate=250.0, busy_s=0.0, tokens=0)
    assert speed.judge(peer_rate=250.0, busy_s=10.0, tokens=18_000) is None
    # No warm-up speed (the warm-up failed): nothing to hold the replica to.
    assert SpeedWatch().judge(busy_s=100.0, tokens=1, peer_rate=300.0) is None


def test_a_restarted_server_whose_counters_went_back_starts_a_new_stretch() -> None:
    speed = SpeedWatch(reference_tokens_per_s=300.0, slow_factor=5, judge_after_busy_s=2)
    speed.judge(peer_rate=250.0, busy_s=0.0, tokens=5000)
    assert speed.judge(peer_rate=250.0, busy_s=3.0, tokens=10) is None  # not -1663 tokens per second
    assert speed.judge(peer_rate=250.0, busy_s=6.0, tokens=1000) is None


def test_a_restart_forgets_what_the_replica_did_while_nobody_judged_it() -> None:
    # A blind (plain) check was in force while the replica ran slow; once the progress check is
    # back, that stretch must not condemn the replica, which is fast again.
    speed = SpeedWatch(reference_tokens_per_s=300.0, slow_factor=5, judge_after_busy_s=2)
    speed.judge(peer_rate=250.0, busy_s=0.0, tokens=0)
    speed.restart()
    assert (
        speed.judge(peer_rate=250.0, busy_s=30.0, tokens=300) is None
    )  # 10 per busy second, but a new stretch
    assert speed.judge(peer_rate=250.0, busy_s=32.0, tokens=900) is None


def test_no_replica_is_slow_when_every_replica_slowed_or_no_peer_says_how_fast_is_fast() -> None:
    # The machine is busy (a replacement loading its model): the peer is as slow. No outlier.
    speed = SpeedWatch(reference_tokens_per_s=300.0, slow_factor=5, judge_after_busy_s=2)
    speed.judge(busy_s=0.0, tokens=0, peer_rate=40.0)
    assert speed.judge(busy_s=2.0, tokens=60, peer_rate=40.0) is None  # 30/s, peer 40/s
    assert speed.judge(busy_s=4.0, tokens=120, peer_rate=None) is None  # no peer lately
    assert speed.judge(busy_s=6.0, tokens=180, peer_rate=200.0) is not None  # the peer is fast


def test_the_speed_published_for_peers_covers_the_stretch_under_way_once_it_is_long_enough() -> None:
    speed = SpeedWatch(reference_tokens_per_s=300.0, slow_factor=5, judge_after_busy_s=2)
    speed.judge(busy_s=0.0, tokens=0, peer_rate=None)
    assert speed.rate_now(busy_s=0.1, tokens=25) is None  # too short, and nothing judged yet
    assert speed.rate_now(busy_s=1.0, tokens=250) == 250.0
    speed.judge(busy_s=2.0, tokens=400, peer_rate=None)
    assert speed.rate_now(busy_s=2.1, tokens=410) == 200.0  # the stretch judged last


def test_a_replica_that_produced_nothing_is_left_to_the_stall_check() -> None:
    speed = SpeedWatch(reference_tokens_per_s=300.0, slow_factor=5, judge_after_busy_s=2)
    speed.judge(busy_s=0.0, tokens=500, peer_rate=250.0)
    assert speed.judge(busy_s=2.5, tokens=500, peer_rate=250.0) is None  # hung, not slow
