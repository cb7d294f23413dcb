"""The platform steady state (steady_state/platform.py) on synthetic timelines.

The story (seconds after t0): baseline 0-10, the fault injected at 10 and reverted at 30, the
run's last sample at 70. Two replicas answer canary requests in turn, two a second; the
scenario's own recovery SLO reads a placement group count that is back at 0 right after the
revert. Each test then breaks one part of the platform that the scenario did not touch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

from inferchaos.errors import ConfigError
from inferchaos.steady_state.evaluation import counts_toward, evaluate
from inferchaos.steady_state.platform import (
    NO_DETECTOR_FIRING,
    PlatformAllowance,
    PlatformFailure,
    PlatformSteadyState,
    detector_evolution,
    ensure_platform_is_valid,
    failure_beside,
    fault_symptoms,
    healed_replicas,
    judged_again,
    platform_failure,
    platform_failures,
    platform_slos,
    stop_condition_failure,
    triage_failure,
    with_platform,
)
from inferchaos.steady_state.slo import Op, Phase, RecoverySpec, Slo, SloSpec
from inferchaos.steady_state.timeline import Row, Timeline
from inferchaos.steady_state.triage import TriageResult

if TYPE_CHECKING:
    from conftest import Synth

MARKS = {"baseline_start": 0, "injected": 10, "reverted": 30, "end": 70}
END = 70
TIMEOUT_S = 10.0

# The scenario's own fault and its signal: a placement group PENDING while the fault acts.
OWN = SloSpec(
    slos=(
        Slo("no_pending_after", "ray.pending_pgs", "max", Op.LE, 0, Phase.RECOVERY, window_s=3),
        Slo("availability", "canary.success", "mean", Op.GE, 0.9, Phase.DURING),
    ),
    recovery=RecoverySpec(within_s=30, hold_s=3, steady=("no_pending_after",)),
)

# (time, replica) -> (success, ttft): the canary's requests; None: the request never finished.
Outcome = Callable[[float, str], float | None]


def healthy(t: float, replica: str) -> float | None:
    return 1.0


def canary_rows(synth: Synth, outcome: Outcome, hang_s: float = TIMEOUT_S) -> list[Row]:
    """Two requests a second, to replica-0 then replica-1. A request ``outcome`` says hangs
    (None) fails ``hang_s`` later, named after its replica (the front door answered headers)."""
    rows = []
    oldest: dict[float, float] = {}
    for k in range(2 * END):
        sent = k / 2
        replica = f"replica-{k % 2}"
        result = outcome(sent, replica)
        if result is None:
            done = sent + hang_s
            for tick in range(int(sent) + 1, min(END, int(done)) + 1):
                oldest[tick] = max(oldest.get(tick, 0.0), tick - sent)
            if done <= END:
                rows.append(Row(synth.t0 + done, "canary.success", {"replica": replica}, 0.0))
            continue
        rows.append(Row(synth.t0 + sent + 0.1, "canary.success", {"replica": replica}, result))
        if result:
            rows.append(Row(synth.t0 + sent + 0.1, "canary.ttft_s", {"replica": replica}, 0.1))
    rows += [Row(synth.t0 + t, "canary.oldest_wait_s", {}, oldest.get(t, 0.05)) for t in range(END + 1)]
    return rows


def platform_rows(synth: Synth, *, healthy_0: list[float] | None = None) -> list[Row]:
    n = END + 1
    return [
        *synth.rows("vllm.healthy", healthy_0 or [1.0] * n, labels={"replica": "replica-0"}),
        *synth.rows("vllm.healthy", [1.0] * n, labels={"replica": "replica-1"}),
        *synth.rows("ray.nodes_alive", [3.0] * n),
        *synth.rows("ray.serve_replicas", [2.0] * n, labels={"state": "RUNNING"}),
        *synth.rows("ray.pending_pgs", [1.0 if 10 <= t < 31 else 0.0 for t in range(n)]),
    ]


def unanswered_reads(synth: Synth, replica: str, seconds: range) -> list[Row]:
    """``replica``'s server reads at ``seconds``, each timed out."""
    return synth.error_rows(
        f"vllm@{replica}", seconds, "TimeoutError: no answer within 0.8 s", labels={"replica": replica}
    )


def run(synth: Synth, outcome: Outcome = healthy, **kwargs: list[float]) -> Timeline:
    return synth.timeline(canary_rows(synth, outcome), platform_rows(synth, **kwargs), **MARKS)


def judge(timeline: Timeline, allows: frozenset[str] = frozenset()) -> tuple[SloSpec, object]:
    state = PlatformSteadyState(TIMEOUT_S, PlatformAllowance(allows))
    spec = with_platform(OWN, timeline, state)
    evolution, _ = detector_evolution(timeline)
    return spec, evaluate(
        timeline, spec, extra={NO_DETECTOR_FIRING: evolution}, judged_again=judged_again(spec)
    )


def failed(evaluation: object) -> set[str]:
    return {r.name for r in evaluation.slos if not r.ok}  # type: ignore[attr-defined]


def test_a_healthy_platform_holds_every_part_and_recovers(synth: Synth) -> None:
    timeline = run(synth)
    spec, evaluation = judge(timeline)
    assert failed(evaluation) == set()
    assert evaluation.recovery.recovered  # type: ignore[attr-defined]
    names = {slo.name for slo in spec.slos}
    # Every replica the baseline saw, Ray's nodes, Serve's replicas and the front door.
    for part in (
        "replica-0.serves_after",
        "replica-1.answers_during",
        "nodes_after",
        "serve_replicas_after",
        "front_door_after",
        "no_stuck_request_before",
    ):
        assert f"platform.{part}" in names


def test_recovery_holds_at_least_one_request_timeout(synth: Synth) -> None:
    spec, evaluation = judge(run(synth))
    assert spec.recovery is not None and spec.recovery.hold_s == TIMEOUT_S
    # The scenario's own steady SLOs are kept, the platform's added.
    assert spec.recovery.steady[0] == "no_pending_after"
    assert "platform.replica-1.serves_after" in spec.recovery.steady


def test_a_replica_frozen_for_good_at_the_revert_fails_recovery_and_is_named(synth: Synth) -> None:
    """The fault's own signal is back 1 s after the revert; replica-0 hangs from the revert on."""
    timeline = run(synth, lambda t, r: None if r == "replica-0" and t >= 30 else 1.0)
    own_only = evaluate(timeline, OWN)
    assert own_only.recovery is not None and own_only.recovery.recovered, "today's verdict: recovered"
    spec, evaluation = judge(timeline)
    recovery = evaluation.recovery  # type: ignore[attr-defined]
    assert not recovery.recovered
    assert "platform.replica-0.serves_after" in recovery.failing_at_end
    failure = platform_failure(
        timeline,
        spec,
        evaluation.slos,
        PlatformSteadyState(TIMEOUT_S),  # type: ignore[attr-defined]
        recovery.failing_at_end,
    )
    assert failure is not None and failure.replica == "replica-0" and failure.phase == "recovery"
    assert triage_failure(timeline, failure, {}).layer == "vllm"


def test_a_replica_frozen_whole_at_the_revert_is_named_not_its_peer(synth: Synth) -> None:
    """replica-1's whole process group is frozen from the revert on: its server answers no read,
    and its requests fail before the front door can say whose they were. Those failures count
    against replica-0's serves_after too, but the failure named is replica-1's."""
    frozen = 30
    canary = [
        Row(row.t, row.probe, {}, row.value)
        if row.probe == "canary.success" and row.value == 0 and row.labels.get("replica") == "replica-1"
        else row
        for row in canary_rows(synth, lambda t, r: None if r == "replica-1" and t >= frozen else 1.0)
    ]
    platform = [
        r
        for r in platform_rows(synth)
        if not (r.probe == "vllm.healthy" and r.labels["replica"] == "replica-1")
    ]
    reads = [
        Row(synth.t0 + t, "vllm.healthy", {"replica": "replica-1"}, 1.0)
        if t < frozen
        else Row(synth.t0 + t, "vllm.healthy", {"replica": "replica-1"}, float("nan"), "TimeoutError")
        for t in range(END + 1)
    ]
    timeline = synth.timeline(canary, platform, reads, **MARKS)
    spec, evaluation = judge(timeline)
    assert {"platform.replica-0.serves_after", "platform.replica-1.serves_after"} <= failed(evaluation)
    failure = platform_failure(
        timeline,
        spec,
        evaluation.slos,  # type: ignore[attr-defined]
        PlatformSteadyState(TIMEOUT_S),
        evaluation.recovery.failing_at_end,  # type: ignore[attr-defined]
    )
    assert failure is not None and (failure.replica, failure.phase) == ("replica-1", "recovery")


def test_a_request_stuck_in_the_hold_fails_it_before_it_times_out(synth: Synth) -> None:
    """A request sent into a hung replica waits in the hold: the stall detector fires there."""
    timeline = run(synth, lambda t, r: None if r == "replica-0" and 31.0 <= t < 31.5 else 1.0)
    _, evaluation = judge(timeline)
    recovery = evaluation.recovery  # type: ignore[attr-defined]
    # It recovers, but only once the stuck request has ended: not from the revert on.
    assert recovery.recovered and recovery.time_to_recover_s > 10
    _, firing = detector_evolution(timeline)
    assert firing and firing[0].detector == "stalled_request"


def test_a_replica_the_fault_did_not_target_frozen_during_the_fault_is_named(synth: Synth) -> None:
    timeline = run(synth, lambda t, r: None if r == "replica-1" and 12 <= t < 30 else 1.0)
    spec, evaluation = judge(timeline, allows=frozenset({"replica-0"}))
    assert "platform.replica-1.serves_during" in failed(evaluation)
    failure = platform_failure(
        timeline,
        spec,
        evaluation.slos,
        PlatformSteadyState(TIMEOUT_S, PlatformAllowance(frozenset({"replica-0"}))),
        (),
    )  # type: ignore[attr-defined]
    assert failure is not None and (failure.replica, failure.phase) == ("replica-1", "during")
    assert triage_failure(timeline, failure, {}).layer == "vllm"


def test_the_replica_a_scenario_allows_out_may_stop_serving_while_the_fault_acts(synth: Synth) -> None:
    timeline = run(synth, lambda t, r: 0.0 if r == "replica-1" and 10 <= t < 29 else 1.0)
    _, allowed = judge(timeline, allows=frozenset({"replica-1"}))
    assert not any(n.startswith("platform.replica-1") for n in failed(allowed))
    _, strict = judge(timeline)
    assert "platform.replica-1.serves_during" in failed(strict)


def test_a_replica_down_at_baseline_fails_the_baseline(synth: Synth) -> None:
    timeline = run(synth, healthy_0=[float("nan")] * 6 + [1.0] * (END - 5))
    spec, evaluation = judge(timeline)
    assert "platform.replica-0.answers_before" in failed(evaluation)
    failure = platform_failure(timeline, spec, evaluation.slos, PlatformSteadyState(TIMEOUT_S), ())  # type: ignore[attr-defined]
    assert failure is not None and (failure.replica, failure.phase) == ("replica-0", "baseline")


def test_a_platform_that_broke_again_after_its_hold_has_not_recovered(synth: Synth) -> None:
    timeline = run(synth, lambda t, r: 0.0 if r == "replica-0" and t >= 60 else 1.0)
    _, evaluation = judge(timeline)
    recovery = evaluation.recovery  # type: ignore[attr-defined]
    assert not recovery.recovered
    assert "failed again" in recovery.reason


def test_platform_slos_follow_the_parts_the_baseline_saw(synth: Synth) -> None:
    """No canary, no Ray: only the replicas' own servers are judged; no baseline, nothing."""
    timeline = synth.timeline(platform_rows(synth)[: 2 * (END + 1)], **MARKS)
    names = {slo.name for slo in platform_slos(timeline, PlatformSteadyState(TIMEOUT_S))}
    assert names and all(".answers_" in n for n in names)
    assert platform_slos(Timeline(), PlatformSteadyState(TIMEOUT_S)) == ()


def test_attributed_only_leaves_out_failures_no_replica_answered() -> None:
    slo = Slo("s", "canary.success", "mean", Op.GE, 0.9, Phase.DURING, {"replica": "replica-0"})
    unattributed = Row(0.0, "canary.success", {}, 0.0)
    assert counts_toward(unattributed, slo)
    assert not counts_toward(unattributed, Slo(**{**slo.__dict__, "attributed_only": True}))


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("x", "platform: must be a mapping"),
        ({"allow": {}}, "platform.allow: unknown key"),
        ({"allows": {"replicas": "replica-0"}}, "platform.allows.replicas: must be a list"),
        ({"allows": {"nodes": 1}}, "platform.allows.nodes: unknown key"),
    ],
)
def test_bad_platform_keys_are_refused_in_one_line(value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ensure_platform_is_valid(value)
    assert ensure_platform_is_valid({"allows": {"replicas": ["replica-1"]}}).replicas == {"replica-1"}


def test_a_platform_that_healed_too_late_names_what_kept_recovery_from_holding(synth: Synth) -> None:
    """replica-0 hangs from the revert until +22 s; its last stuck request fails at +31.5 s."""
    timeline = run(synth, lambda t, r: None if r == "replica-0" and 30 <= t < 52 else 1.0)
    spec, evaluation = judge(timeline)
    recovery = evaluation.recovery  # type: ignore[attr-defined]
    assert not recovery.recovered
    assert "platform.replica-0.serves_after" in recovery.blocked_by
    # What held throughout, or came back in time, did not keep it.
    assert "platform.nodes_after" not in recovery.blocked_by and "no_pending_after" not in recovery.blocked_by
    assert recovery.reason.startswith(", ".join(recovery.blocked_by))
    failure = platform_failure(
        timeline,
        spec,
        evaluation.slos,
        PlatformSteadyState(TIMEOUT_S),  # type: ignore[attr-defined]
        recovery.blocked_by,
    )
    assert failure is not None and (failure.replica, failure.phase) == ("replica-0", "recovery")


def test_a_survivor_that_hangs_beside_a_lost_node_is_the_engines_failure(synth: Synth) -> None:
    """The scenario loses replica-1's node (Ray marks it dead at +12 s, as a slow heartbeat
    timeout does, after replica-0's first stuck request failed); replica-0, which it did not
    touch, hangs from the injection on. Its triage must not be the node the fault took,
    even where the scenario's own triage named the hang (the first thing users saw)."""
    n = END + 1
    nodes = [
        *synth.rows("ray.nodes_alive", [3.0 if t < 22 else 2.0 for t in range(n)]),
        *synth.rows("ray.nodes_dead", [0.0 if t < 22 else 1.0 for t in range(n)]),
    ]
    rows = [r for r in platform_rows(synth) if r.probe != "ray.nodes_alive"] + nodes
    timeline = synth.timeline(
        canary_rows(synth, lambda t, r: None if r == "replica-0" and t >= 10 else 1.0), rows, **MARKS
    )
    spec, evaluation = judge(timeline, allows=frozenset({"replica-1"}))
    failure = platform_failure(
        timeline,
        spec,
        evaluation.slos,  # type: ignore[attr-defined]
        PlatformSteadyState(TIMEOUT_S, PlatformAllowance(frozenset({"replica-1"}))),
        (),
    )
    assert failure is not None and failure.replica == "replica-0"
    injected, reverted = synth.t0 + MARKS["injected"], synth.t0 + MARKS["reverted"]
    scenario_triage = TriageResult(
        "vllm",
        "replica-0 stalled",
        {"probe": "canary.success", "condition": "below", "labels": {"replica": "replica-0"}},
    )
    # ray.kill_node: its evidence saw Ray mark the node it killed DEAD.
    symptoms = fault_symptoms(timeline, "ray", injected, reverted + 5, {}, scenario_triage, lost_a_node=True)
    assert symptoms and all(s.probe.startswith("ray.nodes") for s in symptoms)
    assert triage_failure(timeline, failure, {}, symptoms).layer == "vllm"
    # Without knowing which readings the fault explains, the lost node answers for the hang.
    assert triage_failure(timeline, failure, {}).layer == "ray"


def test_a_stop_condition_beyond_what_the_fault_allows_is_the_survivors_failure(synth: Synth) -> None:
    """The front door went down 5 s after replica-1's node was lost (its stop condition ended
    the fault window at +15 s) because replica-0, which the fault did not touch, hung. Its
    requests end at their timeout, after that window: none of its own SLOs of the window
    failed. The failure is still replica-0's, and its triage is not the node the fault took."""
    n = END + 1
    marks = {**MARKS, "reverted": 15}
    nodes = [
        *synth.rows("ray.nodes_alive", [2.0 if 12 <= t < 25 else 3.0 for t in range(n)]),
        *synth.rows("ray.nodes_dead", [0.0 if t < 12 else 1.0 for t in range(n)]),
    ]
    rows = [r for r in platform_rows(synth) if r.probe != "ray.nodes_alive"] + nodes
    timeline = synth.timeline(canary_rows(synth, lambda t, r: None if 12 <= t < 20 else 1.0), rows, **marks)
    allowed = PlatformSteadyState(TIMEOUT_S, PlatformAllowance(frozenset({"replica-1"})))
    spec, evaluation = judge(timeline, allows=frozenset({"replica-1"}))
    assert platform_failure(timeline, spec, evaluation.slos, allowed, ()) is None  # type: ignore[attr-defined]
    reason = "stop condition front_door_down: mean(canary.success) = 0, needs >= 0.5"
    failure = stop_condition_failure(timeline, "front_door_down", reason, allowed)
    assert failure is not None and (failure.replica, failure.phase) == ("replica-0", "during")
    symptoms = fault_symptoms(timeline, "ray", synth.t0 + 10, synth.t0 + 20, {}, None, lost_a_node=True)
    assert triage_failure(timeline, failure, {}, symptoms).layer == "vllm"
    # A fault that may take every replica out, or none, explains a front door that went down.
    everyone = PlatformSteadyState(TIMEOUT_S, PlatformAllowance(frozenset({"replica-0", "replica-1"})))
    assert stop_condition_failure(timeline, "front_door_down", reason, everyone) is None
    assert stop_condition_failure(timeline, "front_door_down", reason, PlatformSteadyState(TIMEOUT_S)) is None


def test_a_node_lost_beside_a_ray_fault_that_loses_none_is_rays_failure(synth: Synth) -> None:
    """The scenario's fault is Ray's and loses no node (its placement group PENDING from +10 s);
    replica-1's node is lost beside it at +11 s, the first of Ray's readings to move. The
    fault's own symptom is its PENDING group, not that node: replica-1's failure is Ray's."""
    n = END + 1
    nodes = [
        *synth.rows("ray.nodes_alive", [3.0 if t < 13 else 2.0 for t in range(n)]),
        *synth.rows("ray.nodes_dead", [0.0 if t < 13 else 1.0 for t in range(n)]),
    ]
    rows = [r for r in platform_rows(synth) if r.probe != "ray.nodes_alive"] + nodes
    rows += unanswered_reads(synth, "replica-1", range(11, END + 1))
    timeline = synth.timeline(
        canary_rows(synth, lambda t, r: None if r == "replica-1" and t >= 11 else 1.0), rows, **MARKS
    )
    spec, evaluation = judge(timeline)
    slos = evaluation.slos  # type: ignore[attr-defined]
    failure = platform_failure(timeline, spec, slos, PlatformSteadyState(TIMEOUT_S), ())
    assert failure is not None and failure.replica == "replica-1"
    injected, reverted = synth.t0 + MARKS["injected"], synth.t0 + MARKS["reverted"]
    symptoms = fault_symptoms(timeline, "ray", injected, reverted + 5, {}, None)
    assert [s.probe for s in symptoms] == ["ray.pending_pgs"], symptoms
    found = triage_failure(timeline, failure, {}, symptoms)
    assert found.layer == "ray" and found.evidence["probe"] in ("ray.nodes_dead", "ray.nodes_alive"), found


def test_a_run_stops_waiting_once_no_hold_in_the_window_can_still_confirm_recovery(synth: Synth) -> None:
    """replica-0 frozen for good from the revert: settled as failed once the window has closed
    (the runner stops there); the same platform half-way through the window is not settled."""

    def frozen(t: float, r: str) -> float | None:
        return None if r == "replica-0" and t >= 30 else 1.0

    _, evaluation = judge(run(synth, frozen))
    recovery = evaluation.recovery  # type: ignore[attr-defined]
    assert not recovery.recovered and recovery.settled
    until = synth.t0 + 45  # 15 s into a 30 s window
    early = synth.timeline(
        [r for r in canary_rows(synth, frozen) + platform_rows(synth) if r.t <= until], **{**MARKS, "end": 45}
    )
    _, evaluation = judge(early)
    assert not evaluation.recovery.settled  # type: ignore[attr-defined]
    # A platform that froze and came back late is settled too, once its window closed.
    _, evaluation = judge(run(synth, lambda t, r: None if r == "replica-0" and 30 <= t < 52 else 1.0))
    assert evaluation.recovery.settled  # type: ignore[attr-defined]


def test_a_request_stuck_at_baseline_is_traced_to_the_replica_that_held_it(synth: Synth) -> None:
    """replica-1's engine hangs from the start while its server answers: only the stuck request,
    which times out naming replica-1, shows it. The failure names replica-1, not the platform."""
    # Nothing was injected after a failed baseline: no placement group ever PENDING.
    rows = [r for r in platform_rows(synth) if r.probe != "ray.pending_pgs"]
    timeline = synth.timeline(
        canary_rows(synth, lambda t, r: None if r == "replica-1" else 1.0), rows, **MARKS
    )
    spec, evaluation = judge(timeline)
    failure = platform_failure(timeline, spec, evaluation.slos, PlatformSteadyState(TIMEOUT_S), ())  # type: ignore[attr-defined]
    assert failure is not None and (failure.slo, failure.replica) == (
        "platform.no_stuck_request_before",
        None,
    )
    result = triage_failure(timeline, failure, {})
    assert result.layer == "vllm"
    assert failure.traced_to(result).replica == "replica-1"
    # A failure that already names its replica keeps it.
    named = PlatformFailure("platform.replica-0.serves_after", "recovery", "replica-0", failure.at, "")
    assert named.traced_to(result).replica == "replica-0"


def test_a_plain_chaos_run_reads_the_same_platform_failures_off_its_timeline(synth: Synth) -> None:
    """What `chaos run`'s sampler reports (inferchaos/ctk/live.py): nothing on a healthy
    platform; a replica frozen for good at the revert after the method; one hung from the
    start before it."""
    state = PlatformSteadyState(TIMEOUT_S)
    after = (Phase.DURING, Phase.RECOVERY)
    assert platform_failures(run(synth), OWN, state, (Phase.BASELINE, *after)) == ()
    frozen = run(synth, lambda t, r: None if r == "replica-0" and t >= 30 else 1.0)
    failures = platform_failures(frozen, OWN, state, after)
    assert any(f.startswith("platform.replica-0.serves_after: ") for f in failures), failures
    assert any(f.startswith("recovery: ") for f in failures), failures
    assert platform_failures(frozen, OWN, state, (Phase.BASELINE,)) == ()
    hung = run(synth, lambda t, r: None if r == "replica-1" else 1.0)
    assert any(
        f.startswith("platform.no_stuck_request_before: ")
        for f in platform_failures(hung, OWN, state, (Phase.BASELINE,))
    )


def test_a_replica_the_platform_healed_within_the_window_passes_and_is_named(synth: Synth) -> None:
    """replica-0 freezes at the revert and the platform replaces it 4 s later: its stuck
    requests fail until +14 s, then every part holds. Recovery is confirmed after them, the
    SLOs it held on are judged over that hold, and the run names the replica it healed."""
    timeline = run(synth, lambda t, r: None if r == "replica-0" and 30 <= t < 34 else 1.0)
    spec, evaluation = judge(timeline)
    recovery = evaluation.recovery  # type: ignore[attr-defined]
    assert recovery.recovered and recovery.time_to_recover_s > 10
    assert failed(evaluation) == set()
    assert healed_replicas(timeline, PlatformSteadyState(TIMEOUT_S), recovery.steady_at) == {
        "replica-0": pytest.approx(synth.t0 + 40, abs=0.5)
    }


def test_one_read_missed_as_the_fault_starts_is_not_a_replica_that_stopped_answering(synth: Synth) -> None:
    """A replica's server misses the read right at the injection (a flood's first prompts keep
    it busy): the first window holds that read alone. Only full windows judge it; one whose
    server answers nothing for the whole fault still fails."""
    n = END + 1
    missed = [float("nan") if t == 10 else 1.0 for t in range(n)]
    _, evaluation = judge(run(synth, healthy_0=missed))
    assert "platform.replica-0.answers_during" not in failed(evaluation)
    frozen = [float("nan") if 10 <= t < 30 else 1.0 for t in range(n)]
    _, evaluation = judge(run(synth, healthy_0=frozen))
    assert "platform.replica-0.answers_during" in failed(evaluation)


def test_reads_a_busy_replica_misses_now_and_then_are_not_a_failure_it_was_healed_of(synth: Synth) -> None:
    """replica-1 misses four reads during the fault, never two in a row: it never stopped
    answering, so a passing run names no replica as healed."""
    n = END + 1
    sparse = [float("nan") if t in (12, 15, 18, 21) else 1.0 for t in range(n)]
    rows = [
        r
        for r in platform_rows(synth)
        if not (r.probe == "vllm.healthy" and r.labels == {"replica": "replica-1"})
    ]
    rows += synth.rows("vllm.healthy", sparse, labels={"replica": "replica-1"})
    timeline = synth.timeline(canary_rows(synth, healthy), rows, **MARKS)
    assert healed_replicas(timeline, PlatformSteadyState(TIMEOUT_S), synth.t0 + 40) == {}
    # Three in a row and more: it stopped answering.
    gone = [float("nan") if 12 <= t < 16 else 1.0 for t in range(n)]
    rows = [r for r in rows if not (r.probe == "vllm.healthy" and r.labels == {"replica": "replica-1"})]
    rows += synth.rows("vllm.healthy", gone, labels={"replica": "replica-1"})
    timeline = synth.timeline(canary_rows(synth, healthy), rows, **MARKS)
    assert set(healed_replicas(timeline, PlatformSteadyState(TIMEOUT_S), synth.t0 + 40)) == {"replica-1"}


def test_a_replica_allowed_unread_is_still_judged_by_its_users_requests(synth: Synth) -> None:
    """A slowed link: replica-0's server cannot be read while the fault acts. Declared unread, it
    is judged on the requests it serves alone; a typo in the declaration is refused in one line."""
    unread = [float("nan") if 10 <= t < 30 else 1.0 for t in range(END + 1)]
    timeline = run(synth, healthy_0=unread)
    state = PlatformSteadyState(TIMEOUT_S, ensure_platform_is_valid({"allows": {"unread": ["replica-0"]}}))
    spec = with_platform(OWN, timeline, state)
    names = {slo.name for slo in spec.slos}
    assert "platform.replica-0.answers_during" not in names and "platform.replica-0.serves_during" in names
    assert "platform.replica-1.answers_during" in names
    # Nor is a server left unread a replica that stopped answering, healed or beside the fault.
    unanswered = unanswered_reads(synth, "replica-0", range(10, 30))
    timeline = synth.timeline(
        canary_rows(synth, healthy), platform_rows(synth, healthy_0=unread), unanswered, **MARKS
    )
    assert healed_replicas(timeline, state, synth.t0 + 40) == {}
    assert set(healed_replicas(timeline, PlatformSteadyState(TIMEOUT_S), synth.t0 + 40)) == {"replica-0"}
    with pytest.raises(ConfigError, match=r"^platform\.allows\.unread: must be a list of replica names"):
        ensure_platform_is_valid({"allows": {"unread": "replica-0"}})


def test_a_link_slowed_since_before_the_fault_answers_for_a_replica_that_fails_after_it(synth: Synth) -> None:
    """slow_link's control: the fault slows node-a's link from +10 to +30; node-b's link, under
    replica-1, was slowed at +8 and stays slow to the end. replica-1 stops answering its 0.8 s
    reads only in recovery. The slow link under it has stood since before the fault, so it is
    the cause, not a standing condition to leave out, and not replica-1's own engine."""
    n = END + 1
    links = [
        *synth.rows(
            "network.handshake_rtt_s",
            [0.5 if 10 <= t < 30 else 0.0005 for t in range(n)],
            labels={"node": "node-a"},
        ),
        *synth.rows(
            "network.handshake_rtt_s",
            [0.5 if t >= 8 else 0.0005 for t in range(n)],
            labels={"node": "node-b"},
        ),
    ]
    unanswered = unanswered_reads(synth, "replica-1", range(31, 50))
    timeline = synth.timeline(canary_rows(synth, healthy), platform_rows(synth), links, unanswered, **MARKS)
    symptoms = fault_symptoms(timeline, "network", synth.t0 + 10, synth.t0 + 35, {}, None)
    assert symptoms and all(s.labels == {"node": "node-a"} for s in symptoms)
    failure = PlatformFailure(
        "platform.replica-1.answers_after", "recovery", "replica-1", synth.t0 + 31, "no answer"
    )
    result = triage_failure(timeline, failure, {}, symptoms)
    assert (result.layer, result.evidence["labels"]) == ("network", {"node": "node-b"}), result


def test_a_node_the_fault_lost_itself_does_not_answer_for_a_replica_that_froze_beside_it(
    synth: Synth,
) -> None:
    """A partition cuts node-a, under replica-0, from +10; Ray marks node-a DEAD at +20, as the
    partition outlives its node-death budget. replica-1, which the scenario does not allow out,
    freezes at +12. The partition's evidence saw its own node die: the lost node is the fault's
    symptom and the frozen replica is its engine's failure, not Ray's."""
    n = END + 1
    rows = [r for r in platform_rows(synth) if r.probe != "ray.nodes_alive"]
    rows += [
        *synth.rows("ray.nodes_alive", [2.0 if 20 <= t < 50 else 3.0 for t in range(n)]),
        *synth.rows("ray.nodes_dead", [1.0 if t >= 20 else 0.0 for t in range(n)]),
        *synth.rows(
            "network.node_reachable",
            [0.0 if 10 <= t < 30 else 1.0 for t in range(n)],
            labels={"node": "node-a"},
        ),
    ]
    unanswered = unanswered_reads(synth, "replica-1", range(12, 40))
    rows = [
        r
        for r in rows
        if not (r.probe == "vllm.healthy" and r.labels == {"replica": "replica-1"} and r.t >= synth.t0 + 12)
    ]
    timeline = synth.timeline(
        canary_rows(synth, lambda t, r: None if r == "replica-1" and t >= 12 else 1.0),
        rows,
        unanswered,
        **MARKS,
    )
    failure = PlatformFailure(
        "platform.replica-1.answers_during", "during", "replica-1", synth.t0 + 12, "no answer"
    )
    lost = fault_symptoms(timeline, "network", synth.t0 + 10, synth.t0 + 35, {}, None, lost_a_node=True)
    assert triage_failure(timeline, failure, {}, lost).layer == "vllm"
    # A partition that lost no node of its own leaves a node Ray marked DEAD to answer for it.
    kept = fault_symptoms(timeline, "network", synth.t0 + 10, synth.t0 + 35, {}, None)
    assert triage_failure(timeline, failure, {}, kept).layer == "ray"
    # Nor does one node lost explain a second: replica-1's node dies too, at +14.
    second = [r for r in timeline.rows if r.probe != "ray.nodes_dead"]
    second += synth.rows("ray.nodes_dead", [0.0 if t < 14 else 1.0 if t < 20 else 2.0 for t in range(n)])
    both = synth.timeline(second, **MARKS)
    assert triage_failure(both, failure, {}, lost).layer == "ray"


def test_a_node_lost_while_the_fault_acted_answers_for_its_replica_failing_in_recovery(synth: Synth) -> None:
    """A device fault, which loses no node; replica-0's node dies at +12, while it acts. The
    first failed SLO of replica-0 is a recovery one (first sign at +31, long after the node
    went): the node lost since the injection answers for it, not replica-0's engine."""
    n = END + 1
    rows = [r for r in platform_rows(synth) if r.probe not in ("ray.nodes_alive", "vllm.healthy")]
    rows += [
        *synth.rows("ray.nodes_alive", [2.0 if t >= 12 else 3.0 for t in range(n)]),
        *synth.rows("ray.nodes_dead", [1.0 if t >= 12 else 0.0 for t in range(n)]),
        *synth.rows("vllm.healthy", [1.0] * n, labels={"replica": "replica-1"}),
        *synth.rows(
            "vllm.healthy", [1.0 if t < 12 else 0.0 for t in range(n)], labels={"replica": "replica-0"}
        ),
    ]
    timeline = synth.timeline(
        canary_rows(synth, lambda t, r: None if r == "replica-0" and t >= 12 else 1.0), rows, **MARKS
    )
    failure = PlatformFailure(
        "platform.replica-0.serves_after", "recovery", "replica-0", synth.t0 + 31, "min = 0"
    )
    symptoms = fault_symptoms(timeline, "device", synth.t0 + 10, synth.t0 + 35, {}, None)
    assert triage_failure(timeline, failure, {}, symptoms).layer == "ray"


def test_a_replica_replaced_before_any_window_judged_it_is_the_failure_beside_the_fault(synth: Synth) -> None:
    """replica-0, which the scenario does not allow out, stops answering at +25 and is replaced
    by +30: every platform SLO holds, as a window tolerates that much. It is still the failure
    beside the fault, named with its phase and traced to its engine; replica-1, which the
    scenario allows out, never is, and a healthy run has none."""
    gone = range(25, 30)
    rows = [
        r
        for r in platform_rows(synth)
        if not (r.probe == "vllm.healthy" and r.labels == {"replica": "replica-0"} and r.t - synth.t0 in gone)
    ]
    unanswered = unanswered_reads(synth, "replica-0", gone)
    timeline = synth.timeline(canary_rows(synth, healthy), rows, unanswered, **MARKS)
    allows = frozenset({"replica-1"})
    state = PlatformSteadyState(TIMEOUT_S, PlatformAllowance(allows))
    spec, evaluation = judge(timeline, allows)
    assert not any(name.startswith("platform.") for name in failed(evaluation))
    assert platform_failure(timeline, spec, evaluation.slos, state, ()) is None  # type: ignore[attr-defined]
    failure = failure_beside(timeline, state, synth.t0 + END)
    assert failure is not None
    assert (failure.replica, failure.phase, failure.at) == ("replica-0", "during", synth.t0 + 25)
    assert triage_failure(timeline, failure, {}).layer == "vllm"
    replica_0_allowed = PlatformSteadyState(TIMEOUT_S, PlatformAllowance(frozenset({"replica-0"})))
    assert failure_beside(timeline, replica_0_allowed, synth.t0 + END) is None
    assert failure_beside(run(synth), state, synth.t0 + END) is None


def k8s_rows(synth: Synth, *, nodes: Callable[[int], float], vllm_ready: Callable[[int], float]) -> list[Row]:
    """A kube API read once a second: Ready nodes, each Deployment's ready replicas (vllm's and
    a router's that never changes) and no Pod Pending."""
    ticks = range(END + 1)
    return [
        *synth.rows("k8s.nodes_ready", [nodes(t) for t in ticks]),
        *synth.rows(
            "k8s.deployment_ready_replicas", [vllm_ready(t) for t in ticks], labels={"deployment": "vllm"}
        ),
        *synth.rows("k8s.deployment_ready_replicas", [1.0] * len(ticks), labels={"deployment": "router"}),
        *synth.rows("k8s.pods_pending", [0.0] * len(ticks), labels={"namespace": "inferchaos"}),
    ]


def on_k8s(synth: Synth, *, nodes: Callable[[int], float], vllm_ready: Callable[[int], float]) -> Timeline:
    return synth.timeline(
        canary_rows(synth, healthy),
        platform_rows(synth),
        k8s_rows(synth, nodes=nodes, vllm_ready=vllm_ready),
        **MARKS,
    )


def test_on_kubernetes_the_nodes_and_every_deployment_seen_at_baseline_must_be_back(synth: Synth) -> None:
    """A node lost and a replica not Ready while the fault acts, both back right after the revert."""
    timeline = on_k8s(
        synth,
        nodes=lambda t: 3.0 if 10 <= t < 31 else 4.0,
        vllm_ready=lambda t: 2.0 if 10 <= t < 31 else 3.0,
    )
    spec, evaluation = judge(timeline)
    names = {slo.name for slo in spec.slos}
    assert {"platform.k8s_nodes_after", "platform.vllm.ready_after", "platform.router.ready_after"} <= names
    assert spec.recovery is not None and "platform.vllm.ready_after" in spec.recovery.steady
    assert failed(evaluation) == set()
    assert evaluation.recovery.recovered  # type: ignore[attr-defined]
    # Each Deployment is held to its own baseline, not to another's.
    by_name = {r.name: r for r in evaluation.slos}  # type: ignore[attr-defined]
    assert by_name["platform.vllm.ready_after"].baseline == 3.0
    assert by_name["platform.router.ready_after"].baseline == 1.0
    assert by_name["platform.k8s_nodes_after"].baseline == 4.0


def test_a_node_lost_for_good_as_the_platform_recovers_fails_recovery(synth: Synth) -> None:
    """A node with no replica on it is lost at the revert: nothing goes Pending, serving goes on,
    and the scenario's own SLOs recover; the platform has one node fewer than at baseline."""
    timeline = on_k8s(synth, nodes=lambda t: 3.0 if t >= 30 else 4.0, vllm_ready=lambda t: 3.0)
    _, evaluation = judge(timeline)
    assert failed(evaluation) == {"platform.k8s_nodes_after"}
    recovery = evaluation.recovery  # type: ignore[attr-defined]
    assert not recovery.recovered and "platform.k8s_nodes_after" in recovery.failing_at_end


def test_a_deployment_with_fewer_ready_replicas_after_the_fault_fails_recovery(synth: Synth) -> None:
    """One vllm replica never Ready again (not Pending: its Pod runs and fails its readiness)."""
    timeline = on_k8s(synth, nodes=lambda t: 4.0, vllm_ready=lambda t: 2.0 if t >= 10 else 3.0)
    _, evaluation = judge(timeline)
    assert failed(evaluation) == {"platform.vllm.ready_after"}
    recovery = evaluation.recovery  # type: ignore[attr-defined]
    assert not recovery.recovered and recovery.failing_at_end == ("platform.vllm.ready_after",)


def test_without_a_kube_api_no_kubernetes_part_is_judged(synth: Synth) -> None:
    spec, _ = judge(run(synth))
    names = {slo.name for slo in spec.slos}
    assert not any(n == "platform.k8s_nodes_after" or n.endswith(".ready_after") for n in names)
    assert "platform.pods_pending_after" not in names
