"""The sampler: concurrent probes, per-probe timeouts, failures recorded, durable ticks."""

from __future__ import annotations

import asyncio
import math
import re
from pathlib import Path

import pytest

from inferchaos.errors import ConfigError, ProbeError
from inferchaos.layers import Layer
from inferchaos.steady_state.probe_base import Sample
from inferchaos.steady_state.sampler import Sampler, Tick
from inferchaos.steady_state.timeline import Timeline, TimelineWriter, read_timeline


class CountingProbe:
    """Answers ``<layer>.reads`` = how many times it has been read."""

    def __init__(self, name: str = "ray", layer: Layer = Layer.RAY) -> None:
        self.name = name
        self.layer = layer
        self.reads = 0

    async def read(self) -> list[Sample]:
        self.reads += 1
        return [Sample(f"{self.layer.value}.reads", self.reads)]


class HangingProbe:
    """Never answers within any sane timeout."""

    name = "k8s"
    layer = Layer.K8S

    async def read(self) -> list[Sample]:
        await asyncio.sleep(3600)
        return []


class FailingProbe:
    """Raises ``error`` on every read."""

    layer = Layer.VLLM

    def __init__(self, name: str, error: Exception) -> None:
        self.name = name
        self.error = error

    async def read(self) -> list[Sample]:
        raise self.error


class RendezvousProbe:
    """Only answers once its partner is being read too: proves reads run concurrently."""

    layer = Layer.DEVICE

    def __init__(self, name: str, barrier: asyncio.Barrier) -> None:
        self.name = name
        self.barrier = barrier

    async def read(self) -> list[Sample]:
        await self.barrier.wait()
        return [Sample("device.available", 1, {"device": self.name})]


def test_interval_below_the_minimum_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"sampler.interval_s: must be at least 0.25 s, got 0.1"):
        Sampler([CountingProbe()], Timeline(), interval_s=0.1)


def test_a_timeout_longer_than_the_interval_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"sampler.timeouts.ray: must be within \(0, interval_s=1\]"):
        Sampler([CountingProbe()], Timeline(), interval_s=1.0, timeouts={"ray": 2.0})
    with pytest.raises(ConfigError, match=r"sampler.timeouts.nope: no such probe"):
        Sampler([CountingProbe()], Timeline(), timeouts={"nope": 0.5})


def test_probe_names_must_be_unique() -> None:
    with pytest.raises(ConfigError, match="duplicate probe names ray"):
        Sampler([CountingProbe(), CountingProbe()], Timeline())


async def test_a_hanging_probe_is_cut_at_its_timeout_and_the_others_still_read() -> None:
    counting = CountingProbe()
    timeline = Timeline()
    sampler = Sampler([counting, HangingProbe()], timeline, interval_s=0.25, probe_timeout_s=0.2)
    loop = asyncio.get_running_loop()
    began = loop.time()
    await sampler.run(max_ticks=3)
    # Without the timeout the first tick alone would take an hour; 30 s is a generous bound.
    assert loop.time() - began < 30
    assert counting.reads == 3
    hung = [r for r in timeline.errors() if r.probe == "k8s"]
    assert len(hung) == 3
    assert all(math.isnan(r.value) and r.error.startswith("TimeoutError") for r in hung)


async def test_a_failing_probe_is_recorded_and_sampling_goes_on() -> None:
    counting = CountingProbe()
    refused = FailingProbe("vllm@replica-0", ProbeError("replica-0: GET /metrics failed: ConnectError"))
    buggy = FailingProbe("vllm@replica-1", KeyError("le"))
    timeline = Timeline()
    await Sampler([refused, buggy, counting], timeline, interval_s=0.25).run(max_ticks=2)
    assert counting.reads == 2
    errors = {(r.probe, r.error) for r in timeline.errors()}
    assert errors == {
        ("vllm@replica-0", "ProbeError: replica-0: GET /metrics failed: ConnectError"),
        ("vllm@replica-1", "KeyError: 'le'"),
    }
    assert len(timeline.errors()) == 4


class LabelledFailingProbe(FailingProbe):
    """A failing probe that, like VllmProbe, declares the labels of all its readings."""

    def __init__(self, name: str, error: Exception, labels: dict[str, str]) -> None:
        super().__init__(name, error)
        self.labels = labels


async def test_an_error_row_carries_the_labels_of_the_probe_that_failed() -> None:
    # Which replica went silent is in the row itself, under the Probe object's name.
    refused = LabelledFailingProbe("vllm@replica-0", ProbeError("refused"), {"replica": "replica-0"})
    unlabelled = FailingProbe("ray", ProbeError("state API timed out"))
    timeline = Timeline()
    await Sampler([refused, unlabelled], timeline, interval_s=0.25).run(max_ticks=1)
    rows = {r.probe: r for r in timeline.errors()}
    assert rows["vllm@replica-0"].labels == {"replica": "replica-0"}
    assert rows["ray"].labels == {}


async def test_a_timed_out_read_carries_the_probe_labels_too(tmp_path: Path) -> None:
    class FrozenReplica(HangingProbe):
        name = "vllm@replica-0"
        layer = Layer.VLLM
        labels = {"replica": "replica-0"}

    path = tmp_path / "timeline.csv"
    with TimelineWriter(path) as writer:
        await Sampler([FrozenReplica()], Timeline(writer), interval_s=0.25, probe_timeout_s=0.1).run(
            max_ticks=1
        )
    (row,) = read_timeline(path).errors()
    assert (row.probe, row.labels) == ("vllm@replica-0", {"replica": "replica-0"})
    assert row.error == "TimeoutError: no answer within 0.1 s"


class GarbageProbe:
    """Returns a reading that is not a number."""

    name = "device"
    layer = Layer.DEVICE

    async def read(self) -> list[Sample]:
        return [Sample("device.free_bytes", "lots")]  # type: ignore[arg-type]


async def test_a_probe_returning_garbage_is_recorded_not_fatal() -> None:
    timeline = Timeline()
    await Sampler([GarbageProbe(), CountingProbe()], timeline, interval_s=0.25).run(max_ticks=1)
    assert [r.probe for r in timeline.rows] == ["device", "ray.reads"]
    assert timeline.errors()[0].error.startswith("ValueError: could not convert string to float")


async def test_probes_are_read_concurrently() -> None:
    barrier = asyncio.Barrier(2)
    timeline = Timeline()
    probes = [RendezvousProbe("0", barrier), RendezvousProbe("1", barrier)]
    await Sampler(probes, timeline, interval_s=5.0, probe_timeout_s=5.0).run(max_ticks=1)
    # Read one after the other, the first would wait at the barrier until its timeout.
    assert timeline.errors() == []
    assert sorted(r.labels["device"] for r in timeline.rows) == ["0", "1"]


async def test_rows_of_one_tick_share_its_time_and_ticks_are_ordered() -> None:
    clock_values = iter([100.0, 101.0, 102.0])
    timeline = Timeline()
    probes = [CountingProbe("ray", Layer.RAY), CountingProbe("k8s", Layer.K8S)]
    await Sampler(probes, timeline, interval_s=0.25, clock=lambda: next(clock_values)).run(max_ticks=3)
    assert [(r.t, r.probe, r.value) for r in timeline.rows] == [
        (100.0, "ray.reads", 1.0),
        (100.0, "k8s.reads", 1.0),
        (101.0, "ray.reads", 2.0),
        (101.0, "k8s.reads", 2.0),
        (102.0, "ray.reads", 3.0),
        (102.0, "k8s.reads", 3.0),
    ]


async def test_timeline_csv_holds_every_tick_while_the_sampler_runs(tmp_path: Path) -> None:
    path = tmp_path / "timeline.csv"
    third_tick = asyncio.Event()

    def on_tick(tick: Tick) -> None:
        if tick.index == 2:
            third_tick.set()

    with TimelineWriter(path) as writer:
        timeline = Timeline(writer)
        refused = FailingProbe("vllm@replica-0", ProbeError("refused"))
        sampler = Sampler([CountingProbe(), refused], timeline, interval_s=0.25, on_tick=on_tick)
        running = asyncio.create_task(sampler.run())
        await asyncio.wait_for(third_tick.wait(), timeout=60)
        on_disk = read_timeline(path)  # read while the sampler is still running
        assert not running.done()
        sampler.stop()
        await asyncio.wait_for(running, timeout=60)
    reads = [r.value for r in on_disk.rows if r.probe == "ray.reads"]
    assert reads[:3] == [1.0, 2.0, 3.0]
    assert len([r for r in on_disk.errors() if r.probe == "vllm@replica-0"]) >= 3


async def test_an_async_callback_can_stop_the_sampler() -> None:
    seen: list[int] = []
    sampler: Sampler

    async def on_tick(tick: Tick) -> None:
        seen.append(tick.index)
        if tick.index == 1:
            sampler.stop()

    sampler = Sampler([CountingProbe()], Timeline(), interval_s=0.25, on_tick=on_tick)
    taken = await asyncio.wait_for(sampler.run(), timeout=60)
    assert taken == 2 and seen == [0, 1]


async def test_a_callback_error_ends_the_run_and_propagates() -> None:
    def on_tick(tick: Tick) -> None:
        raise ProbeError("stop condition could not be evaluated")

    with pytest.raises(ProbeError, match="stop condition"):
        await Sampler([CountingProbe()], Timeline(), interval_s=0.25, on_tick=on_tick).run(max_ticks=5)


async def test_an_overrun_tick_skips_missed_slots_instead_of_bursting(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def slow_first_tick(tick: Tick) -> None:
        if tick.index == 0:
            await asyncio.sleep(0.8)  # more than two whole intervals

    sampler = Sampler([CountingProbe()], Timeline(), interval_s=0.25, on_tick=slow_first_tick)
    with caplog.at_level("INFO", logger="inferchaos.steady_state.sampler"):
        await asyncio.wait_for(sampler.run(max_ticks=2), timeout=60)
    skipped = [m for r in caplog.records if (m := re.search(r"overran; skipping (\d+) tick", r.getMessage()))]
    assert skipped and int(skipped[0].group(1)) >= 2
