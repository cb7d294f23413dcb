"""Shared fixtures of the report tests: copies of the recorded run folders under
tests/fixtures/runs (never rendered in place), rendered once per session, and run folders the
real Runner writes against the runner's fakes where no recording has the case."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from inferchaos.errors import FaultError
from inferchaos.layers import Layer
from inferchaos.reports.render import render_index, render_run
from inferchaos.run.controls import ControlSpec
from tests.fakes.report_runs import RUN_NAMES, copy_run
from tests.fakes.scripted_world import FaultScript, World, make_spec, run_fake_experiment


@pytest.fixture
def run_copy(tmp_path: Path) -> Callable[[str], Path]:
    """Copy a recorded run folder into this test's tmp_path."""
    return lambda name: copy_run(name, tmp_path)


@pytest.fixture(scope="session")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A reports folder holding copies of all four recorded runs, each rendered, plus index.html.

    Rendering draws every plot with matplotlib, so it is done once for the whole session.
    """
    root = tmp_path_factory.mktemp("reports")
    for name in RUN_NAMES:
        render_run(copy_run(name, root))
    render_index(root)
    return root


@pytest.fixture(scope="session")
def control_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run folder of a negative control that failed as expected: its fault is held through
    the recovery window, the canary's TTFT stays high, and triage names vllm, as it expects."""
    base = tmp_path_factory.mktemp("control")
    scenario = make_spec(base / "scenario.yaml")
    control = ControlSpec(scenario.path, scenario, "the fake platform never heals", Layer.VLLM, True, ())
    world = World(during={"canary.ttft_s": 2.0, "vllm.num_requests_waiting": 4.0})
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("INFERCHAOS_HOME", str(base / "home"))
        result = run_fake_experiment(control.run_spec(), base / "run", world=world, control=control)
    assert result.verdict.control is not None and result.verdict.control.result == "failed_as_expected"
    return result.run_dir


@pytest.fixture(scope="session")
def stuck_fault_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run folder of a run whose revert failed: the fault is still in place at its end."""
    base = tmp_path_factory.mktemp("stuck")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("INFERCHAOS_HOME", str(base / "home"))
        result = run_fake_experiment(
            make_spec(base / "stuck.yaml"),
            base / "run",
            script=FaultScript(revert_raises=FaultError("could not stop the flood")),
        )
    assert result.verdict.status == "error" and result.ledger.entries(), result.verdict.reason
    return result.run_dir
