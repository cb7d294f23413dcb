"""The timeline of a run: every sampled number, every failed read and the phase marks.

On disk it is ``timeline.csv`` with the columns ``t,probe,labels,value,error``:
``t`` in epoch seconds, labels as ``k=v;k=v``, ``value`` NaN on a failed read, and one row
``phase.<mark>`` per phase mark, so the CSV alone is enough to evaluate a run again. The
writer flushes after every tick: a killed run leaves all it sampled on disk.
"""

from __future__ import annotations

import csv
import logging
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from types import TracebackType
from typing import TextIO

from inferchaos.errors import ConfigError
from inferchaos.steady_state.catalog import PHASE_PREFIX, probe_layer
from inferchaos.steady_state.probe_base import Sample, format_labels, parse_labels

logger = logging.getLogger(__name__)

COLUMNS: tuple[str, ...] = ("t", "probe", "labels", "value", "error")


class Mark(StrEnum):
    """The phase marks a run sets; evaluation slices the timeline at them."""

    BASELINE_START = "baseline_start"
    INJECTED = "injected"
    REVERTED = "reverted"
    END = "end"


@dataclass(frozen=True)
class Row:
    """One line of the timeline: a value read at ``t``, or the error of a read that failed."""

    t: float
    probe: str
    labels: Mapping[str, str] = field(default_factory=dict)
    value: float = math.nan
    error: str = ""

    @classmethod
    def from_sample(cls, t: float, sample: Sample) -> Row:
        """The row recording ``sample`` as read at ``t``."""
        return cls(t, sample.probe, dict(sample.labels), float(sample.value))

    @property
    def ok(self) -> bool:
        """True for a usable reading: no error and a real number."""
        return not self.error and not math.isnan(self.value)

    @property
    def layer(self) -> str:
        """Layer part of the probe name (``vllm`` for ``vllm.kv_cache_usage`` or ``vllm@replica-0``)."""
        return probe_layer(self.probe)

    def label_text(self) -> str:
        """Labels as ``k=v;k=v`` in key order, the form timeline.csv stores."""
        return format_labels(self.labels)

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        """True when every ``k: v`` of ``labels`` is among this row's labels."""
        return not labels or all(self.labels.get(k) == v for k, v in labels.items())


class TimelineWriter:
    """Appends timeline rows to ``timeline.csv``, one flushed write per tick."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fresh = not self.path.exists() or self.path.stat().st_size == 0
        if not fresh:
            with self.path.open(newline="") as existing:
                header = next(csv.reader(existing), [])
            if tuple(header) != COLUMNS:
                raise ConfigError(f"{self.path}: exists and is not a timeline (header {header!r})")
        self._file: TextIO = self.path.open("a", newline="", encoding="utf-8")
        self._csv = csv.writer(self._file, lineterminator="\n")
        if fresh:
            self._csv.writerow(COLUMNS)
            self._sync()

    def write(self, rows: Iterable[Row]) -> None:
        """Append ``rows`` and hand them to the operating system before returning."""
        self._csv.writerows((repr(r.t), r.probe, r.label_text(), repr(r.value), r.error) for r in rows)
        self._sync()

    def _sync(self) -> None:
        # A flush is what a killed process needs: the rows are the kernel's then. An fsync per
        # tick also survived power loss, but it ran on the sampler's event loop and, with the
        # disk busy, held every probe and canary stream still for up to 2.4 s (measured in a
        # kv_flood run); the file is fsynced once, at close.
        self._file.flush()

    def close(self) -> None:
        """Force the file to disk and close it; further writes fail."""
        if not self._file.closed:
            self._file.flush()
            os.fsync(self._file.fileno())
        self._file.close()

    def __enter__(self) -> TimelineWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class Timeline:
    """Rows in the order they were sampled, plus the phase marks, optionally mirrored to a CSV."""

    def __init__(self, writer: TimelineWriter | None = None) -> None:
        self._rows: list[Row] = []
        self._marks: dict[str, float] = {}
        self._writer = writer

    @property
    def rows(self) -> Sequence[Row]:
        """Every row, phase marks excluded, in sampling order."""
        return tuple(self._rows)

    @property
    def marks(self) -> Mapping[str, float]:
        """Phase marks by name (see :class:`Mark`), in epoch seconds."""
        return dict(self._marks)

    def attach(self, writer: TimelineWriter) -> None:
        """Mirror the rows and marks recorded from now on to ``writer`` (a timeline read back from
        its file, to be continued there)."""
        self._writer = writer

    def append_tick(self, rows: Sequence[Row]) -> None:
        """Record one tick's rows: on disk first (if a writer is attached), then in memory."""
        if self._writer is not None:
            self._writer.write(rows)
        self._rows.extend(rows)

    def mark(self, name: str, t: float) -> None:
        """Set phase mark ``name`` (e.g. ``injected``) at epoch time ``t``."""
        if not name or any(c in name for c in ',\n\r"'):
            raise ValueError(f"invalid phase mark name {name!r}")
        if self._writer is not None:
            self._writer.write([Row(t, f"{PHASE_PREFIX}{name}", {}, 1.0)])
        self._marks[name] = t

    def select(
        self,
        probe: str,
        labels: Mapping[str, str] | None = None,
        start: float | None = None,
        end: float | None = None,
        *,
        include_end: bool = False,
    ) -> list[Row]:
        """Usable readings of ``probe`` whose labels include ``labels``, within ``[start, end)``."""
        selected: list[Row] = []
        for row in self._rows:
            if row.probe != probe or not row.ok or not row.matches(labels):
                continue
            if start is not None and row.t < start:
                continue
            if end is not None and (row.t > end or (row.t == end and not include_end)):
                continue
            selected.append(row)
        return selected

    def series(
        self,
        probe: str,
        labels: Mapping[str, str] | None = None,
        start: float | None = None,
        end: float | None = None,
        *,
        include_end: bool = False,
    ) -> dict[str, list[tuple[float, float]]]:
        """:meth:`select` grouped by label set (keyed by ``label_text()``) as ``(t, value)`` points."""
        grouped: dict[str, list[tuple[float, float]]] = {}
        for row in self.select(probe, labels, start, end, include_end=include_end):
            grouped.setdefault(row.label_text(), []).append((row.t, row.value))
        return grouped

    def value_at(
        self, probe: str, t: float, labels: Mapping[str, str] | None = None, max_age_s: float | None = None
    ) -> Row | None:
        """The latest usable reading of ``probe`` at or before ``t`` (not older than ``max_age_s``)."""
        found: Row | None = None
        for row in self.select(probe, labels, end=t, include_end=True):
            if found is None or row.t >= found.t:
                found = row
        if found is not None and max_age_s is not None and t - found.t > max_age_s:
            return None
        return found

    def errors(self, start: float | None = None, end: float | None = None) -> list[Row]:
        """Rows of reads that failed, within ``[start, end]``."""
        return [
            r
            for r in self._rows
            if r.error and (start is None or r.t >= start) and (end is None or r.t <= end)
        ]


def read_timeline(path: Path) -> Timeline:
    """Load a ``timeline.csv`` written by :class:`TimelineWriter`, phase marks included.

    A last line cut short by a killed writer is skipped with a warning; any other malformed
    line is a ConfigError naming its line number.
    """
    path = Path(path)
    timeline = Timeline()
    try:
        with path.open(newline="", encoding="utf-8") as f:
            lines = list(csv.reader(f))
    except OSError as e:
        raise ConfigError(f"{path}: cannot read timeline: {e}") from e
    if not lines or tuple(lines[0]) != COLUMNS:
        raise ConfigError(f"{path}: not a timeline (expected header {','.join(COLUMNS)})")
    rows: list[Row] = []
    body = lines[1:]
    for number, fields in enumerate(body, start=2):
        try:
            t_text, probe, label_text, value_text, error = fields
            row = Row(float(t_text), probe, parse_labels(label_text), float(value_text), error)
            if row.probe.startswith(PHASE_PREFIX):
                timeline.mark(row.probe[len(PHASE_PREFIX) :], row.t)
            else:
                rows.append(row)
        except ValueError as e:
            if number == len(body) + 1:
                logger.warning("%s:%d: skipping a truncated last line %r", path, number, fields)
                continue
            raise ConfigError(f"{path}:{number}: malformed timeline row {fields!r}: {e}") from e
    timeline.append_tick(rows)
    return timeline
