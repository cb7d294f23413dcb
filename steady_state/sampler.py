"""The sampler: polls every probe once per tick, concurrently, into the timeline.

Ticks are scheduled drift-free (tick k starts at ``start + k * interval``), and every probe
read has its own timeout, so one slow layer costs at most its timeout and never stretches
the tick or hides the other layers. A failed or timed-out read is a row with the error text
and a NaN value, named after the Probe object (``vllm@replica-0``) and carrying its labels
(``replica=replica-0``): during a chaos run a probe that cannot read its layer is itself
evidence.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from inferchaos.errors import ConfigError, ProbeError
from inferchaos.steady_state.probe_base import Probe
from inferchaos.steady_state.timeline import Row, Timeline

logger = logging.getLogger(__name__)

MIN_INTERVAL_S = 0.25


@dataclass(frozen=True)
class Tick:
    """What one tick recorded."""

    index: int
    t: float
    rows: tuple[Row, ...]
    duration_s: float

    @property
    def errors(self) -> tuple[Row, ...]:
        """Rows of the probes whose read failed this tick."""
        return tuple(r for r in self.rows if r.error)


TickCallback = Callable[[Tick], Awaitable[None] | None]


class Sampler:
    """Polls ``probes`` every ``interval_s`` seconds into ``timeline``.

    ``probe_timeout_s`` (default 80 % of the interval) bounds each read; ``timeouts``
    overrides it per probe name. ``on_tick`` runs after each tick is on disk (stop
    conditions, progress); an exception it raises ends :meth:`run` and propagates.
    """

    def __init__(
        self,
        probes: Sequence[Probe],
        timeline: Timeline,
        interval_s: float = 1.0,
        *,
        probe_timeout_s: float | None = None,
        timeouts: Mapping[str, float] | None = None,
        on_tick: TickCallback | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not (math.isfinite(interval_s) and interval_s >= MIN_INTERVAL_S):
            raise ConfigError(f"sampler.interval_s: must be at least {MIN_INTERVAL_S} s, got {interval_s!r}")
        names = [p.name for p in probes]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ConfigError(f"sampler.probes: duplicate probe names {', '.join(duplicates)}")
        default_timeout = 0.8 * interval_s if probe_timeout_s is None else probe_timeout_s
        self._timeouts: dict[str, float] = {name: default_timeout for name in names}
        for name, timeout in (timeouts or {}).items():
            if name not in self._timeouts:
                raise ConfigError(f"sampler.timeouts.{name}: no such probe; probes: {', '.join(names)}")
            self._timeouts[name] = timeout
        for name, timeout in self._timeouts.items():
            # A timeout longer than the interval would let one probe stretch the tick.
            if not 0 < timeout <= interval_s:
                raise ConfigError(
                    f"sampler.timeouts.{name}: must be within (0, interval_s={interval_s:g}], got {timeout!r}"
                )
        self.probes = tuple(probes)
        self.timeline = timeline
        self.interval_s = interval_s
        self._on_tick = on_tick
        self._clock = clock
        self._stop = asyncio.Event()
        self.ticks = 0

    def timeout_for(self, probe: Probe) -> float:
        """Seconds ``probe`` is given per read."""
        return self._timeouts[probe.name]

    def stop(self) -> None:
        """Ask :meth:`run` to return after the tick in progress."""
        self._stop.set()

    async def run(self, max_ticks: int | None = None) -> int:
        """Sample until :meth:`stop` (or ``max_ticks`` ticks); returns the number of ticks taken."""
        self._stop.clear()
        loop = asyncio.get_running_loop()
        start = loop.time()
        slot = 0
        taken = 0
        while not self._stop.is_set() and (max_ticks is None or taken < max_ticks):
            await self.tick()
            taken += 1
            if self._stop.is_set() or (max_ticks is not None and taken >= max_ticks):
                break
            now = loop.time()
            next_slot = max(slot + 1, math.floor((now - start) / self.interval_s) + 1)
            if next_slot > slot + 1:
                logger.info(
                    "sampler: tick %d overran; skipping %d tick(s)", self.ticks - 1, next_slot - slot - 1
                )
            slot = next_slot
            try:
                await asyncio.wait_for(self._stop.wait(), timeout=start + slot * self.interval_s - now)
            except TimeoutError:
                pass  # the normal case: nobody asked to stop before the next tick was due
        return taken

    async def tick(self) -> Tick:
        """Read every probe once, concurrently, and record the rows (on disk before returning)."""
        loop = asyncio.get_running_loop()
        began = loop.time()
        t = self._clock()
        per_probe = await asyncio.gather(*(self._read(probe, t) for probe in self.probes))
        rows = tuple(row for rows in per_probe for row in rows)
        self.timeline.append_tick(rows)
        tick = Tick(self.ticks, t, rows, loop.time() - began)
        self.ticks += 1
        if self._on_tick is not None:
            result = self._on_tick(tick)
            if inspect.isawaitable(result):
                await result
        return tick

    async def _read(self, probe: Probe, t: float) -> list[Row]:
        timeout = self.timeout_for(probe)
        try:
            samples = await asyncio.wait_for(probe.read(), timeout=timeout)
            return [Row.from_sample(t, sample) for sample in samples]
        except TimeoutError:
            logger.info("sampler: probe %s did not answer within %g s", probe.name, timeout)
            error = f"TimeoutError: no answer within {timeout:g} s"
        except ProbeError as e:
            logger.info("sampler: probe %s failed: %s", probe.name, e)
            error = f"{type(e).__name__}: {e}"
        except Exception as e:  # a buggy probe must not end the run; the traceback is logged
            logger.exception("sampler: probe %s raised unexpectedly", probe.name)
            error = f"{type(e).__name__}: {e}"
        return [Row(t, probe.name, probe_labels(probe), math.nan, error)]


def probe_labels(probe: Probe) -> dict[str, str]:
    """The labels every reading of ``probe`` carries (``{"replica": "replica-0"}`` for a vLLM
    replica), or ``{}`` for a probe that does not declare them.

    They go on the error row of a failed read, so the timeline says which replica went
    silent and evaluation can tell which SLOs that silence leaves without data.
    """
    labels = getattr(probe, "labels", None)
    if not isinstance(labels, Mapping):
        return {}
    return {str(k): str(v) for k, v in labels.items()}
