"""The verdict of one run: what `verdict.json` holds (docs/experiments.md "Game days and experiments").

Status and exit code (docs/experiments.md "Game days and experiments"): passed 0; failed 1 (an SLO breached, no recovery in time,
or the fault never bit); aborted 1 (baseline not met or a stop condition fired, after
rollback); error 2 (invalid input or environment error, nothing injected); skipped 0 (the host
lacks what the fault needs, errors.Unsupported; nothing touched; `--strict` makes it 2);
interrupted runs are `aborted` with exit 130.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from inferchaos.status import Status
from inferchaos.steady_state.detection import SignalDetection

__all__ = [
    "EXIT_CODES",
    "EXIT_INTERRUPTED",
    "EXIT_STRICT_SKIP",
    "NO_EFFECT",
    "SCHEMA_VERSION",
    "Status",
    "Timing",
    "Verdict",
]

SCHEMA_VERSION = 1


EXIT_CODES = {Status.PASSED: 0, Status.FAILED: 1, Status.ABORTED: 1, Status.ERROR: 2, Status.SKIPPED: 0}
# What a skip exits with under --strict, for CI gates that require every scenario to run.
EXIT_STRICT_SKIP = 2
EXIT_INTERRUPTED = 130
# The reason of a run whose fault did not bite starts with this: such a run proves nothing.
NO_EFFECT = "fault had no observable effect"


@dataclass
class FaultOutcome:
    name: str
    layer: str
    params: dict[str, Any] = field(default_factory=dict)
    injected_at: float | None = None
    reverted_at: float | None = None
    effect_observed: bool = False
    evidence: dict[str, Any] = field(default_factory=dict)


@dataclass
class Timing:
    time_to_detect_s: float | None = None
    time_to_recover_s: float | None = None
    recovered: bool | None = None
    recovery_within_s: float | None = None
    detected_by: str | None = None
    # Epoch time the steady SLOs had held for hold_s: when recovery was known, and the end
    # of the recovery window a game day has to wait through.
    recovery_confirmed_at: float | None = None
    # The recovery.steady SLOs that kept recovery from being confirmed (empty where it was).
    recovery_blocked_by: list[str] = field(default_factory=list)


@dataclass
class Verdict:
    """Everything a person or a CI gate needs to know about one run."""

    experiment: str
    title: str
    env: str
    status: Status
    reason: str
    started_at: float
    ended_at: float
    phases: dict[str, float] = field(default_factory=dict)
    fault: FaultOutcome | None = None
    slos: list[dict[str, Any]] = field(default_factory=list)
    layers: dict[str, dict[str, Any]] = field(default_factory=dict)
    timing: Timing = field(default_factory=Timing)
    triage: dict[str, Any] = field(default_factory=dict)
    stop_condition: dict[str, Any] | None = None
    load: dict[str, Any] | None = None
    # A negative control's outcome (inferchaos.run.controls.ControlOutcome.to_dict()); None for a scenario.
    control: dict[str, Any] | None = None
    # Who noticed the fault and when: inferchaos' own judgement beside the platform's signals
    # (steady_state/detection.py); empty when nothing was injected.
    detection: list[SignalDetection] = field(default_factory=list)
    # The shared platform steady state (steady_state/platform.py): whether it held, what the
    # scenario allowed out, and the first failure the scenario did not inject, if any.
    platform: dict[str, Any] | None = None
    schema: int = SCHEMA_VERSION

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.status]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["status"] = str(self.status)
        data["duration_s"] = round(self.ended_at - self.started_at, 3)
        return data

    def write(self, run_dir: Path) -> Path:
        path = run_dir / "verdict.json"
        path.write_text(json.dumps(self.to_dict(), indent=2, default=str))
        return path
