"""A slow Ray cluster costs the sampler one blocked snapshot at most, never a pile of them."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter

import pytest

from inferchaos.errors import ProbeError
from inferchaos.steady_state.ray import RayProbe, RaySnapshot


class SlowRayProbe(RayProbe):
    """The real probe with its cluster read replaced by one that takes ``delay_s``."""

    def __init__(self, delay_s: float, fail: bool = False) -> None:
        super().__init__("http://127.0.0.1:9", lambda: None)
        self.delay_s = delay_s
        self.fail = fail
        self.started = 0
        self.running = 0
        self.most_running = 0
        self._lock = threading.Lock()

    def snapshot(self) -> RaySnapshot:
        with self._lock:
            self.started += 1
            self.running += 1
            self.most_running = max(self.most_running, self.running)
        time.sleep(self.delay_s)
        with self._lock:
            self.running -= 1
        if self.fail:
            raise ProbeError("Ray at http://127.0.0.1:9 did not answer")
        return RaySnapshot(2, 0, {"GPU": 4.0}, {"GPU": 4.0}, Counter(), Counter(), Counter())


async def test_reads_the_sampler_gave_up_on_are_not_started_again() -> None:
    probe = SlowRayProbe(delay_s=0.6)
    for _ in range(5):  # five ticks whose reads each time out long before the snapshot ends
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(probe.read(), timeout=0.05)
    assert probe.started == 1 and probe.most_running == 1
    samples = await asyncio.wait_for(probe.read(), timeout=2.0)  # the same snapshot, finished
    assert probe.started == 1
    assert {s.probe: s.value for s in samples}["ray.nodes_alive"] == 2
    await asyncio.wait_for(probe.read(), timeout=2.0)
    assert probe.started == 2  # once one has finished, the next read takes a fresh snapshot


async def test_a_failed_snapshot_is_reported_and_the_next_read_tries_again() -> None:
    probe = SlowRayProbe(delay_s=0.0, fail=True)
    with pytest.raises(ProbeError):
        await probe.read()
    probe.fail = False
    samples = await probe.read()
    assert probe.started == 2 and samples
