"""Who noticed, and when: every signal's first notice of a fault, from synthetic timelines.

Timelines are plain data: one tick a second from t0, the fault injected (the run's mark) at
t0 + 10 and landing (the fault's injected_at) 0.1 s later, reverted at t0 + 20, end at t0 + 30.
"""

from __future__ import annotations

from collections.abc import Callable

import yaml

from inferchaos.steady_state.detection import SignalDetection, detect_signals, noticed_line
from inferchaos.steady_state.evaluation import detect
from inferchaos.steady_state.slo import ensure_slos_are_valid
from inferchaos.steady_state.timeline import Row, Timeline

T0 = 1_000.0
INJECTED, LANDED, REVERTED, END = T0 + 10, T0 + 10.1, T0 + 20, T0 + 30
REPLICAS = ("replica-0", "replica-1")

TickRows = Callable[[float], list[Row]]


def healthy_tick(t: float) -> list[Row]:
    """A healthy platform at ``t``: every layer the local environment samples."""
    rows = [Row(t, "canary.success", {"replica": REPLICAS[int(t) % 2]}, 1.0)]
    rows += [Row(t, "vllm.healthy", {"replica": r}, 1.0) for r in REPLICAS]
    rows += [Row(t, "ray.nodes_alive", {}, 3.0), Row(t, "ray.nodes_dead", {}, 0.0)]
    rows += [Row(t, "ray.actors_alive", {"class": "ServeController"}, 1.0)]
    rows += [Row(t, "ray.actors", {"class": "ServeController", "state": "ALIVE"}, 1.0)]
    rows += [
        Row(t, "ray.serve_replicas", {"app": "default", "deployment": "Replica", "state": "RUNNING"}, 2.0)
    ]
    rows += [
        Row(
            t,
            "ray.serve_replica",
            {"app": "default", "deployment": "Replica", "replica": rid, "state": "RUNNING"},
            1.0,
        )
        for rid in ("abc", "def")
    ]
    return rows


def timeline(fault: Callable[[float, list[Row]], list[Row]] | None = None) -> Timeline:
    """30 healthy ticks; from the injection on, ``fault(t, rows)`` rewrites each tick's rows."""
    tl = Timeline()
    tl.mark("baseline_start", T0)
    for second in range(31):
        t = T0 + second
        rows = healthy_tick(t)
        if fault is not None and t >= INJECTED:
            rows = fault(t, rows)
        tl.append_tick(rows)
    for name, at in (("injected", INJECTED), ("reverted", REVERTED), ("end", END)):
        tl.mark(name, at)
    return tl


def by_signal(detections: list[SignalDetection]) -> dict[str, SignalDetection]:
    return {d.signal: d for d in detections}


AVAILABILITY = ensure_slos_are_valid(
    {
        "slos": [
            yaml.safe_load(
                '{name: availability, probe: canary.success, agg: mean, op: ">=", threshold: 0.9, '
                "phase: during, window_s: 2}"
            )
        ]
    }
)


def hung_engine(t: float, rows: list[Row]) -> list[Row]:
    """replica-0's engine frozen: its canary requests time out (no replica named, as a frozen
    replica answers nothing), while its API server keeps answering /health with 200."""
    if t < INJECTED + 1 or t >= REVERTED:
        return rows
    return [Row(t, "canary.success", {}, 0.0) if r.probe == "canary.success" else r for r in rows]


def test_a_hung_engine_is_noticed_by_inferchaos_within_2_s_and_never_by_vllm_health() -> None:
    tl = timeline(hung_engine)
    detections = by_signal(detect_signals(tl, injected_at=LANDED, breach=detect(tl, AVAILABILITY)))

    ours = detections["inferchaos.slo_or_detector"]
    assert ours.noticed_after_s is not None and ours.noticed_after_s <= 2.0
    assert ours.detail == "slo availability"
    first_failed = detections["canary.first_failed_request"]
    assert first_failed.noticed_after_s == 0.9  # the tick at +11 s, from the act's landing at +10.1 s
    assert first_failed.detail == "canary request failed before a replica was named"
    health = detections["vllm.health"]
    assert health.noticed_after_s is None and health.at is None
    assert detections["ray.serve_replicas"].noticed_after_s is None
    assert "vllm /health never" in noticed_line(list(detections.values()))


def test_every_signal_the_environment_has_is_listed_and_k8s_is_left_out_without_a_kube_api() -> None:
    detections = detect_signals(timeline(), injected_at=LANDED)
    assert [(d.layer, d.signal) for d in detections] == [
        ("inferchaos", "inferchaos.slo_or_detector"),
        ("canary", "canary.first_failed_request"),
        ("vllm", "vllm.health"),
        ("vllm", "vllm.unanswered"),
        ("ray", "ray.nodes"),
        ("ray", "ray.actors"),
        ("ray", "ray.serve_replicas"),
    ]
    assert all(d.noticed_after_s is None for d in detections)


def test_nothing_injected_means_no_detection() -> None:
    tl = Timeline()
    tl.append_tick(healthy_tick(T0))
    assert detect_signals(tl) == []


def killed_engine(t: float, rows: list[Row]) -> list[Row]:
    """replica-0's server answers /health 503 for one tick, then nothing at all."""
    if t < INJECTED + 2:
        return rows
    kept = [r for r in rows if r.labels.get("replica") != "replica-0" or r.probe == "canary.success"]
    if t == INJECTED + 2:
        return [*kept, Row(t, "vllm.healthy", {"replica": "replica-0"}, 0.0)]
    return [*kept, Row(t, "vllm@replica-0", {"replica": "replica-0"}, float("nan"), "ProbeError: refused")]


def test_vllm_health_notices_a_non_200_answer() -> None:
    detections = by_signal(detect_signals(timeline(killed_engine), injected_at=LANDED))
    health = detections["vllm.health"]
    assert health.noticed_after_s == 1.9
    assert health.detail == "replica-0 /health did not answer 200"
    # It then stopped answering at all: a row of its own, a second later.
    assert detections["vllm.unanswered"].noticed_after_s == 2.9


def test_a_replica_that_stops_answering_is_noticed_too() -> None:
    def gone(t: float, rows: list[Row]) -> list[Row]:
        kept = [r for r in rows if r.probe != "vllm.healthy" or r.labels["replica"] != "replica-1"]
        return [
            *kept,
            Row(t, "vllm@replica-1", {"replica": "replica-1"}, float("nan"), "TimeoutError: no answer"),
        ]

    detections = by_signal(detect_signals(timeline(gone), injected_at=LANDED))
    unanswered = detections["vllm.unanswered"]
    assert unanswered.at == INJECTED
    assert unanswered.detail.startswith("replica-1 did not answer its probe: TimeoutError")
    # /health itself never said anything but 200: its row says never.
    assert detections["vllm.health"].noticed_after_s is None


def test_a_replica_failing_before_the_fault_is_not_a_notice() -> None:
    tl = Timeline()
    for second in range(31):
        t = T0 + second
        tl.append_tick(
            [
                r
                if r.probe != "vllm.healthy" or r.labels["replica"] != "replica-1"
                else Row(t, "vllm.healthy", {"replica": "replica-1"}, 0.0)
                for r in healthy_tick(t)
            ]
        )
    tl.mark("injected", INJECTED)
    assert by_signal(detect_signals(tl))["vllm.health"].noticed_after_s is None


def test_serve_notices_a_replica_replaced_under_a_new_id() -> None:
    def replaced(t: float, rows: list[Row]) -> list[Row]:
        if t < INJECTED + 3:
            return rows
        kept = [r for r in rows if r.labels.get("replica") != "abc" and r.probe != "ray.serve_replicas"]
        where = {"app": "default", "deployment": "Replica"}
        return [
            *kept,
            Row(t, "ray.serve_replica", {**where, "replica": "xyz", "state": "STARTING"}, 0.0),
            Row(t, "ray.serve_replicas", {**where, "state": "RUNNING"}, 1.0),
            Row(t, "ray.serve_replicas", {**where, "state": "STARTING"}, 1.0),
        ]

    serve = by_signal(detect_signals(timeline(replaced), injected_at=LANDED))["ray.serve_replicas"]
    assert serve.noticed_after_s == 2.9
    assert serve.detail == "Serve replica abc of Replica no longer listed (replaced)"


def test_serve_notices_a_replica_leaving_running_and_not_a_failed_read() -> None:
    def stopping(t: float, rows: list[Row]) -> list[Row]:
        if t < INJECTED + 4:
            # The controller is down: the Serve read fails, which says nothing of the replicas.
            return [r for r in rows if not r.probe.startswith("ray.serve")] + [
                Row(t, "ray@serve", {}, float("nan"), "ProbeError: HTTP 503")
            ]
        return [
            Row(t, r.probe, {**r.labels, "state": "STOPPING"}, 0.0) if r.labels.get("replica") == "def" else r
            for r in rows
        ]

    serve = by_signal(detect_signals(timeline(stopping), injected_at=LANDED))["ray.serve_replicas"]
    assert serve.at == INJECTED + 4
    assert serve.detail == "Serve replica def of Replica STOPPING"


def test_ray_actors_notice_a_restarting_controller_and_ray_nodes_a_dead_node() -> None:
    def controller_and_node(t: float, rows: list[Row]) -> list[Row]:
        if t < INJECTED + 1:
            return rows
        rows = [r for r in rows if not r.probe.startswith("ray.actors")]
        rows.append(Row(t, "ray.actors", {"class": "ServeController", "state": "RESTARTING"}, 1.0))
        if t >= INJECTED + 3:
            rows = [Row(t, "ray.nodes_dead", {}, 1.0) if r.probe == "ray.nodes_dead" else r for r in rows]
        return rows

    detections = by_signal(detect_signals(timeline(controller_and_node), injected_at=LANDED))
    assert detections["ray.actors"].at == INJECTED + 1
    assert detections["ray.actors"].detail == "ALIVE actors of ServeController 1 -> 0"
    assert detections["ray.nodes"].at == INJECTED + 3
    assert detections["ray.nodes"].detail == "ray.nodes_dead 0 -> 1"


def test_k8s_readiness_is_listed_where_there_is_a_kube_api() -> None:
    def with_k8s(t: float, rows: list[Row]) -> list[Row]:
        ready = 1.0 if t >= INJECTED + 5 else 2.0
        return [*rows, Row(t, "k8s.deployment_ready_replicas", {"deployment": "vllm"}, ready)]

    tl = Timeline()
    for second in range(31):
        t = T0 + second
        tl.append_tick(with_k8s(t, healthy_tick(t)))
    tl.mark("injected", INJECTED)
    readiness = by_signal(detect_signals(tl, injected_at=INJECTED))["k8s.readiness"]
    assert readiness.layer == "k8s" and readiness.noticed_after_s == 5.0
    assert readiness.detail == "k8s.deployment_ready_replicas{deployment=vllm} 2 -> 1"


def test_the_cli_line_names_who_noticed_and_says_never() -> None:
    line = noticed_line(
        [
            SignalDetection("inferchaos", "inferchaos.slo_or_detector", 1.23, T0, "slo availability"),
            SignalDetection("ray", "ray.serve_replicas", 6.1, T0, "Serve replica abc of Replica STOPPING"),
            SignalDetection("vllm", "vllm.health", None),
            SignalDetection(
                "canary", "canary.first_failed_request", 0.8, T0, "canary request failed on replica-0"
            ),
        ]
    )
    assert line == (
        "noticed: inferchaos 1.2 s (slo availability) · serve 6.1 s · vllm /health never · first failed request 0.8 s"
    )
