"""The real Runner with `load_probe_factory`: Locust runs from before the baseline to the end.

The runner's own fakes stand in for the environment, the other probes and the fault; the
load is real Locust against a fake OpenAI server.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from inferchaos.load.locust_runner import LoadedCanary, LoadOptions, load_probe_factory
from inferchaos.primitives.env_status import EnvStatus
from inferchaos.reports.verdict_schema import Status, Verdict
from inferchaos.run.runner import Runner, RunOptions
from inferchaos.steady_state.canary import CanaryPace
from inferchaos.steady_state.probe_base import Probe
from inferchaos.steady_state.timeline import Mark, Timeline, read_timeline
from tests.fakes.openai_server import FakeBehaviour, FakeOpenAIServer
from tests.fakes.scripted_world import FakeEnv, FakeFault, FakeProbeFactory, World, make_spec


@dataclass
class ServedEnv(FakeEnv):
    """The runner's fake environment, with its front door at the fake OpenAI server."""

    front_door_url: str = ""

    def status(self) -> EnvStatus:
        status = super().status()
        status.front_door.url = self.front_door_url
        return status


@dataclass
class LoadedRun:
    verdict: Verdict
    timeline: Timeline
    load: LoadedCanary
    world: World


@pytest.fixture(scope="module")
def server() -> Iterator[FakeOpenAIServer]:
    fake = FakeOpenAIServer(FakeBehaviour(chunks=3, first_delay_s=0.02, delay_s=0.01)).start()
    yield fake
    fake.stop()


def _run(server: FakeOpenAIServer, run_dir: Path, interrupt: bool = False) -> LoadedRun:
    world = World()
    built: list[LoadedCanary] = []
    factory = load_probe_factory(
        "steady", csv_dir=run_dir / "load", options=LoadOptions(users=2), base=FakeProbeFactory(world)
    )

    def keep(env: Any, pace: CanaryPace, named: frozenset[str]) -> tuple[list[Probe], Any]:
        probes, canary = factory(env, pace, named)
        built.append(canary)
        return probes, canary

    # Each phase lasts 2 s or more: Locust writes its history once a second.
    recovery = {"within_s": 5, "hold_s": 2, "steady": ["ttft_after"]}
    spec = make_spec(run_dir.parent / "loaded.yaml", baseline_s=2.0, during_s=2.0, recovery=recovery)
    runner = Runner(
        spec,
        ServedEnv(front_door_url=server.url),
        RunOptions(interval_s=0.25, run_dir=run_dir),
        lambda message: None,
        keep,
    )
    assert isinstance(runner.fault, FakeFault)
    runner.fault.world = world
    if interrupt:
        threading.Thread(target=_interrupt_when_active, args=(world,), daemon=True).start()
    verdict = runner.run()
    return LoadedRun(verdict, read_timeline(run_dir / "timeline.csv"), built[0], world)


def _interrupt_when_active(world: World) -> None:
    deadline = time.monotonic() + 60
    while not world.active and time.monotonic() < deadline:
        time.sleep(0.02)
    if world.active and "canary.stop" not in world.names():
        os.kill(os.getpid(), signal.SIGINT)  # the runner's handler takes it while it runs


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture(scope="module")
def finished(server: FakeOpenAIServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoadedRun]:
    with pytest.MonkeyPatch.context() as mp:
        home = tmp_path_factory.mktemp("loaded-home")
        mp.setenv("INFERCHAOS_HOME", str(home))
        yield _run(server, tmp_path_factory.mktemp("loaded") / "run")


def test_load_is_sampled_in_every_phase_of_the_run(finished: LoadedRun) -> None:
    marks = finished.timeline.marks
    phases = [(Mark.BASELINE_START, Mark.INJECTED), (Mark.INJECTED, Mark.REVERTED), (Mark.REVERTED, Mark.END)]
    for start, end in phases:
        users = finished.timeline.select("load.users", start=marks[start], end=marks[end])
        assert users and all(r.value == 2 for r in users), f"{start}..{end}: {users}"
    assert any(r.value > 0 for r in finished.timeline.select("load.ttft_p95_s"))
    assert finished.verdict.status is Status.PASSED, finished.verdict.reason


def test_locust_runs_from_before_the_baseline_until_after_the_recovery(finished: LoadedRun) -> None:
    history = finished.load.load.history_path.read_text().splitlines()[1:]
    first, last = int(history[0].split(",")[0]), int(history[-1].split(",")[0])
    marks = finished.timeline.marks
    assert first <= marks[Mark.BASELINE_START]
    assert last >= int(marks[Mark.REVERTED])
    assert finished.load.load.exit_code == 0, "Locust was stopped cleanly (SIGINT)"
    assert _group_gone(finished.load.load.pid)
    assert finished.world.count("canary.start") == finished.world.count("canary.stop") == 1


def test_interrupted_run_stops_locust_too(
    server: FakeOpenAIServer, tmp_path: Path, inferchaos_home: Path
) -> None:
    run = _run(server, tmp_path / "run", interrupt=True)
    assert run.verdict.status is Status.ABORTED and "interrupted" in run.verdict.reason
    assert _group_gone(run.load.load.pid)
    assert run.world.count("canary.stop") == 1
