"""`inferchaos observe` shows who noticed a fault live: it follows the ledger another process
writes (a run in another terminal) and computes the detection rows from its own timeline."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from inferchaos.cli.observe import FaultWatch, detection_table
from inferchaos.faults.base import FaultHandle
from inferchaos.faults.ledger import Ledger
from inferchaos.layers import Layer
from inferchaos.steady_state.timeline import Row, Timeline

T0 = 1_000.0


def tick(t: float, healthy: float) -> list[Row]:
    return [
        Row(t, "canary.success", {"replica": "replica-0"}, 1.0),
        Row(t, "vllm.healthy", {"replica": "replica-0"}, healthy),
    ]


def rendered(watch: FaultWatch, timeline: Timeline) -> str:
    handle = watch.update()
    assert handle is not None
    console = Console(width=160, record=True)
    console.print(detection_table(handle, watch.detections(timeline)))
    return console.export_text()


def test_a_fault_another_process_injects_is_followed_until_its_signals_notice(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger")
    watch = FaultWatch(ledger, started=T0)
    timeline = Timeline()
    for second in range(5):
        timeline.append_tick(tick(T0 + second, 1.0))
    assert watch.update() is None  # nothing injected yet: the table alone

    handle = FaultHandle("vllm.kill_engine", Layer.VLLM, {}, "local", created_at=T0 + 5, injected_at=T0 + 5.2)
    ledger.record(handle)  # as the runner's inject does, in its own process
    timeline.append_tick(tick(T0 + 6, 1.0))
    text = rendered(watch, timeline)
    assert "who noticed vllm.kill_engine" in text
    assert "vllm /health" in text and "not yet" in text

    timeline.append_tick(tick(T0 + 7, 0.0))
    ledger.remove(handle.id)  # reverted: the rows stay on screen
    text = rendered(watch, timeline)
    assert "1.8 s" in text and "replica-0 /health did not answer 200" in text


def test_a_fault_live_before_observe_started_is_not_followed(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger")
    ledger.record(FaultHandle("vllm.hang_engine", Layer.VLLM, {}, "local", created_at=T0 - 1, injected_at=T0))
    assert FaultWatch(ledger, started=T0).update() is None
