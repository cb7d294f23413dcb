"""Negative controls: the same scenario against a deliberately broken platform, which must FAIL.

A scenario that passes proves something only if it can fail. Each built-in scenario ships a
control, ``experiments/controls/<scenario>.yaml``, that runs the scenario unchanged (its
SLOs, windows and fault) while breaking the real environment in the way the scenario
exists to catch:

- ``hold_fault: true``: the scenario's own fault is not reverted within the window, as on a
  platform that never heals it (no replacement node, leaked actors never released). The
  revert runs once the run has been judged.
- ``sabotage``: further faults, reverted once the run has been judged (a replica that
  hangs, GPUs that stay held). ``at: before_inject`` starts one just before the scenario's
  fault acts, for a break that must overlap the whole injection (a survivor that stalls
  while its peer restarts); ``at: inject`` right after the scenario's fault bit (a flooded
  replica that then hangs); ``at: revert`` right before the scenario's fault is reverted, once the fault's evidence
  is read, for a break that would stop the fault itself from biting (GPUs held while a
  stall must show GPUs free). ``at: baseline`` starts one as the baseline starts, and
  ``at: recovery`` right after the revert: a failure the scenario did not inject, before the
  fault or as the platform recovers from it, which the platform steady state
  (steady_state/platform.py) must catch and name. Recovery holds for at least one request
  timeout, so a break just after the revert cannot lose the race against a quick recovery.

Sabotage and held faults are ledger entries like any fault, so ``inferchaos cleanup``
reverts them after a crash. A control is judged by :func:`control_outcome`: it must end
failed (or aborted by a stop condition) with triage naming ``expect.layer``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from inferchaos.errors import ConfigError
from inferchaos.faults import registry
from inferchaos.layers import TRIAGE_ORDER, Layer
from inferchaos.params import InvalidValue, parse_params
from inferchaos.reports.verdict_schema import NO_EFFECT, ControlRecord
from inferchaos.run.packaged import CONTROLS_DIR
from inferchaos.run.spec import (
    ExperimentSpec,
    check_fault_arguments,
    load_and_validate,
    load_experiment,
)
from inferchaos.status import Status


class SabotageAt(StrEnum):
    """When a sabotage fault starts, from the baseline's start to right after the revert."""

    BASELINE = "baseline"
    BEFORE_INJECT = "before_inject"
    INJECT = "inject"
    REVERT = "revert"
    RECOVERY = "recovery"


@dataclass
class SabotageEntry:
    """One ``control.sabotage[]`` entry as written: a registered fault and its arguments."""

    fault: str
    at: SabotageAt = SabotageAt.INJECT
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass
class ExpectEntry:
    """``control.expect``: the layer triage must name when the scenario fails."""

    layer: Layer

    def __post_init__(self) -> None:
        if self.layer not in TRIAGE_ORDER:
            raise InvalidValue("layer", f"must be one of {', '.join(TRIAGE_ORDER)}, got {self.layer!r}")


@dataclass
class ControlBlock:
    """The ``control`` mapping of a control file."""

    of: str
    breaks: str
    expect: ExpectEntry
    hold_fault: bool = False
    sabotage: tuple[SabotageEntry, ...] = ()


@dataclass(frozen=True)
class SabotageStep:
    """A validated sabotage fault."""

    index: int
    fault: str
    at: SabotageAt
    params: dict[str, Any]


@dataclass(frozen=True)
class ControlSpec:
    """A validated control: the scenario it runs and how it breaks the platform."""

    path: Path
    scenario: ExperimentSpec
    breaks: str
    expect_layer: Layer
    hold_fault: bool
    sabotage: tuple[SabotageStep, ...]

    @property
    def name(self) -> str:
        """The run's name: the scenario's, marked as its control (``<scenario>.<variant>.control``
        for a scenario's further controls, ``controls/<scenario>.<variant>.yaml``)."""
        stem = self.path.stem if self.path.stem.startswith(f"{self.scenario.name}.") else self.scenario.name
        return f"{stem}.control"

    def run_spec(self) -> ExperimentSpec:
        """The scenario as this control runs it: unchanged but for its name."""
        return replace(self.scenario, name=self.name)

    def describe(self) -> str:
        """What the control breaks, for plans and reports."""
        parts = []
        if self.hold_fault:
            parts.append(f"{self.scenario.fault.fault} held until the run is judged")
        parts += [f"sabotage {s.fault} at {s.at.value}" for s in self.sabotage]
        return f"{self.breaks} ({'; '.join(parts)}); expect FAILED with triage layer {self.expect_layer}"


def is_control_file(path: Path) -> bool:
    """Whether ``path`` is a control file (a mapping with a top-level ``control`` key)."""
    return "control" in load_experiment(path)


def load_control(path: Path) -> ControlSpec:
    """Load and completely validate a control file and the scenario it names."""
    raw = load_experiment(path)
    if "control" not in raw:
        raise ConfigError(f"{path}: control: required: the scenario this control breaks and how")
    unknown = sorted(set(raw) - {"control"})
    if unknown:
        raise ConfigError(f"{path}: {unknown[0]}: unknown key; a control file holds only `control`")
    block = parse_params(f"{path}: control", ControlBlock, raw["control"] or {}, noun="key")
    if not block.breaks.strip():
        raise ConfigError(f"{path}: control.breaks: required: what is broken, in one line")
    if not block.hold_fault and not block.sabotage:
        raise ConfigError(f"{path}: control: breaks nothing: set hold_fault: true or list sabotage faults")
    scenario_path = (path.parent / block.of).resolve()
    scenario = load_and_validate(scenario_path)
    steps = []
    for index, entry in enumerate(block.sabotage):
        key = f"control.sabotage[{index}]"
        try:
            fault = registry.get_fault(entry.fault)
        except ConfigError as e:
            raise ConfigError(f"{path}: {key}.fault: {e}") from e
        check_fault_arguments(path, f"{key}.arguments", fault.name, fault.name, entry.arguments)
        steps.append(SabotageStep(index, fault.name, entry.at, dict(entry.arguments)))
    return ControlSpec(
        path=path,
        scenario=scenario,
        breaks=block.breaks.strip(),
        expect_layer=block.expect.layer,
        hold_fault=block.hold_fault,
        sabotage=tuple(steps),
    )


def control_path(scenario: Path) -> Path:
    """Where the control of ``scenario`` lives: ``controls/<name>.yaml`` beside it."""
    return scenario.parent / CONTROLS_DIR / f"{scenario.stem}.yaml"


def controls_of(scenarios: list[Path]) -> list[Path]:
    """The control files of every scenario (its control, then its further ones,
    ``controls/<name>.<variant>.yaml``); ConfigError naming the first scenario without one."""
    paths = []
    for scenario in scenarios:
        path = control_path(scenario)
        if not path.is_file():
            raise ConfigError(f"--controls: {scenario.name} ships no negative control (expected {path})")
        paths += [path, *sorted(path.parent.glob(f"{scenario.stem}.*{path.suffix}"))]
    return paths


class ControlResult(StrEnum):
    """How a control run ended, from the point of view of the scenario's trustworthiness."""

    FAILED_AS_EXPECTED = "failed_as_expected"
    PASSED = "passed"
    WRONG_LAYER = "wrong_layer"
    NO_VERDICT = "no_verdict"


def control_outcome(
    control: ControlSpec,
    status: Status,
    reason: str,
    triage_layer: str,
    stopped_by_condition: bool,
    released: Sequence[Mapping[str, object]],
) -> ControlRecord:
    """Judge a control run from its scenario verdict.

    Failing counts only when the scenario judged the broken platform: an SLO breach, no
    recovery, or a stop condition; not a baseline abort, an error, an interruption, or a
    fault that never bit (that would fail the healthy platform too).
    """
    expected = str(control.expect_layer)

    def outcome(result: ControlResult, message: str) -> ControlRecord:
        return ControlRecord(
            control.scenario.name, control.breaks, expected, str(result), message, tuple(released)
        )

    if status is Status.PASSED:
        return outcome(ControlResult.PASSED, "control PASSED: the scenario cannot catch this")
    judged = status is Status.FAILED or (status is Status.ABORTED and stopped_by_condition)
    if not judged or reason.startswith(NO_EFFECT):
        return outcome(ControlResult.NO_VERDICT, f"control did not reach a verdict ({status}: {reason})")
    if triage_layer != expected:
        return outcome(
            ControlResult.WRONG_LAYER,
            f"control failed, but triage named {triage_layer}, not {expected}",
        )
    return outcome(ControlResult.FAILED_AS_EXPECTED, f"control: failed as expected ({expected}: {reason})")
