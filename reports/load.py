"""Reading a run folder back into dataclasses: verdict.json, journal.json and timeline.csv.

Reports are rendered from these stored files alone, so an old run can be rendered again after
an upgrade. Reading is strict about the *format* (keys, types, the CSV header) and says which
file and which key is wrong; it is not strict about the *values*, which are whatever the run
measured.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from inferchaos.errors import ConfigError
from inferchaos.reports.report_errors import ReportError
from inferchaos.reports.verdict_schema import (
    SCHEMA_VERSION,
    AllowsRecord,
    ControlRecord,
    DetectorFiringRecord,
    FaultRecord,
    HealedRecord,
    LayerRecord,
    PlatformFailureRecord,
    PlatformRecord,
    SloRecord,
    Status,
    TimingRecord,
    TriageRecord,
    Verdict,
)
from inferchaos.steady_state.detection import SignalDetection
from inferchaos.steady_state.slo import Op, Phase
from inferchaos.steady_state.timeline import Mark, Timeline, read_timeline

logger = logging.getLogger(__name__)

JOURNAL = "journal.json"
TIMELINE = "timeline.csv"
VERDICT = "verdict.json"
RUN_FILES: tuple[str, ...] = (JOURNAL, TIMELINE, VERDICT)

# The verdict.json schema versions this reader understands.
SUPPORTED_SCHEMAS: frozenset[int] = frozenset({SCHEMA_VERSION})


@dataclass(frozen=True)
class ActivityRecord:
    """One activity result of the journal's ``run`` or ``rollbacks`` list."""

    name: str
    kind: str
    status: str
    start: str
    end: str
    duration: float
    provider: str = ""


@dataclass(frozen=True)
class JournalRecord:
    """The parts of the Chaos Toolkit journal a report shows."""

    chaoslib_version: str
    platform: str
    node: str
    status: str
    deviated: bool
    start: str
    end: str
    duration: float
    steady_state_before: bool | None
    steady_state_after: bool | None
    activities: tuple[ActivityRecord, ...]
    rollbacks: tuple[ActivityRecord, ...]


@dataclass(frozen=True)
class PhaseTimes:
    """The phase marks of a run in epoch seconds; None where the run never got there."""

    baseline_start: float | None
    injected: float | None
    reverted: float | None
    end: float | None

    def ran(self, phase: Phase) -> bool:
        """Whether ``phase`` happened at all (during needs an injection, recovery a revert)."""
        if phase is Phase.BASELINE:
            return self.baseline_start is not None
        if phase is Phase.DURING:
            return self.injected is not None
        return self.reverted is not None

    def phase_at(self, t: float) -> Phase | None:
        """The phase time ``t`` falls in, cut as evaluation cuts it (baseline up to the
        injection, during up to the revert, recovery to the end); None outside the run."""
        if (self.baseline_start is not None and t < self.baseline_start) or (
            self.end is not None and t > self.end
        ):
            return None
        if self.reverted is not None and t >= self.reverted:
            return Phase.RECOVERY
        if self.injected is not None and t >= self.injected:
            return Phase.DURING
        return Phase.BASELINE


@dataclass(frozen=True)
class RunRecord:
    """One run folder, read back."""

    run_dir: Path
    verdict: Verdict
    journal: JournalRecord
    timeline: Timeline

    @cached_property
    def phases(self) -> PhaseTimes:
        """Phase marks from timeline.csv (what evaluation cut the phases at), falling back to
        verdict.json ``phases`` and the fault's ledger timestamps for marks the CSV lacks."""
        marks = self.timeline.marks
        stored = self.verdict.phases
        fault = self.verdict.fault
        times = [row.t for row in self.timeline.rows]

        def pick(mark: Mark, *fallbacks: float | None) -> float | None:
            if mark in marks:
                return marks[mark]
            return next((t for t in (stored.get(mark), *fallbacks) if t is not None), None)

        return PhaseTimes(
            baseline_start=pick(Mark.BASELINE_START, min(times, default=None)),
            injected=pick(Mark.INJECTED, fault.injected_at if fault else None),
            reverted=pick(Mark.REVERTED, fault.reverted_at if fault else None),
            end=pick(Mark.END, max(times, default=None), self.verdict.ended_at),
        )

    def slo_ran(self, slo: SloRecord) -> bool:
        """Whether the phase ``slo`` is judged over happened in this run."""
        return self.phases.ran(slo.phase)


@dataclass(frozen=True)
class ProbeErrors:
    """The failed reads of one probe (``vllm@replica-1``, ``ray``) over a run."""

    probe: str
    count: int
    first_t: float
    last_t: float
    last_error: str


def probe_errors(timeline: Timeline) -> list[ProbeErrors]:
    """Failed reads per probe, most failures first."""
    by_probe: dict[str, list[tuple[float, str]]] = {}
    for row in timeline.errors():
        by_probe.setdefault(row.probe, []).append((row.t, row.error))
    summaries = []
    for probe, failures in by_probe.items():
        failures.sort()
        summaries.append(ProbeErrors(probe, len(failures), failures[0][0], failures[-1][0], failures[-1][1]))
    return sorted(summaries, key=lambda e: (-e.count, e.probe))


class _Fields:
    """Typed reads from parsed JSON; every failure names the file and the key path."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, where: str, message: str) -> ReportError:
        """The error for the key at ``where`` of this file."""
        return ReportError(f"{self.path}: {where}: {message}")

    @staticmethod
    def _got(value: object) -> str:
        return "null" if value is None else f"{type(value).__name__} {value!r:.60}"

    def mapping(self, value: object, where: str) -> Mapping[str, object]:
        if not isinstance(value, Mapping):
            raise self.fail(where, f"expected an object, got {self._got(value)}")
        return value

    def item(self, obj: Mapping[str, object], key: str, where: str) -> object:
        if key not in obj:
            raise self.fail(f"{where}{key}", "missing")
        return obj[key]

    def text(self, obj: Mapping[str, object], key: str, where: str = "") -> str:
        value = self.item(obj, key, where)
        if not isinstance(value, str):
            raise self.fail(f"{where}{key}", f"expected a string, got {self._got(value)}")
        return value

    def opt_text(self, obj: Mapping[str, object], key: str, where: str = "") -> str | None:
        return None if self.item(obj, key, where) is None else self.text(obj, key, where)

    def number(self, obj: Mapping[str, object], key: str, where: str = "") -> float:
        value = self.item(obj, key, where)
        # bool is an int to Python, but true is never a timestamp or a threshold.
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(f"{where}{key}", f"expected a number, got {self._got(value)}")
        return float(value)

    def opt_number(self, obj: Mapping[str, object], key: str, where: str = "") -> float | None:
        return None if self.item(obj, key, where) is None else self.number(obj, key, where)

    def flag(self, obj: Mapping[str, object], key: str, where: str = "") -> bool:
        value = self.item(obj, key, where)
        if not isinstance(value, bool):
            raise self.fail(f"{where}{key}", f"expected true or false, got {self._got(value)}")
        return value

    def opt_flag(self, obj: Mapping[str, object], key: str, where: str = "") -> bool | None:
        return None if self.item(obj, key, where) is None else self.flag(obj, key, where)

    def obj(self, obj: Mapping[str, object], key: str, where: str = "") -> Mapping[str, object]:
        return self.mapping(self.item(obj, key, where), f"{where}{key}")

    def opt_obj(self, obj: Mapping[str, object], key: str, where: str = "") -> Mapping[str, object] | None:
        return None if self.item(obj, key, where) is None else self.obj(obj, key, where)

    def items(self, obj: Mapping[str, object], key: str, where: str = "") -> Sequence[object]:
        value = self.item(obj, key, where)
        if not isinstance(value, list):
            raise self.fail(f"{where}{key}", f"expected a list, got {self._got(value)}")
        return value

    def texts(self, obj: Mapping[str, object], key: str, where: str = "") -> tuple[str, ...]:
        values = self.items(obj, key, where)
        texts = tuple(v for v in values if isinstance(v, str))
        if len(texts) != len(values):
            raise self.fail(f"{where}{key}", "expected a list of strings")
        return texts

    def choice(self, obj: Mapping[str, object], key: str, where: str, choices: Sequence[str]) -> str:
        value = self.text(obj, key, where)
        if value not in choices:
            raise self.fail(f"{where}{key}", f"unknown value {value!r}; expected one of {', '.join(choices)}")
        return value


def _defaults(obj: Mapping[str, object], **defaults: object) -> Mapping[str, object]:
    """``obj`` with absent keys set from ``defaults``: for keys beyond the design's minimum
    verdict.json, which an older or hand-written run folder may not carry."""
    return {**defaults, **obj}


def _read_json(path: Path) -> Mapping[str, object]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as e:
        raise ReportError(f"{path}: missing (a run folder holds {', '.join(RUN_FILES)})") from e
    except OSError as e:
        raise ReportError(f"{path}: cannot read: {e}") from e
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ReportError(f"{path}: not valid JSON: {e}") from e
    return _Fields(path).mapping(data, "top level")


def _slo(f: _Fields, entry: object, where: str) -> SloRecord:
    entry = _defaults(f.mapping(entry, where), samples=None, reason="")
    w = f"{where}."
    samples = f.opt_number(entry, "samples", w)
    return SloRecord(
        name=f.text(entry, "name", w),
        layer=f.text(entry, "layer", w),
        phase=Phase(f.choice(entry, "phase", w, [p.value for p in Phase])),
        ok=f.flag(entry, "ok", w),
        observed=f.opt_number(entry, "observed", w),
        op=Op(f.choice(entry, "op", w, [o.value for o in Op])),
        threshold=f.opt_number(entry, "threshold", w),
        samples=None if samples is None else int(samples),
        reason=f.text(entry, "reason", w),
        # Only a baseline-relative threshold carries these two keys.
        baseline=f.opt_number(entry, "baseline", w) if "scale" in entry else None,
        scale=f.text(entry, "scale", w) if "scale" in entry else "",
        declared=f.obj(entry, "declared", w) if "declared" in entry else None,
    )


def _fault(f: _Fields, entry: Mapping[str, object] | None) -> FaultRecord | None:
    if entry is None:
        return None
    entry = _defaults(entry, params={}, evidence={})
    w = "fault."
    return FaultRecord(
        name=f.text(entry, "name", w),
        layer=f.text(entry, "layer", w),
        params=f.obj(entry, "params", w),
        injected_at=f.opt_number(entry, "injected_at", w),
        reverted_at=f.opt_number(entry, "reverted_at", w),
        effect_observed=f.flag(entry, "effect_observed", w),
        evidence=f.opt_obj(entry, "evidence", w) or {},
    )


def _timing(f: _Fields, entry: Mapping[str, object]) -> TimingRecord:
    entry = _defaults(
        entry,
        recovered=None,
        recovery_within_s=None,
        detected_by=None,
        recovery_confirmed_at=None,
        recovery_blocked_by=[],
    )
    w = "timing."
    return TimingRecord(
        time_to_detect_s=f.opt_number(entry, "time_to_detect_s", w),
        time_to_recover_s=f.opt_number(entry, "time_to_recover_s", w),
        recovered=f.opt_flag(entry, "recovered", w),
        recovery_within_s=f.opt_number(entry, "recovery_within_s", w),
        detected_by=f.opt_text(entry, "detected_by", w),
        recovery_confirmed_at=f.opt_number(entry, "recovery_confirmed_at", w),
        recovery_blocked_by=f.texts(entry, "recovery_blocked_by", w),
    )


def _triage(f: _Fields, entry: Mapping[str, object]) -> TriageRecord:
    if not entry:
        return TriageRecord()
    entry = _defaults(entry, evidence={})
    w = "triage."
    return TriageRecord(
        layer=f.text(entry, "layer", w),
        reason=f.text(entry, "reason", w),
        evidence=f.obj(entry, "evidence", w),
    )


def load_verdict(path: Path) -> Verdict:
    """Read ``verdict.json``; ReportError naming the file and key when it is missing or malformed."""
    path = Path(path)
    data = _read_json(path)
    f = _Fields(path)
    schema = f.number(data, "schema")
    if schema not in SUPPORTED_SCHEMAS:
        raise f.fail(
            "schema", f"version {schema:g} is not one this inferchaos reads ({sorted(SUPPORTED_SCHEMAS)})"
        )
    phases = f.obj(data, "phases")
    layers = f.obj(data, "layers")
    return Verdict(
        experiment=f.text(data, "experiment"),
        title=f.text(data, "title"),
        env=f.text(data, "env"),
        status=Status(f.choice(data, "status", "", [s.value for s in Status])),
        reason=f.text(data, "reason"),
        started_at=f.number(data, "started_at"),
        ended_at=f.number(data, "ended_at"),
        phases={key: f.number(phases, key, "phases.") for key in phases},
        fault=_fault(f, f.opt_obj(data, "fault")),
        slos=tuple(_slo(f, entry, f"slos[{i}]") for i, entry in enumerate(f.items(data, "slos"))),
        layers={key: _layer(f, value, f"layers.{key}") for key, value in layers.items()},
        timing=_timing(f, f.obj(data, "timing")),
        triage=_triage(f, f.obj(data, "triage")),
        stop_condition=f.opt_obj(data, "stop_condition"),
        load=f.opt_obj(data, "load"),
        schema=int(schema),
        # Older verdicts have no ``control`` key: they are scenario runs.
        control=_control(f, f.opt_obj(data, "control") if "control" in data else None),
        # Older verdicts have no ``detection`` key: nobody's noticing was recorded.
        detection=_detection(f, data),
        # Older verdicts have no ``platform`` key: the shared steady state was not judged.
        platform=_platform(f, f.opt_obj(data, "platform") if "platform" in data else None),
    )


def _detection(f: _Fields, data: Mapping[str, object]) -> tuple[SignalDetection, ...]:
    if data.get("detection") is None:
        return ()
    entries = []
    for index, entry in enumerate(f.items(data, "detection")):
        where = f"detection[{index}]."
        entry = _defaults(f.mapping(entry, where[:-1]), at=None, detail="", lead_s=None)
        entries.append(
            SignalDetection(
                layer=f.text(entry, "layer", where),
                signal=f.text(entry, "signal", where),
                noticed_after_s=f.opt_number(entry, "noticed_after_s", where),
                at=f.opt_number(entry, "at", where),
                detail=f.text(entry, "detail", where),
                lead_s=f.opt_number(entry, "lead_s", where),
            )
        )
    return tuple(entries)


def _control(f: _Fields, data: Mapping[str, object] | None) -> ControlRecord | None:
    if data is None:
        return None
    w = "control."
    return ControlRecord(
        of=f.text(data, "of", w),
        breaks=f.text(data, "breaks", w),
        expected_layer=f.text(data, "expected_layer", w),
        result=f.text(data, "result", w),
        message=f.text(data, "message", w),
        released=tuple(
            f.mapping(entry, f"{w}released[{i}]") for i, entry in enumerate(f.items(data, "released", w))
        )
        if "released" in data
        else (),
    )


def _layer(f: _Fields, value: object, where: str) -> LayerRecord:
    entry = _defaults(f.mapping(value, where), slos=[])
    return LayerRecord(ok=f.flag(entry, "ok", f"{where}."), slos=f.texts(entry, "slos", f"{where}."))


def _platform(f: _Fields, data: Mapping[str, object] | None) -> PlatformRecord | None:
    if data is None:
        return None
    w = "platform."
    data = _defaults(data, allows={}, hold_s=None, failure=None, healed=[], detectors_after_revert=[])
    allows = _defaults(f.obj(data, "allows", w), replicas=[], unread=[])
    failure = f.opt_obj(data, "failure", w)
    fw = f"{w}failure."
    return PlatformRecord(
        steady=f.flag(data, "steady", w),
        allows=AllowsRecord(
            replicas=f.texts(allows, "replicas", f"{w}allows."),
            unread=f.texts(allows, "unread", f"{w}allows."),
        ),
        hold_s=f.opt_number(data, "hold_s", w),
        failure=None
        if failure is None
        else PlatformFailureRecord(
            slo=f.text(failure, "slo", fw),
            phase=f.text(failure, "phase", fw),
            replica=f.opt_text(failure, "replica", fw),
            at=f.number(failure, "at", fw),
            reason=f.text(failure, "reason", fw),
        ),
        healed=tuple(
            HealedRecord(
                replica=f.text(entry, "replica", f"{w}healed[{i}]."),
                failed_at=f.number(entry, "failed_at", f"{w}healed[{i}]."),
            )
            for i, entry in enumerate(
                f.mapping(e, f"{w}healed[{j}]") for j, e in enumerate(f.items(data, "healed", w))
            )
        ),
        detectors_after_revert=tuple(
            DetectorFiringRecord(
                t=f.number(entry, "t", f"{w}detectors_after_revert[{i}]."),
                detector=f.text(entry, "detector", f"{w}detectors_after_revert[{i}]."),
                message=f.text(entry, "message", f"{w}detectors_after_revert[{i}]."),
            )
            for i, entry in enumerate(
                f.mapping(e, f"{w}detectors_after_revert[{j}]")
                for j, e in enumerate(f.items(data, "detectors_after_revert", w))
            )
        ),
    )


def _activity(f: _Fields, entry: object, where: str) -> ActivityRecord:
    entry = f.mapping(entry, where)
    w = f"{where}."
    activity = f.obj(entry, "activity", w)
    provider = activity.get("provider")
    provider_text = ""
    if isinstance(provider, Mapping):
        provider_text = ".".join(str(provider[k]) for k in ("module", "func") if k in provider)
    f.item(entry, "output", w)  # present in every chaoslib activity result, null or not
    return ActivityRecord(
        name=f.text(activity, "name", f"{w}activity."),
        kind=f.text(activity, "type", f"{w}activity."),
        status=f.text(entry, "status", w),
        start=f.text(entry, "start", w),
        end=f.text(entry, "end", w),
        duration=f.number(entry, "duration", w),
        provider=provider_text,
    )


def _hypothesis_met(f: _Fields, states: Mapping[str, object], key: str) -> bool | None:
    state = f.opt_obj(states, key, "steady_states.")
    if state is None:
        return None
    return f.opt_flag(state, "steady_state_met", f"steady_states.{key}.")


def load_journal(path: Path) -> JournalRecord:
    """Read ``journal.json`` (Chaos Toolkit journal shape); ReportError naming file and key otherwise."""
    path = Path(path)
    data = _read_json(path)
    f = _Fields(path)
    f.obj(data, "experiment")
    states = f.obj(data, "steady_states")
    f.items(states, "during", "steady_states.")
    return JournalRecord(
        chaoslib_version=f.text(data, "chaoslib-version"),
        platform=f.text(data, "platform"),
        node=f.text(data, "node"),
        status=f.text(data, "status"),
        deviated=f.flag(data, "deviated"),
        start=f.text(data, "start"),
        end=f.text(data, "end"),
        duration=f.number(data, "duration"),
        steady_state_before=_hypothesis_met(f, states, "before"),
        steady_state_after=_hypothesis_met(f, states, "after"),
        activities=tuple(_activity(f, e, f"run[{i}]") for i, e in enumerate(f.items(data, "run"))),
        rollbacks=tuple(_activity(f, e, f"rollbacks[{i}]") for i, e in enumerate(f.items(data, "rollbacks"))),
    )


def load_timeline(path: Path) -> Timeline:
    """Read ``timeline.csv``; ReportError naming the file (and line) when missing or malformed."""
    path = Path(path)
    if not path.is_file():
        raise ReportError(f"{path}: missing (a run folder holds {', '.join(RUN_FILES)})")
    try:
        return read_timeline(path)
    except ConfigError as e:
        # read_timeline's message already leads with the path and line number.
        raise ReportError(str(e)) from e


def load_run(run_dir: Path) -> RunRecord:
    """Read every stored file of the run folder ``run_dir``."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ReportError(f"{run_dir}: not a run folder (no such directory)")
    missing = [name for name in RUN_FILES if not (run_dir / name).is_file()]
    if missing:
        raise ReportError(f"{run_dir}: run folder lacks {', '.join(missing)}")
    logger.debug("reading run folder %s", run_dir)
    return RunRecord(
        run_dir=run_dir,
        verdict=load_verdict(run_dir / VERDICT),
        journal=load_journal(run_dir / JOURNAL),
        timeline=load_timeline(run_dir / TIMELINE),
    )
