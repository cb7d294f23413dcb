"""`inferchaos observe`: a live table of the key probes per layer, and the timeline on disk."""

from __future__ import annotations

import asyncio
import math
import time
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.table import Table

from inferchaos.experiments.probes import build_probes
from inferchaos.primitives.capabilities import Environment
from inferchaos.steady_state.canary import phase_between_ticks
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


def observe(env: Environment, duration_s: float, interval_s: float, out_dir: Path, console: Console) -> Path:
    """Sample every probe of ``env`` for ``duration_s`` seconds; return the timeline's path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"observe-{time.strftime('%Y%m%d-%H%M%S')}-timeline.csv"
    env.connect_ray()
    writer = TimelineWriter(path)
    timeline = Timeline(writer)

    async def run() -> None:
        probes, canary = build_probes(env)
        with Live(console=console, refresh_per_second=2, transient=False) as live:

            def on_tick(tick: Tick) -> None:
                recent = [r for r in timeline.rows if r.t >= tick.t - 5 * interval_s]
                live.update(_table(recent, tick.index + 1, list(tick.errors)))

            sampler = Sampler(probes, timeline, interval_s, on_tick=on_tick,
                              timeouts={p.name: interval_s for p in probes if p.name == "ray"})  # fmt: skip
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
