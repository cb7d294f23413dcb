"""`inferchaos observe`: a live table of the key probes per layer, and the timeline on disk.

While a fault is live (in the ledger of this state folder, injected by `inferchaos run` or a
game day in another terminal), it also shows who noticed it and when, tick by tick: the same
rows as the verdict's ``detection`` (steady_state/detection.py), computed from this process's
own timeline. observe has no experiment, so inferchaos' own row is its detectors alone.

The command is ``observe_cmd``; :func:`observe` does the sampling and the drawing.
"""

from __future__ import annotations

import asyncio
import math
import time
from pathlib import Path

import click
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from inferchaos.cli.console import console
from inferchaos.cli.environment import open_env
from inferchaos.cli.options import INTERVAL_OPTION, OUT_OPTION, env_option
from inferchaos.errors import ConfigError
from inferchaos.faults.base import FaultHandle
from inferchaos.faults.ledger import Ledger
from inferchaos.layers import EnvName
from inferchaos.primitives.capabilities import Environment
from inferchaos.run.probe_set import build_probes
from inferchaos.run.runner import check_environment
from inferchaos.steady_state.canary import phase_between_ticks
from inferchaos.steady_state.detection import SignalDetection, detect_signals, signal_title
from inferchaos.steady_state.sampler import Sampler, Tick
from inferchaos.steady_state.timeline import Row, Timeline, TimelineWriter

# (layer, probe, how to show it): the numbers a person watches on a game day.
KEY_PROBES: tuple[tuple[str, str, str], ...] = (
    ("canary", "canary.success", "{:.0%}"),
    ("canary", "canary.ttft_s", "{:.3f} s"),
    ("canary", "canary.e2e_s", "{:.3f} s"),
    ("vllm", "vllm.healthy", "{:g}"),
    ("vllm", "vllm.kv_cache_usage", "{:.2f}"),
    ("vllm", "vllm.num_requests_running", "{:g}"),
    ("vllm", "vllm.num_requests_waiting", "{:g}"),
    ("vllm", "vllm.preemption_rate", "{:.2f}/s"),
    ("ray", "ray.nodes_alive", "{:g}"),
    ("ray", "ray.nodes_dead", "{:g}"),
    ("ray", "ray.gpus_available", "{:g}"),
    ("ray", "ray.actors_alive", "{:g}"),
    ("ray", "ray.pending_pgs", "{:g}"),
    ("ray", "ray.tasks_pending_node_assignment", "{:g}"),
    ("device", "device.free_bytes", "{:.3g} B"),
)


def _table(rows: list[Row], ticks: int, errors: list[Row]) -> Table:
    table = Table(title=f"inferchaos observe — tick {ticks}")
    for column in ("layer", "probe", "labels", "value"):
        table.add_column(column)
    latest: dict[tuple[str, str], Row] = {}
    for row in rows:
        latest[(row.probe, row.label_text())] = row
    for layer, probe, fmt in KEY_PROBES:
        for (name, labels), row in sorted(latest.items()):
            if name == probe and not math.isnan(row.value):
                table.add_row(layer, probe, labels, fmt.format(row.value))
    for row in errors:
        table.add_row(row.layer, row.probe, "", f"[red]error: {row.error[:80]}[/]")
    return table


def detection_table(handle: FaultHandle, detections: list[SignalDetection]) -> Table:
    table = Table(title=f"who noticed {handle.fault} [{handle.id}], and when")
    for column in ("layer", "signal", "noticed after", "what it saw"):
        table.add_column(column)
    for d in detections:
        after = "[dim]not yet[/]" if d.noticed_after_s is None else f"{d.noticed_after_s:.1f} s"
        table.add_row(d.layer, signal_title(d.signal), after, d.detail)
    return table


class FaultWatch:
    """The newest fault the ledger shows live since observe started, kept once it is reverted."""

    def __init__(self, ledger: Ledger, started: float) -> None:
        self._ledger = ledger
        self._started = started
        self.handle: FaultHandle | None = None

    def update(self) -> FaultHandle | None:
        """Read the ledger; the fault being watched (a newer live one replaces it)."""
        live = [h for h in self._ledger.entries() if h.created_at >= self._started]
        if live:
            newest = max(live, key=lambda h: h.created_at)
            if (
                self.handle is None
                or newest.id != self.handle.id
                or newest.injected_at != self.handle.injected_at
            ):
                self.handle = newest
        return self.handle

    def detections(self, timeline: Timeline) -> list[SignalDetection]:
        """Who noticed the watched fault so far: noticing may begin once its entry was written."""
        if self.handle is None:
            return []
        return detect_signals(timeline, since=self.handle.created_at, injected_at=self.handle.injected_at)


def observe(env: Environment, duration_s: float, interval_s: float, out_dir: Path, console: Console) -> Path:
    """Sample every probe of ``env`` for ``duration_s`` seconds; return the timeline's path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"observe-{time.strftime('%Y%m%d-%H%M%S')}-timeline.csv"
    env.connect_ray()
    writer = TimelineWriter(path)
    timeline = Timeline(writer)
    watch = FaultWatch(Ledger(), time.time())

    async def run() -> None:
        probes, canary = build_probes(env)
        with Live(console=console, refresh_per_second=2, transient=False) as live:

            def on_tick(tick: Tick) -> None:
                recent = [r for r in timeline.rows if r.t >= tick.t - 5 * interval_s]
                table = _table(recent, tick.index + 1, list(tick.errors))
                handle = watch.update()
                live.update(
                    table
                    if handle is None
                    else Group(table, detection_table(handle, watch.detections(timeline)))
                )

            sampler = Sampler(
                probes,
                timeline,
                interval_s,
                on_tick=on_tick,
                timeouts={p.name: interval_s for p in probes if p.name == "ray"},
            )
            await canary.start(phase_between_ticks(canary.config.rate_per_s, interval_s))
            task = asyncio.create_task(sampler.run())
            try:
                await asyncio.sleep(duration_s)
            finally:
                sampler.stop()
                await asyncio.gather(task, return_exceptions=True)
                await canary.stop()

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        pass  # what was sampled is on disk: the writer flushes every tick
    finally:
        writer.close()
    return path


@click.command("observe")
@env_option(EnvName.LOCAL)
@click.option(
    "--duration", type=float, default=60.0, show_default=True, help="How long to watch, in seconds."
)
@INTERVAL_OPTION
@OUT_OPTION
def observe_cmd(env_name: str, duration: float, interval: float, out_dir: Path) -> None:
    """Show a live table of the key probes per layer and write the timeline; injects nothing."""
    if duration <= 0:
        raise ConfigError(f"--duration must be positive, got {duration}")
    environment = open_env(env_name)
    check_environment(environment)
    path = observe(environment, duration, interval, out_dir, console)
    console.print(f"timeline: {path}", highlight=False)
