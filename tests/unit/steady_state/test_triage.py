"""Triage names the layer at fault from the timeline around a breach (synthetic scenarios).

Each scenario: baseline 0-10 s, fault injected at 10 (``since``), breach at 14.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import pytest

from inferchaos.layers import TRIAGE_ORDER
from inferchaos.steady_state.catalog import KNOWN_PROBES
from inferchaos.steady_state.timeline import Row, Timeline
from inferchaos.steady_state.triage import RULES, Condition, TriageResult, triage

if TYPE_CHECKING:
    from conftest import Synth

N = 31  # samples 0..30 s
GIB = 1024**3


def step(before: float, after: float, at: int, n: int = N) -> list[float]:
    return [before if t < at else after for t in range(n)]


def healthy_ray(synth: Synth) -> list[Row]:
    return [
        *synth.rows("ray.nodes_alive", [3] * N),
        *synth.rows("ray.nodes_dead", [0] * N),
        *synth.rows("ray.pending_pgs", [0] * N),
        *synth.rows("ray.tasks_pending_node_assignment", [0] * N),
        *synth.rows("ray.gpus_available", [0] * N),
        *synth.rows("ray.actors_alive", [2] * N, labels={"class": "ServeReplica"}),
    ]


def calm_vllm(synth: Synth, replica: str = "replica-0") -> list[Row]:
    labels = {"replica": replica}
    return [
        *synth.rows("vllm.kv_cache_usage", [0.1] * N, labels=labels),
        *synth.rows("vllm.num_requests_waiting", [0] * N, labels=labels),
        *synth.rows("vllm.num_preemptions_total", [0] * N, labels=labels),
        *synth.rows("vllm.healthy", [1] * N, labels=labels),
    ]


def without(rows: list[Row], probe: str) -> list[Row]:
    return [r for r in rows if r.probe != probe]


def diagnose(
    synth: Synth,
    timeline: Timeline,
    *,
    lookahead_s: float = 10.0,
    thresholds: Mapping[str, float] | None = None,
) -> TriageResult:
    """Triage a breach at 14 s of a fault injected at 10 s."""
    return triage(
        timeline, synth.t0 + 14, since=synth.t0 + 10, lookahead_s=lookahead_s, thresholds=thresholds
    )


def test_kv_flood_is_vllm(synth: Synth) -> None:
    labels = {"replica": "replica-0"}
    vllm = without(
        without(without(calm_vllm(synth), "vllm.kv_cache_usage"), "vllm.num_requests_waiting"),
        "vllm.num_preemptions_total",
    )
    timeline = synth.timeline(
        healthy_ray(synth),
        vllm,
        synth.rows("vllm.kv_cache_usage", step(0.1, 0.95, 12), labels=labels),
        synth.rows("vllm.num_requests_waiting", step(0, 2, 12), labels=labels),
        synth.rows("vllm.num_preemptions_total", step(0, 3, 13), labels=labels),
    )
    result = diagnose(synth, timeline)
    assert result.layer == "vllm"
    assert result.reason == "vLLM KV cache 95% full (replica=replica-0)"
    assert result.evidence["probe"] == "vllm.kv_cache_usage"
    assert result.evidence["labels"] == labels
    assert result.evidence["value"] == 0.95
    also = result.evidence["also"]
    assert (
        isinstance(also, list) and any("queued" in a for a in also) and any("preempted 3" in a for a in also)
    )


def test_node_loss_is_ray_although_the_replica_stopped_answering_first(synth: Synth) -> None:
    # The replica on the lost node stops answering at 12; the GCS marks the node dead at 16,
    # after the breach: the cause shows up later than its symptom.
    lost = [r for r in calm_vllm(synth, "replica-1") if r.t < synth.t0 + 12]
    timeline = synth.timeline(
        without(healthy_ray(synth), "ray.nodes_dead"),
        synth.rows("ray.nodes_dead", step(0, 1, 16)),
        calm_vllm(synth, "replica-0"),
        lost,
        synth.error_rows("vllm@replica-1", range(12, N), "ProbeError: replica-1: GET failed: ConnectError"),
    )
    result = diagnose(synth, timeline)
    assert result.layer == "ray"
    assert result.reason == "1 more Ray node(s) dead"
    also = result.evidence["also"]
    assert isinstance(also, list) and any(
        a.startswith("vllm: vLLM replica not answering (instance=replica-1)") for a in also
    )


def test_a_second_node_loss_is_ray_although_an_old_dead_node_is_still_listed(synth: Synth) -> None:
    # Ray lists a node lost earlier as DEAD for the cluster's life: a standing 1 must not
    # hide the new death (measured: the second node-loss run of a game day).
    timeline = synth.timeline(
        without(healthy_ray(synth), "ray.nodes_dead"),
        synth.rows("ray.nodes_dead", step(1, 2, 16)),
        calm_vllm(synth, "replica-0"),
        [r for r in calm_vllm(synth, "replica-1") if r.t < synth.t0 + 12],
        synth.error_rows("vllm@replica-1", range(12, N), "ProbeError: replica-1: GET failed: ConnectError"),
    )
    result = diagnose(synth, timeline)
    assert result.layer == "ray", result


def test_a_replica_that_stops_answering_with_nothing_below_is_vllm(synth: Synth) -> None:
    timeline = synth.timeline(
        healthy_ray(synth),
        [r for r in calm_vllm(synth) if r.t < synth.t0 + 12],
        # Labelled as the sampler writes them: the Probe object's own labels.
        synth.error_rows(
            "vllm@replica-0", range(12, N), "ProbeError: ConnectError", {"replica": "replica-0"}
        ),
    )
    result = diagnose(synth, timeline)
    assert result.layer == "vllm"
    assert result.evidence["error"] == "ProbeError: ConnectError"
    assert result.evidence["labels"] == {"instance": "replica-0"}


def test_an_engine_reporting_unhealthy_is_vllm(synth: Synth) -> None:
    timeline = synth.timeline(
        healthy_ray(synth),
        without(calm_vllm(synth), "vllm.healthy"),
        synth.rows("vllm.healthy", step(1, 0, 13), labels={"replica": "replica-0"}),
    )
    result = diagnose(synth, timeline)
    assert (result.layer, result.reason) == ("vllm", "vLLM /health failing (replica=replica-0)")


def test_device_memory_below_the_replica_need_is_device(synth: Synth) -> None:
    timeline = synth.timeline(
        healthy_ray(synth),
        without(calm_vllm(synth), "vllm.healthy"),
        synth.rows("vllm.healthy", step(1, 0, 13), labels={"replica": "replica-0"}),
        synth.rows("device.free_bytes", step(6 * GIB, 0.5 * GIB, 11), labels={"device": "0"}),
    )
    result = diagnose(synth, timeline, thresholds={"device.free_bytes": 2 * GIB})
    assert result.layer == "device"
    assert result.evidence["labels"] == {"device": "0"} and result.evidence["threshold"] == 2 * GIB
    # Without knowing what a replica needs, the sudden drop of free memory still names it.
    unknown_need = diagnose(synth, timeline)
    assert unknown_need.layer == "device" and "lost" in unknown_need.reason


def test_a_small_wobble_of_device_memory_is_not_blamed(synth: Synth) -> None:
    timeline = synth.timeline(
        healthy_ray(synth),
        without(calm_vllm(synth), "vllm.healthy"),
        synth.rows("vllm.healthy", step(1, 0, 13), labels={"replica": "replica-0"}),
        synth.rows("device.free_bytes", step(6 * GIB, 6 * GIB - 100 * 2**20, 11), labels={"device": "0"}),
    )
    assert diagnose(synth, timeline).layer == "vllm"


def test_micro_is_checked_before_meso(synth: Synth) -> None:
    timeline = synth.timeline(
        without(healthy_ray(synth), "ray.pending_pgs"),
        synth.rows("ray.pending_pgs", step(0, 1, 11)),
        without(calm_vllm(synth), "vllm.kv_cache_usage"),
        synth.rows("vllm.kv_cache_usage", step(0.1, 0.99, 12), labels={"replica": "replica-0"}),
    )
    assert diagnose(synth, timeline).layer == "vllm"


def test_pending_placement_group_is_ray(synth: Synth) -> None:
    timeline = synth.timeline(
        without(healthy_ray(synth), "ray.pending_pgs"),
        synth.rows("ray.pending_pgs", step(0, 1, 11)),
        calm_vllm(synth),
    )
    result = diagnose(synth, timeline)
    assert (result.layer, result.reason) == ("ray", "1 Ray placement group(s) PENDING")


def test_growing_actors_are_ray(synth: Synth) -> None:
    timeline = synth.timeline(
        without(healthy_ray(synth), "ray.actors_alive"),
        synth.rows("ray.actors_alive", [2 + t // 2 for t in range(N)], labels={"class": "Leaky"}),
        calm_vllm(synth),
    )
    result = diagnose(synth, timeline)
    assert result.layer == "ray" and result.evidence["labels"] == {"class": "Leaky"}
    assert result.evidence["value"] == pytest.approx(0.5, abs=0.05)


def test_pending_pods_are_k8s_with_their_labels(synth: Synth) -> None:
    timeline = synth.timeline(
        healthy_ray(synth),
        calm_vllm(synth),
        synth.rows("k8s.pods_pending", step(0, 1, 12), labels={"namespace": "inference"}),
        synth.rows("k8s.nodes_ready", [3] * N),
    )
    result = diagnose(synth, timeline)
    assert (result.layer, result.reason) == ("k8s", "1 Pod(s) Pending (namespace=inference)")


def test_a_lost_kubernetes_node_is_k8s(synth: Synth) -> None:
    timeline = synth.timeline(
        healthy_ray(synth), calm_vllm(synth), synth.rows("k8s.nodes_ready", step(3, 2, 12))
    )
    result = diagnose(synth, timeline)
    assert (result.layer, result.reason) == ("k8s", "Ready Kubernetes nodes dropped by 1")


def test_a_standing_condition_is_not_the_cause(synth: Synth) -> None:
    # A node died long before the fault (the GCS keeps listing it): not this breach's cause.
    timeline = synth.timeline(
        without(healthy_ray(synth), "ray.nodes_dead"),
        synth.rows("ray.nodes_dead", [1] * N),
        calm_vllm(synth),
    )
    assert diagnose(synth, timeline).layer == "unknown"


def test_a_condition_that_cleared_and_came_back_is_new(synth: Synth) -> None:
    waiting = [1] * 9 + [0] * 3 + [2] * (N - 12)  # queued at baseline, drained, queued again at 12
    timeline = synth.timeline(
        healthy_ray(synth),
        without(calm_vllm(synth), "vllm.num_requests_waiting"),
        synth.rows("vllm.num_requests_waiting", waiting, labels={"replica": "replica-0"}),
    )
    result = diagnose(synth, timeline)
    assert result.layer == "vllm" and result.evidence["t"] == synth.t0 + 12


def test_causes_far_after_the_breach_are_out_of_the_window(synth: Synth) -> None:
    timeline = synth.timeline(
        without(healthy_ray(synth), "ray.nodes_dead"),
        synth.rows("ray.nodes_dead", step(0, 1, 28)),
        calm_vllm(synth),
    )
    assert diagnose(synth, timeline, lookahead_s=10).layer == "unknown"
    assert diagnose(synth, timeline, lookahead_s=20).layer == "ray"


def test_nothing_matches_is_unknown(synth: Synth) -> None:
    result = diagnose(synth, synth.timeline(healthy_ray(synth), calm_vllm(synth)))
    assert result.layer == "unknown" and result.reason.startswith("no triage rule matched")
    assert result.to_dict()["layer"] == "unknown"


def test_the_rule_table_reads_known_probes_of_triage_layers() -> None:
    for rule in RULES:
        assert rule.layer in TRIAGE_ORDER
        if rule.condition is Condition.UNREACHABLE:
            assert rule.probe == rule.layer.value
        elif rule.probe.startswith("canary."):
            # Users' requests only ever point at a layer as a symptom, through the replica that took them.
            assert rule.symptom and rule.needs_label == "replica" and rule.probe in KNOWN_PROBES
        else:
            assert rule.probe in KNOWN_PROBES and rule.probe.startswith(f"{rule.layer.value}.")
    order = [TRIAGE_ORDER.index(rule.layer) for rule in RULES]
    assert order == sorted(order)  # the table reads in triage order


def test_a_hung_engine_is_vllm_by_the_requests_its_replica_accepted_and_never_finished(synth: Synth) -> None:
    # A stopped EngineCore freezes vLLM's numbers and /health stays 200: only the user requests
    # that replica-0 took and never answered show where the fault is.
    timeline = synth.timeline(
        healthy_ray(synth),
        calm_vllm(synth, "replica-0"),
        calm_vllm(synth, "replica-1"),
        synth.rows("canary.success", [1] * N, labels={"replica": "replica-1"}),
        synth.rows("canary.success", step(1, 0, 13), labels={"replica": "replica-0"}),
    )
    result = diagnose(synth, timeline)
    assert result.layer == "vllm"
    assert "accepted by a vLLM replica failed (replica=replica-0)" in result.reason


def test_requests_refused_before_any_replica_took_them_name_no_layer(synth: Synth) -> None:
    # A refused connection carries no replica: the front door's failure is not the engine's.
    timeline = synth.timeline(
        healthy_ray(synth),
        calm_vllm(synth, "replica-0"),
        synth.rows("canary.success", step(1, 0, 13)),
    )
    assert diagnose(synth, timeline).layer == "unknown"


def test_a_crash_looping_serve_controller_is_ray(synth: Synth) -> None:
    restarting = {"class": "ServeController", "state": "RESTARTING"}
    timeline = synth.timeline(
        healthy_ray(synth),
        calm_vllm(synth),
        synth.rows("ray.actors", step(1, 0, 11), labels={"class": "ServeController", "state": "ALIVE"}),
        [r for r in synth.rows("ray.actors", [1] * N, labels=restarting) if r.t >= synth.t0 + 11],
    )
    result = diagnose(synth, timeline)
    assert result.layer == "ray"
    assert result.reason == "Ray actor(s) restarting (class=ServeController;state=RESTARTING)"


def test_a_replica_missing_one_or_two_reads_does_not_outrank_a_crash_looping_serve_controller(
    synth: Synth,
) -> None:
    # Seen in CI: replica-1's /metrics missed one 0.8 s read while Ray kept restarting Serve's
    # controller, and the vLLM symptom was named ahead of Ray's.
    restarting = {"class": "ServeController", "state": "RESTARTING"}
    timeline = synth.timeline(
        healthy_ray(synth),
        calm_vllm(synth, "replica-0"),
        [r for r in calm_vllm(synth, "replica-1") if r.t not in (synth.t0 + 12, synth.t0 + 15)],
        synth.error_rows(
            "vllm@replica-1", [12, 15], "TimeoutError: no answer within 0.8 s", {"replica": "replica-1"}
        ),
        [r for r in synth.rows("ray.actors", [1] * N, labels=restarting) if r.t >= synth.t0 + 11],
    )
    assert diagnose(synth, timeline).layer == "ray"
    # A third miss is a replica not answering: Ray's restarts are then one symptom of two.
    silent = synth.timeline(
        healthy_ray(synth),
        calm_vllm(synth, "replica-0"),
        synth.error_rows(
            "vllm@replica-1", [12, 13, 14], "TimeoutError: no answer within 0.8 s", {"replica": "replica-1"}
        ),
        [r for r in synth.rows("ray.actors", [1] * N, labels=restarting) if r.t >= synth.t0 + 11],
    )
    assert diagnose(synth, silent).layer == "vllm"


def test_a_replica_slower_than_before_and_than_its_neighbour_is_vllm(synth: Synth) -> None:
    timeline = synth.timeline(
        healthy_ray(synth),
        calm_vllm(synth, "replica-0"),
        calm_vllm(synth, "replica-1"),
        synth.rows("canary.itl_s", step(0.005, 0.065, 11), labels={"replica": "replica-0"}),
        synth.rows("canary.itl_s", [0.005] * N, labels={"replica": "replica-1"}),
    )
    result = diagnose(synth, timeline)
    assert result.layer == "vllm"
    assert result.evidence["labels"] == {"replica": "replica-0"}
    assert (
        "took 13 x as long between tokens as before the fault and as on the other replicas" in result.reason
    )


def test_requests_slow_on_their_route_but_not_between_tokens_are_not_a_slow_replica(synth: Synth) -> None:
    # replica-0's requests took 5 x longer end to end, and a few failed at
    # the 10 s timeout (censored, steady_state/censoring.py); its tokens came as fast as
    # ever. What slowed is the way to it (a link, the front door), not the replica.
    timed_out = {"censored": "1", "replica": "replica-0"}
    timeline = synth.timeline(
        healthy_ray(synth),
        calm_vllm(synth, "replica-0"),
        calm_vllm(synth, "replica-1"),
        synth.rows("canary.e2e_s", step(0.05, 0.25, 11), labels={"replica": "replica-0"}),
        synth.rows("canary.e2e_s", [10.0] * 4, start=11, labels=timed_out),
        synth.rows("canary.e2e_s", [0.05] * N, labels={"replica": "replica-1"}),
        synth.rows("canary.itl_s", [0.005] * N, labels={"replica": "replica-0"}),
        synth.rows("canary.itl_s", [0.005] * N, labels={"replica": "replica-1"}),
    )
    assert diagnose(synth, timeline).layer == "unknown"


def test_every_replica_slowed_by_a_busy_machine_is_not_a_slow_replica(synth: Synth) -> None:
    # A crash-looping controller's restarts slowed both replicas 5 x: no replica is the outlier.
    timeline = synth.timeline(
        healthy_ray(synth),
        calm_vllm(synth, "replica-0"),
        calm_vllm(synth, "replica-1"),
        synth.rows("canary.itl_s", step(0.007, 0.037, 11), labels={"replica": "replica-0"}),
        synth.rows("canary.itl_s", step(0.007, 0.018, 11), labels={"replica": "replica-1"}),
    )
    assert diagnose(synth, timeline).layer == "unknown"


def test_among_symptoms_the_layer_of_the_failed_slo_explains_it_first(synth: Synth) -> None:
    # Seen in CI: Serve's replica count failed while its controller crash-looped, and a
    # restarting replica-0 refused three reads meanwhile. Both are symptoms; Ray's explains
    # the failed Ray SLO.
    restarting = {"class": "ServeController", "state": "RESTARTING"}
    timeline = synth.timeline(
        healthy_ray(synth),
        calm_vllm(synth, "replica-1"),
        synth.error_rows(
            "vllm@replica-0", [12, 13, 14], "ProbeError: ConnectError", {"replica": "replica-0"}
        ),
        [r for r in synth.rows("ray.actors", [1] * N, labels=restarting) if r.t >= synth.t0 + 11],
    )
    breach, since = synth.t0 + 14, synth.t0 + 10
    assert triage(timeline, breach, since=since).layer == "vllm"
    assert triage(timeline, breach, since=since, breached_layers=frozenset({"ray"})).layer == "ray"
    # A cause still outranks every symptom, whatever the failed SLO reads.
    flooded = synth.timeline(
        healthy_ray(synth),
        synth.rows("vllm.kv_cache_usage", step(0.1, 0.95, 12), labels={"replica": "replica-1"}),
        [r for r in synth.rows("ray.actors", [1] * N, labels=restarting) if r.t >= synth.t0 + 11],
    )
    assert triage(flooded, breach, since=since, breached_layers=frozenset({"ray"})).layer == "vllm"


def test_a_slow_replica_with_few_noisy_baseline_requests_is_still_vllm(synth: Synth) -> None:
    # The shape of a CPU-hog run's slow_replica control (read end to end then): the router sent
    # replica-0 four baseline requests, two of them slow. Slowed tenfold, it read 3.7 x its own
    # median but 9 x the replicas' before and its peer's since.
    replica_0 = [
        *synth.rows("canary.itl_s", [0.009, 0.030, 0.025, 0.020], step=2.5, labels={"replica": "replica-0"}),
        *synth.rows("canary.itl_s", [0.084] * 21, start=10, labels={"replica": "replica-0"}),
    ]
    timeline = synth.timeline(
        healthy_ray(synth),
        calm_vllm(synth, "replica-0"),
        calm_vllm(synth, "replica-1"),
        replica_0,
        synth.rows("canary.itl_s", [0.009] * N, labels={"replica": "replica-1"}),
    )
    result = diagnose(synth, timeline)
    assert result.layer == "vllm" and result.evidence["labels"] == {"replica": "replica-0"}, result


def test_a_partition_is_network_although_ray_then_marks_the_node_dead(synth: Synth) -> None:
    # The head's handshakes with worker-1 go unanswered from 12; its replica stops answering
    # and Ray marks the node DEAD at 16, as a long partition reads (network_partition_long).
    link = {"node": "worker-1"}
    timeline = synth.timeline(
        without(healthy_ray(synth), "ray.nodes_dead"),
        synth.rows("ray.nodes_dead", step(0, 1, 16)),
        synth.rows("network.node_reachable", step(1, 0, 12), labels=link),
        synth.rows("network.node_reachable", [1] * N, labels={"node": "worker-2"}),
        calm_vllm(synth, "replica-1"),
        [r for r in calm_vllm(synth, "replica-0") if r.t < synth.t0 + 12],
        synth.error_rows(
            "vllm@replica-0", range(12, N), "ProbeError: TimeoutError", {"replica": "replica-0"}
        ),
    )
    result = diagnose(synth, timeline)
    assert result.layer == "network", result
    assert result.reason.startswith("the head cannot reach worker node node=worker-1")
    # A link slowed past the probe's connect timeout reads the same: the reason says so.
    assert "within 0.5 s: the link is cut or slower than that" in result.reason
    also = result.evidence["also"]
    assert isinstance(also, list) and any(a.startswith("ray: 1 more Ray node(s) dead") for a in also)


def test_a_node_loss_is_not_network_when_its_link_still_answers(synth: Synth) -> None:
    # A killed node's namespace still answers handshakes: node loss stays Ray's.
    timeline = synth.timeline(
        without(healthy_ray(synth), "ray.nodes_dead"),
        synth.rows("ray.nodes_dead", step(0, 1, 13)),
        synth.rows("network.node_reachable", [1] * N, labels={"node": "worker-1"}),
        synth.rows("network.handshake_rtt_s", [0.002] * N, labels={"node": "worker-1"}),
        calm_vllm(synth, "replica-1"),
        [r for r in calm_vllm(synth, "replica-0") if r.t < synth.t0 + 12],
    )
    assert diagnose(synth, timeline).layer == "ray"


def test_a_slowed_link_is_network_by_its_handshake_time(synth: Synth) -> None:
    link = {"node": "worker-1"}
    timeline = synth.timeline(
        healthy_ray(synth),
        calm_vllm(synth),
        synth.rows("network.node_reachable", [1] * N, labels=link),
        synth.rows("network.handshake_rtt_s", step(0.002, 0.21, 12), labels=link),
    )
    result = diagnose(synth, timeline)
    assert result.layer == "network"
    assert (
        result.reason == "TCP handshakes with worker node node=worker-1 took 0.21 s (median since the fault)"
    )


def test_one_slow_handshake_on_a_starved_machine_is_not_a_network_fault(synth: Synth) -> None:
    # A kv_flood control on 2 cores: the head's sampler timed one handshake with an idle link
    # at 0.11 s while replica-0 hung and replica-1's cache filled; the rest took milliseconds.
    link = {"node": "worker-2"}
    rtts = [0.002] * N
    rtts[18] = 0.11
    timeline = synth.timeline(
        healthy_ray(synth),
        calm_vllm(synth, "replica-0"),
        synth.rows("vllm.kv_cache_usage", step(0.1, 0.97, 12), labels={"replica": "replica-1"}),
        synth.rows("network.node_reachable", [1] * N, labels=link),
        synth.rows("network.handshake_rtt_s", rtts, labels=link),
    )
    assert diagnose(synth, timeline).layer == "vllm"
