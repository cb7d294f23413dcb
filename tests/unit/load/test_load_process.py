"""LocustLoad, stop_process_group and load_probe_factory: Locust as its own process group."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from inferchaos.errors import ConfigError
from inferchaos.layers import Layer
from inferchaos.load import locust_runner as load_module
from inferchaos.load.locust_runner import (
    LoadedCanary,
    LoadError,
    LoadOptions,
    LoadProbe,
    LocustLoad,
    load_probe_factory,
    stop_process_group,
)
from inferchaos.primitives.processes import spawn_process_group
from inferchaos.steady_state.canary import CanaryPace
from inferchaos.steady_state.probe_base import Probe, Sample
from inferchaos.steady_state.sampler import Sampler
from inferchaos.steady_state.timeline import Timeline
from tests.fakes.openai_server import FAKE_MODEL, FakeBehaviour, FakeOpenAIServer

BOUND_S = 30.0


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def _locust_processes(marker: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if "locust" in cmdline and marker in cmdline and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(proc)
    return found


async def _until(predicate: Any, what: str, timeout_s: float = BOUND_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not await predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} within {timeout_s:g} s")
        await asyncio.sleep(0.2)


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    fake = FakeOpenAIServer(FakeBehaviour(chunks=4, first_delay_s=0.03, delay_s=0.01)).start()
    yield fake
    fake.stop()


def test_stopping_locust_leaves_no_process_of_its_group(server: FakeOpenAIServer, tmp_path: Path) -> None:
    load = LocustLoad(server.url, tmp_path / "locust", LoadOptions(users=2, spawn_rate=2))
    load.start()
    try:
        assert load.running and server.behaviour.completions > 0
        assert os.getpgid(load.pid) == load.pid, "Locust leads its own process group"
    finally:
        code = load.stop()
    assert code == 0
    assert not load.running
    assert _group_gone(load.pid)
    assert not _locust_processes(str(tmp_path))


def test_locust_runs_the_packaged_locustfile_in_the_run_folder(
    server: FakeOpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inferchaos_home: Path
) -> None:
    # A relative run folder, as `--out runs` gives: Locust's own directory must not change where it is.
    monkeypatch.chdir(tmp_path)
    load = LocustLoad(server.url, Path("runs/kv_flood/load/locust"), LoadOptions(users=1, spawn_rate=1))
    run_folder = tmp_path / "runs" / "kv_flood" / "load"
    load.start()
    try:
        assert load.pid is not None
        locust = psutil.Process(load.pid)
        assert Path(locust.cwd()) == run_folder
        argv = locust.cmdline()
        installed = Path(load_module.__file__).resolve().with_name("locustfile.py")
        assert Path(argv[argv.index("-f") + 1]) == installed
        assert locust.environ()["INFERCHAOS_HOME"] == str(inferchaos_home.resolve())
    finally:
        load.stop()
    assert (run_folder / "locust_stats_history.csv").is_file()
    # Everything Locust wrote is in the run folder, under the prefix it was given.
    assert [p.name for p in tmp_path.iterdir()] == ["runs"]
    assert all(p.name.startswith("locust_") for p in run_folder.iterdir()), sorted(run_folder.iterdir())


def test_stop_escalates_to_sigkill_within_its_bound(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    stubborn = (
        "import signal, subprocess, sys, time, pathlib;"
        "signal.signal(signal.SIGINT, signal.SIG_IGN); signal.signal(signal.SIGTERM, signal.SIG_IGN);"
        "subprocess.Popen([sys.executable, '-c', 'import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN);"
        " signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)']);"
        f"pathlib.Path({str(ready)!r}).write_text('x'); time.sleep(120)"
    )
    pid = spawn_process_group([sys.executable, "-c", stubborn], dict(os.environ), tmp_path / "stubborn.log")
    deadline = time.monotonic() + BOUND_S
    while not ready.exists():
        assert time.monotonic() < deadline, "the stubborn process never got ready"
        time.sleep(0.05)
    began = time.monotonic()
    stop_process_group(pid, grace_s=0.5)
    assert time.monotonic() - began < 0.5 + 0.25 + 5.0 + 1.0
    assert _group_gone(pid), "the grandchild in the group was killed too"


def test_locust_that_cannot_start_is_an_error_and_leaves_nothing(tmp_path: Path) -> None:
    # argparse takes the last value: Locust itself refuses this profile and exits.
    load = LocustLoad(
        "http://127.0.0.1:9", tmp_path / "locust", LoadOptions(extra_args=("--load-profile", "surge"))
    )
    with pytest.raises(LoadError, match=r"exited with code 2(.|\n)*invalid choice"):
        load.start()
    assert LoadError.exit_code == 2
    assert _group_gone(load.pid)


def test_unknown_profile_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="surge"):
        LoadOptions(profile="surge")


@dataclass
class FakeCanaryConfig:
    base_url: str
    model: str


class FakeCanary:
    name = "canary"
    layer = Layer.CANARY

    def __init__(self, base_url: str) -> None:
        self.config = FakeCanaryConfig(base_url, FAKE_MODEL)
        self.started = self.stopped = 0

    async def start(self, phase_s: float = 0.0) -> None:
        self.started += 1

    async def stop(self) -> None:
        self.stopped += 1

    async def read(self) -> list[Sample]:
        return [Sample("canary.success", 1.0)]


async def test_runner_factory_samples_load_between_canary_start_and_stop(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    fake_canary = FakeCanary(server.url)

    def base(env: Any, pace: CanaryPace, named: frozenset[str]) -> tuple[list[Probe], Any]:
        return [fake_canary], fake_canary

    factory = load_probe_factory("steady", csv_dir=tmp_path / "load", options=LoadOptions(users=2), base=base)
    probes, canary = factory(object(), CanaryPace(), frozenset())
    assert isinstance(canary, LoadedCanary)
    assert [p.name for p in probes] == ["canary", "load"]
    assert isinstance(probes[1], LoadProbe)
    timeline = Timeline()
    sampler = Sampler(probes, timeline, interval_s=0.5)
    await canary.start()
    try:
        assert fake_canary.started == 1
        assert set(server.behaviour.models_seen) == {FAKE_MODEL}, "the canary's model is requested"

        async def load_sampled() -> bool:
            await sampler.tick()
            return any(r.probe == "load.rps" and r.value > 0 for r in timeline.rows)

        await _until(load_sampled, "no load.rps > 0 was sampled")
    finally:
        await canary.stop()
    assert fake_canary.stopped == 1
    assert _group_gone(canary.load.pid)
    assert (tmp_path / "load" / "locust_stats_history.csv").exists()
    assert any(r.probe == "load.ttft_p95_s" and r.value >= 0.03 for r in timeline.rows)


async def test_canary_is_not_started_when_locust_cannot_start(tmp_path: Path) -> None:
    fake_canary = FakeCanary("http://127.0.0.1:9")
    options = LoadOptions(extra_args=("--load-profile", "surge"))
    factory = load_probe_factory(
        "steady", tmp_path, options, base=lambda env, pace, named: ([fake_canary], fake_canary)
    )
    _, canary = factory(object(), CanaryPace(), frozenset())
    with pytest.raises(LoadError):
        await canary.start()
    assert (fake_canary.started, fake_canary.stopped) == (0, 0)
