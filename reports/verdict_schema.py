"""verdict.json's one schema: the runner builds these records and writes them, every reader loads them.

Status and exit code (docs/experiments.md "Game days and experiments"): passed 0; failed 1 (an
SLO breached, no recovery in time, or the fault never bit); aborted 1 (baseline not met or a
stop condition fired, after rollback); error 2 (invalid input or environment error, nothing
injected); skipped 0 (the host lacks what the fault needs, errors.Unsupported; nothing touched;
`--strict` makes it 2); interrupted runs are `aborted` with exit 130.

The runner (inferchaos/run/runner.py) builds a :class:`Verdict` and writes ``to_dict()``;
reports, JUnit, OpenMetrics, the game-day summary and the journal read the same classes back
(inferchaos/reports/load.py parses the file into them, naming the key that is wrong).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path

from inferchaos.status import Status
from inferchaos.steady_state.detection import SignalDetection
from inferchaos.steady_state.evaluation import SloResult
from inferchaos.steady_state.slo import Op, Phase

__all__ = [
    "EXIT_CODES",
    "EXIT_INTERRUPTED",
    "EXIT_STRICT_SKIP",
    "NO_EFFECT",
    "SCHEMA_VERSION",
    "AllowsRecord",
    "ControlRecord",
    "DetectorFiringRecord",
    "FaultRecord",
    "HealedRecord",
    "LayerRecord",
    "PlatformFailureRecord",
    "PlatformRecord",
    "SloRecord",
    "Status",
    "TimingRecord",
    "TriageRecord",
    "Verdict",
]

SCHEMA_VERSION = 1

EXIT_CODES = {Status.PASSED: 0, Status.FAILED: 1, Status.ABORTED: 1, Status.ERROR: 2, Status.SKIPPED: 0}
# What a skip exits with under --strict, for CI gates that require every scenario to run.
EXIT_STRICT_SKIP = 2
EXIT_INTERRUPTED = 130
# The reason of a run whose fault did not bite starts with this: such a run proves nothing.
NO_EFFECT = "fault had no observable effect"


@dataclass(frozen=True)
class SloRecord:
    """One entry of ``slos``; ``observed`` None when the SLO had no data.

    ``baseline`` and ``scale`` only for a baseline-relative threshold; ``declared`` only for the
    platform steady state's SLOs, which no experiment file declares (a journal's probe replays
    an SLO from it).
    """

    name: str
    layer: str
    phase: Phase
    ok: bool
    observed: float | None
    op: Op
    # None: a baseline-relative threshold that had no baseline to scale (the SLO failed closed).
    threshold: float | None
    samples: int | None = None
    reason: str = ""
    baseline: float | None = None
    scale: str = ""
    declared: Mapping[str, object] | None = None

    @classmethod
    def of(cls, result: SloResult, declared: Mapping[str, object] | None = None) -> SloRecord:
        """The record of one evaluated SLO."""
        return cls(
            name=result.name,
            layer=result.layer,
            phase=Phase(result.phase),
            ok=result.ok,
            observed=result.observed,
            op=Op(result.op),
            threshold=None if math.isnan(result.threshold) else result.threshold,
            samples=result.samples,
            reason=result.reason,
            baseline=result.baseline if result.scale else None,
            scale=result.scale,
            declared=declared,
        )

    def to_dict(self) -> dict[str, object]:
        """The verdict.json form."""
        entry: dict[str, object] = {
            "name": self.name,
            "layer": self.layer,
            "phase": self.phase.value,
            "ok": self.ok,
            "observed": self.observed,
            "op": self.op.value,
            "threshold": self.threshold,
            "samples": self.samples,
            "reason": self.reason,
        }
        if self.scale:
            entry["baseline"] = self.baseline
            entry["scale"] = self.scale
        if self.declared is not None:
            entry["declared"] = dict(self.declared)
        return entry


@dataclass(frozen=True)
class FaultRecord:
    """``fault``: what was injected, when, and whether it bit."""

    name: str
    layer: str
    params: Mapping[str, object] = field(default_factory=dict)
    injected_at: float | None = None
    reverted_at: float | None = None
    effect_observed: bool = False
    evidence: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class TimingRecord:
    """``timing``."""

    time_to_detect_s: float | None = None
    time_to_recover_s: float | None = None
    recovered: bool | None = None
    recovery_within_s: float | None = None
    detected_by: str | None = None
    # Epoch time the steady SLOs had held for hold_s: when recovery was known, and the end
    # of the recovery window a game day has to wait through.
    recovery_confirmed_at: float | None = None
    # The recovery.steady SLOs that kept recovery from being confirmed (empty where it was).
    recovery_blocked_by: tuple[str, ...] = ()


@dataclass(frozen=True)
class TriageRecord:
    """``triage``; empty (``layer`` None) when nothing was breached to triage."""

    layer: str | None = None
    reason: str = ""
    evidence: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class ControlRecord:
    """``control``: a negative control's outcome (inferchaos/run/controls.py); None for a scenario."""

    of: str
    breaks: str
    expected_layer: str
    result: str
    message: str
    # What the control's release of each sabotage fault did: fault, ok, handle.
    released: tuple[Mapping[str, object], ...] = ()

    @property
    def proven(self) -> bool:
        """The scenario failed against the broken platform, with the expected layer."""
        return self.result == "failed_as_expected"


@dataclass(frozen=True)
class LayerRecord:
    """One entry of ``layers``: a layer holds when every one of its SLOs holds."""

    ok: bool
    slos: tuple[str, ...] = ()


@dataclass(frozen=True)
class AllowsRecord:
    """``platform.allows``: what the scenario's fault may take out (steady_state/platform.py)."""

    replicas: tuple[str, ...] = ()
    unread: tuple[str, ...] = ()


@dataclass(frozen=True)
class PlatformFailureRecord:
    """``platform.failure``: the first failure the scenario did not inject."""

    slo: str
    phase: str
    replica: str | None
    at: float
    reason: str


@dataclass(frozen=True)
class HealedRecord:
    """One entry of ``platform.healed``: a replica that failed and that the platform put right."""

    replica: str
    failed_at: float


@dataclass(frozen=True)
class DetectorFiringRecord:
    """One entry of ``platform.detectors_after_revert``."""

    t: float
    detector: str
    message: str


@dataclass(frozen=True)
class PlatformRecord:
    """``platform``: whether the shared platform steady state held, and what broke it."""

    steady: bool
    allows: AllowsRecord = field(default_factory=AllowsRecord)
    hold_s: float | None = None
    failure: PlatformFailureRecord | None = None
    healed: tuple[HealedRecord, ...] = ()
    detectors_after_revert: tuple[DetectorFiringRecord, ...] = ()


@dataclass(frozen=True)
class Verdict:
    """Everything a person or a CI gate needs to know about one run."""

    experiment: str
    title: str
    env: str
    status: Status
    reason: str
    started_at: float
    ended_at: float
    phases: Mapping[str, float] = field(default_factory=dict)
    fault: FaultRecord | None = None
    slos: tuple[SloRecord, ...] = ()
    layers: Mapping[str, LayerRecord] = field(default_factory=dict)
    timing: TimingRecord = field(default_factory=TimingRecord)
    triage: TriageRecord = field(default_factory=TriageRecord)
    stop_condition: Mapping[str, object] | None = None
    load: Mapping[str, object] | None = None
    control: ControlRecord | None = None
    # Who noticed the fault and when: inferchaos' own judgement beside the platform's signals
    # (steady_state/detection.py); empty when nothing was injected.
    detection: tuple[SignalDetection, ...] = ()
    # The shared platform steady state (steady_state/platform.py); None in older verdicts.
    platform: PlatformRecord | None = None
    schema: int = SCHEMA_VERSION

    @property
    def exit_code(self) -> int:
        """What the CLI exits with for this verdict (before ``--strict``)."""
        return EXIT_CODES[self.status]

    @property
    def duration_s(self) -> float:
        """Wall time of the run, in seconds."""
        return round(self.ended_at - self.started_at, 3)

    def to_dict(self) -> dict[str, object]:
        """The verdict.json form."""
        return {
            "experiment": self.experiment,
            "title": self.title,
            "env": self.env,
            "status": str(self.status),
            "reason": self.reason,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "phases": dict(self.phases),
            "fault": _plain(self.fault),
            "slos": [s.to_dict() for s in self.slos],
            "layers": {name: _plain(layer) for name, layer in self.layers.items()},
            "timing": _plain(self.timing),
            "triage": _plain(self.triage),
            "stop_condition": None if self.stop_condition is None else dict(self.stop_condition),
            "load": None if self.load is None else dict(self.load),
            "control": _plain(self.control),
            "detection": [_plain(d) for d in self.detection],
            "platform": _plain(self.platform),
            "schema": self.schema,
            "duration_s": self.duration_s,
        }

    def write(self, run_dir: Path) -> Path:
        """Write ``verdict.json`` into ``run_dir``."""
        path = run_dir / "verdict.json"
        path.write_text(json.dumps(self.to_dict(), indent=2, default=str))
        return path


def _plain(value: object) -> object:
    """A record as JSON-ready data: records and mappings become dicts, tuples lists."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str):
        return [_plain(v) for v in value]
    return value
