"""Runs of the real Runner against fakes, one per scenario, shared by the runner tests.

Each scenario runs once per session (a run takes a few seconds) in its own INFERCHAOS_HOME,
so its ledger is private; the tests then assert on what the run left behind.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from inferchaos.errors import FaultError
from inferchaos.run.spec import ExperimentSpec
from tests.fakes.scripted_world import (
    EXPERIMENT_SECRET,
    LONG_DURING_S,
    RAY_TOKEN,
    STOP_CONDITION,
    FaultScript,
    RunResult,
    World,
    make_spec,
    run_fake_experiment,
)


def _run(
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    build: Callable[[Path], ExperimentSpec],
    **kwargs: object,
) -> RunResult:
    base = tmp_path_factory.mktemp(name)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("INFERCHAOS_HOME", str(base / "home"))
        return run_fake_experiment(build(base / f"{name}.yaml"), base / "run", **kwargs)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def passed_run(tmp_path_factory: pytest.TempPathFactory) -> RunResult:
    """The fault bites (the KV cache fills), every SLO holds, serving recovers.

    The experiment carries a secret, and the fault's evidence quotes it and the Ray token.
    """
    return _run(
        tmp_path_factory,
        "passed",
        lambda path: make_spec(path, secrets={"inferchaos": {"api_key": EXPERIMENT_SECRET}}),
        world=World(during={"vllm.kv_cache_usage": 0.95, "vllm.num_requests_waiting": 4.0}),
        script=FaultScript(
            reason="the KV cache filled",
            symptoms={"note": f"flood sent with key {EXPERIMENT_SECRET}", "ray": f"token={RAY_TOKEN}"},
        ),
    )


@pytest.fixture(scope="session")
def slo_failed_run(tmp_path_factory: pytest.TempPathFactory) -> RunResult:
    """The fault bites and the front door stops serving: the during SLO `availability` breaks."""
    return _run(tmp_path_factory, "slo_failed", make_spec, world=World(during={"canary.success": 0.0}))


@pytest.fixture(scope="session")
def no_bite_run(tmp_path_factory: pytest.TempPathFactory) -> RunResult:
    """The fault is injected and reverted but its evidence says it never bit."""
    return _run(
        tmp_path_factory,
        "no_bite",
        make_spec,
        script=FaultScript(bites=False, reason="no request reached replica-0"),
    )


@pytest.fixture(scope="session")
def baseline_failed_run(tmp_path_factory: pytest.TempPathFactory) -> RunResult:
    """The KV cache is already full before anything is injected."""
    return _run(
        tmp_path_factory,
        "baseline_failed",
        make_spec,
        world=World(
            baseline={
                "canary.success": 1.0,
                "canary.ttft_s": 0.1,
                "vllm.kv_cache_usage": 0.9,
                "vllm.num_requests_waiting": 0.0,
            }
        ),
    )


@pytest.fixture(scope="session")
def inject_error_run(tmp_path_factory: pytest.TempPathFactory) -> RunResult:
    """inject writes its ledger entry, acts partly, then raises FaultError."""
    return _run(
        tmp_path_factory,
        "inject_error",
        make_spec,
        script=FaultScript(inject_raises=FaultError("replica-0 vanished mid-flood")),
    )


@pytest.fixture(scope="session")
def revert_error_run(tmp_path_factory: pytest.TempPathFactory) -> RunResult:
    """The fault bites, then its revert raises FaultError (Runner.run's own error is kept)."""
    return _run(
        tmp_path_factory,
        "revert_error",
        make_spec,
        script=FaultScript(revert_raises=FaultError("could not stop the flood")),
        keep_error=True,
    )


@pytest.fixture(scope="session")
def stopped_run(tmp_path_factory: pytest.TempPathFactory) -> RunResult:
    """The front door fails every request while the fault is active; a stop condition guards it."""
    return _run(
        tmp_path_factory,
        "stopped",
        lambda path: make_spec(path, during_s=LONG_DURING_S, stop_conditions=[STOP_CONDITION]),
        world=World(during={"canary.success": 0.0}),
    )


@pytest.fixture(scope="session", params=[signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def interrupted_run(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> RunResult:
    """A signal arrives while the fault is active, well before its during time is up."""
    signum: signal.Signals = request.param
    return _run(
        tmp_path_factory,
        f"interrupted_{signum.name}",
        lambda path: make_spec(path, during_s=LONG_DURING_S),
        interrupt=signum,
    )


@pytest.fixture
def private_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private INFERCHAOS_HOME for a test that runs the runner itself."""
    home = tmp_path / "home"
    monkeypatch.setenv("INFERCHAOS_HOME", str(home))
    yield home
