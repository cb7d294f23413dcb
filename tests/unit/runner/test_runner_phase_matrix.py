"""Rollback in every phase of a run: baseline, injecting, during, reverting, recovery.

Each case runs the real Runner against the fakes and disturbs one phase with one event: an
exception (a bug, not an InferchaosError), SIGINT, SIGTERM, the stop condition (only the
during phase checks it: before the injection there is nothing to stop, after the revert
nothing left to roll back), or a second signal while the revert is acting (only where a revert
follows the first event: the baseline injects nothing, and in the recovery the revert is over).
Signals are sent to this process with the runner's own handlers installed, once the fakes show
the phase has been reached.

Every case proves: the revert ran exactly once after the inject, or, in the baseline, that
nothing was injected and nothing reverted; verdict.json holds the status and reason; the CLI
turns the verdict into the README's exit code; nothing is left in the ledger (except after a
failed revert, where the entry must stay for `inferchaos cleanup`, which then reverts it).
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from inferchaos.cli import run_command as cli_run
from inferchaos.faults.ledger import Ledger
from inferchaos.reports.verdict_schema import Status
from inferchaos.run.spec import ExperimentSpec
from tests.fakes.scripted_world import (
    FAKE_FAULT,
    LONG_DURING_S,
    STOP_CONDITION,
    FakeEnv,
    FaultScript,
    InterruptAt,
    RunResult,
    World,
    make_spec,
    run_cleanup,
    run_fake_experiment,
)

pytestmark = pytest.mark.long_running

BUG = "bug in the fault"
SLOW_S = 1.0  # how long inject or revert acts, so that a signal lands while it does
INTERRUPTED = "interrupted; the fault was rolled back"
NOTHING_INJECTED = "interrupted before the injection; nothing was injected"


@dataclass(frozen=True)
class Case:
    """One phase x event: how to provoke it, and what the run must leave behind."""

    phase: InterruptAt
    event: str
    status: Status
    reason: str  # the verdict's reason starts with this
    exit_code: int
    injected: bool = True
    spec: dict[str, Any] = field(default_factory=dict)
    world: dict[str, dict[str, float]] = field(default_factory=dict)
    script: dict[str, Any] = field(default_factory=dict)
    signals: tuple[tuple[signal.Signals, InterruptAt], ...] = ()
    progress_raises: tuple[str, BaseException] | None = None
    revert_fails: bool = False


def _signal_cases(phase: InterruptAt, injected: bool, **setup: Any) -> list[Case]:
    reason = INTERRUPTED if injected else NOTHING_INJECTED
    return [
        Case(phase, sig.name, Status.ABORTED, reason, 130, injected, signals=((sig, phase),), **setup)
        for sig in (signal.SIGINT, signal.SIGTERM)
    ]


def _second_signal(phase: InterruptAt, **setup: Any) -> Case:
    script = {**setup.pop("script", {}), "revert_takes_s": SLOW_S}
    signals = ((signal.SIGINT, phase), (signal.SIGTERM, "reverting"))
    return Case(
        phase,
        "second signal in revert",
        Status.ABORTED,
        INTERRUPTED,
        130,
        script=script,
        signals=signals,
        **setup,
    )


LONG = {"during_s": LONG_DURING_S}
# The recovery window stays open its whole budget (ttft never recovers), so a signal lands in it.
SLOW_RECOVERY = {"after": {"canary.ttft_s": 2.0}}

CASES: list[Case] = [
    # baseline: nothing is injected yet, so nothing may be reverted either.
    Case(
        "baseline",
        "exception",
        Status.ERROR,
        "baseline failed: the sampler stopped: RuntimeError: display broke",
        2,
        injected=False,
        spec={"baseline_s": LONG_DURING_S},
        progress_raises=("baseline", RuntimeError("display broke")),
    ),
    *_signal_cases("baseline", injected=False, spec={"baseline_s": LONG_DURING_S}),
    # injecting: the ledger entry is written, the act under way; the revert waits for the act.
    Case(
        "injecting",
        "exception",
        Status.ERROR,
        f"inject failed: RuntimeError: {BUG}",
        2,
        script={"inject_raises": RuntimeError(BUG)},
    ),
    *_signal_cases("injecting", injected=True, spec=LONG, script={"inject_takes_s": SLOW_S}),
    _second_signal("injecting", spec=LONG, script={"inject_takes_s": SLOW_S}),
    # during: the fault is active.
    Case(
        "during",
        "exception",
        Status.ERROR,
        f"during failed: RuntimeError: {BUG}",
        2,
        script={"evidence_raises": RuntimeError(BUG)},
    ),
    *_signal_cases("during", injected=True, spec=LONG),
    Case(
        "during",
        "stop condition",
        Status.ABORTED,
        "stop condition front_door_down:",
        1,
        spec={**LONG, "stop_conditions": [STOP_CONDITION]},
        world={"during": {"canary.success": 0.0}},
    ),
    _second_signal("during", spec=LONG),
    # reverting: the revert is acting; it must run to its end whatever arrives.
    Case(
        "reverting",
        "exception",
        Status.ERROR,
        f"revert failed: RuntimeError: {BUG}",
        2,
        script={"revert_raises": RuntimeError(BUG)},
        revert_fails=True,
    ),
    *_signal_cases("reverting", injected=True, script={"revert_takes_s": SLOW_S}),
    _second_signal("reverting"),
    # recovery: the revert is done; whatever happens now must not revert again.
    Case(
        "recovery",
        "exception",
        Status.ERROR,
        f"recovery failed: RuntimeError: {BUG}",
        2,
        script={"evidence_after_revert_raises": RuntimeError(BUG)},
    ),
    *_signal_cases("recovery", injected=True, world=SLOW_RECOVERY),
]


def _run_case(case: Case, tmp_path: Path) -> tuple[ExperimentSpec, RunResult]:
    spec = make_spec(tmp_path / f"{case.phase}.yaml", **case.spec)
    result = run_fake_experiment(
        spec,
        tmp_path / "run",
        world=World(**case.world),
        script=FaultScript(**case.script),
        signals=list(case.signals),
        progress_raises=case.progress_raises,
    )
    return spec, result


def _cli_exit_code(result: RunResult, spec: ExperimentSpec, tmp_path: Path, mp: pytest.MonkeyPatch) -> int:
    """What `inferchaos run` exits with for this verdict: the CLI's own mapping, fed the run's verdict."""
    mp.setattr(cli_run, "load_and_validate", lambda path: spec)
    mp.setattr(cli_run, "run_experiment", lambda *args, **kwargs: result.verdict)
    return cli_run.run_one(spec, FakeEnv(), tmp_path / "cli-out", 0.25, False)[0]  # type: ignore[arg-type]


def _landed_in(result: RunResult, at: InterruptAt) -> Callable[[float], bool]:
    """Whether a signal sent at time t reached the run in phase ``at``, by the fakes' own records."""
    world = result.world
    if at == "baseline":
        return lambda t: "inject" not in world.names()
    if at == "injecting":
        return lambda t: world.first("inject.acting") <= t <= world.first("inject.done")
    if at == "during":
        return lambda t: world.first("inject.done") <= t <= world.first("revert")
    if at == "reverting":
        return lambda t: world.first("revert") <= t <= world.first("revert.done")
    return lambda t: world.first("revert.done") <= t <= world.first("canary.stop")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", CASES, ids=[f"{c.phase}-{c.event.replace(' ', '_')}" for c in CASES])
def test_every_phase_rolls_back_and_writes_its_verdict(
    case: Case,
    tmp_path: Path,
    private_home: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    began = time.monotonic()
    spec, result = _run_case(case, tmp_path)
    took = time.monotonic() - began
    names = result.world.names()

    # The event happened where the case says it did.
    assert len(result.signals_sent) == len(case.signals), f"signals not sent: {result.progress}"
    for (_, at), sent in zip(case.signals, result.signals_sent, strict=True):
        assert _landed_in(result, at)(sent), f"the signal for {at} landed elsewhere: {names}"
    if len(case.signals) == 2:
        assert any(line.startswith("interrupted again") for line in result.progress), result.progress

    # The verdict on disk, and the exit code the CLI makes of it.
    stored = json.loads(result.read("verdict.json"))
    assert stored["status"] == str(case.status), stored["reason"]
    assert stored["reason"].startswith(case.reason), stored["reason"]
    assert _cli_exit_code(result, spec, tmp_path, monkeypatch) == case.exit_code

    # The revert: once, after the inject's act ended; or never, when nothing was injected.
    if case.injected:
        assert names.count("inject") == 1 and names.count("revert") == 1, names
        done = "inject.done" if "inject.done" in names else "inject.acting"  # an act that raised
        assert names.index(done) < names.index("revert"), f"reverted before inject had finished: {names}"
        assert names.count("revert.done") == (0 if case.revert_fails else 1), names
    else:
        assert "inject" not in names and "revert" not in names, names
        assert stored["fault"] is None
        assert took < LONG_DURING_S, f"the run sat out its {LONG_DURING_S:g} s baseline"
    # The revert ended before the run did: the canary stops last, every probe is closed.
    assert names[-1] == "canary.stop" and names.count("canary.stop") == 1, names
    assert all(p.closed for p in result.probes.built)
    if case.phase in ("during", "injecting") and case.event != "exception":
        held = result.world.first("revert") - result.world.first("inject")
        assert held < LONG_DURING_S / 2, f"the fault stayed {held:.1f} s of its {LONG_DURING_S:g} s"
    journal = json.loads(result.read("journal.json"))
    expected_rollbacks = ["failed"] if case.revert_fails else (["succeeded"] if case.injected else [])
    assert [r["status"] for r in journal["rollbacks"]] == expected_rollbacks

    # The ledger: empty, or after a failed revert the entry kept until cleanup reverts it.
    if case.revert_fails:
        assert not result.world.reverted
        assert [h.fault for h in Ledger().entries()] == [FAKE_FAULT]
        assert "inferchaos cleanup" in stored["reason"]
        assert run_cleanup(monkeypatch) == 0, capsys.readouterr().err
        assert f"reverted {FAKE_FAULT}" in capsys.readouterr().out
    else:
        assert not result.world.active, "the fault is still active after the run"
    assert Ledger().is_empty(), f"ledger still holds {Ledger().entries()}"

    # The runner gives the signals back.
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
