"""Fakes at the runner's boundaries: the environment, the probes and canary, and faults.

Nothing here starts a service. The probes read a :class:`World` that the fake fault changes:
while the fault is active they return the script's ``during`` values, after its revert the
``after`` values, before it the ``baseline`` values. A run's timeline is therefore scripted by
phase, whatever the exact timing on a loaded machine.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from inferchaos.environments.local.config import LocalEnvConfig
from inferchaos.errors import FaultError
from inferchaos.faults.base import Evidence, Fault, FaultHandle, FaultPlan
from inferchaos.faults.ledger import Ledger
from inferchaos.faults.registry import register
from inferchaos.layers import Layer
from inferchaos.primitives.capabilities import SaneBaseline
from inferchaos.primitives.env_status import EnvStatus, FrontDoorStatus, ModelStatus, RayStatus, VllmStatus
from inferchaos.reports.verdict_schema import Verdict
from inferchaos.run.controls import ControlSpec
from inferchaos.run.runner import Runner, RunOptions
from inferchaos.run.spec import ExperimentSpec, FaultStep
from inferchaos.steady_state.canary import CanaryPace
from inferchaos.steady_state.probe_base import Probe, Sample
from inferchaos.steady_state.slo import ensure_slos_are_valid

FAKE_FAULT = "test.fake_fault"
RAY_TOKEN = "ray-token-0123456789abcdef"
EXPERIMENT_SECRET = "experiment-secret-5f1e2d3c"

# Probe values per phase of the fault; anything not listed keeps its baseline value.
HEALTHY: dict[str, float] = {
    "canary.success": 1.0,
    "canary.ttft_s": 0.1,
    "vllm.kv_cache_usage": 0.1,
    "vllm.num_requests_waiting": 0.0,
}
# The local environment's range (LocalEnvironment.sane_baseline): HEALTHY is well within it.
SANE = SaneBaseline(ttft_p95_max_s=2.0)


@dataclass
class World:
    """What the fake system looks like now; the fake fault flips it, the probes read it."""

    baseline: dict[str, float] = field(default_factory=lambda: dict(HEALTHY))
    during: dict[str, float] = field(default_factory=dict)
    after: dict[str, float] = field(default_factory=dict)
    active: bool = False
    reverted: bool = False
    # Values a control's sabotage forces while it is in place; they win over every phase.
    sabotaged: dict[str, float] = field(default_factory=dict)
    # Every call the fakes see, in order, e.g. ("inject", t), ("revert", t), ("canary.start", t).
    calls: list[tuple[str, float]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, what: str) -> None:
        with self._lock:
            self.calls.append((what, time.time()))

    def names(self) -> list[str]:
        with self._lock:
            return [name for name, _ in self.calls]

    def count(self, what: str) -> int:
        return self.names().count(what)

    def first(self, what: str) -> float:
        with self._lock:
            return next(t for name, t in self.calls if name == what)

    def value(self, probe: str) -> float:
        if probe in self.sabotaged:
            return self.sabotaged[probe]
        if self.reverted:
            return self.after.get(probe, self.baseline[probe])
        if self.active:
            return self.during.get(probe, self.baseline[probe])
        return self.baseline[probe]


# -- the environment ---------------------------------------------------------------------------
@dataclass
class FakeState:
    """The recorded state of a local environment, as far as the runner reads it."""

    dashboard_url: str = "http://127.0.0.1:8265"

    def read_token(self) -> str:
        return RAY_TOKEN


@dataclass
class FakeEnv:
    """An environment named ``local`` that is up and serves; talks to nothing."""

    name: str = "local"
    up: bool = True
    front_door_healthy: bool = True
    ray_connects: int = 0
    sane_baseline: SaneBaseline = SANE

    def status(self) -> EnvStatus:
        return EnvStatus(
            env=self.name,
            up=self.up,
            ray=RayStatus(address="127.0.0.1:6379", dashboard_url="http://127.0.0.1:8265"),
            vllm=VllmStatus(),
            front_door=FrontDoorStatus(url="http://127.0.0.1:8000", healthy=self.front_door_healthy),
            model=ModelStatus(name="tiny-llama", max_model_len=2048),
        )

    def load_state(self) -> FakeState:
        return FakeState()

    def connect_ray(self) -> None:
        self.ray_connects += 1


@dataclass
class FakeRecordedState(FakeState):
    """A recorded local environment's state, as far as `inferchaos gameday` reads it."""

    ready: bool = True
    config: LocalEnvConfig = field(default_factory=LocalEnvConfig)
    ray_address: str = "127.0.0.1:6379"


class FakeLocalEnvironment:
    """The CLI's LocalEnvironment, already up: what `run` and `gameday` call on it, touching nothing.

    It offers no replica memory budgets of its own: a squat of ``host:<slot>`` plans against
    the real cgroup detection (point INFERCHAOS_CGROUP_ROOT at a fake tree or an empty folder).
    """

    name = "local"
    sane_baseline = SANE

    def __init__(self, config: LocalEnvConfig | None = None, progress: Any = None) -> None:
        self._env = FakeEnv()

    def status(self) -> EnvStatus:
        return self._env.status()

    def connect_ray(self) -> None:
        self._env.connect_ray()

    def is_recorded(self) -> bool:
        return True

    def load_state(self) -> FakeRecordedState:
        return FakeRecordedState()

    def up(self) -> EnvStatus:
        return self.status()

    def down(self) -> list[int]:
        raise AssertionError("a game day must not take down an environment it did not start")


# -- probes ------------------------------------------------------------------------------------
class FakeProbe:
    """A probe object (``name`` as the sampler knows it) reading ``readings`` from the world."""

    def __init__(
        self,
        name: str,
        layer: Layer,
        world: World,
        readings: tuple[str, ...],
        labels: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.layer = layer
        self._world = world
        self._readings = readings
        self._labels = dict(labels or {})
        self.reads = 0
        self.closed = False

    async def read(self) -> list[Sample]:
        self.reads += 1
        return [Sample(probe, self._world.value(probe), dict(self._labels)) for probe in self._readings]

    async def aclose(self) -> None:
        self.closed = True


class FakeCanary(FakeProbe):
    """The canary: a probe that must be started before the baseline and stopped at the end."""

    def __init__(self, world: World) -> None:
        super().__init__("canary", Layer.CANARY, world, ("canary.success", "canary.ttft_s"))

    async def start(self, phase_s: float = 0.0) -> None:
        self._world.record("canary.start")

    async def stop(self) -> None:
        self._world.record("canary.stop")


@dataclass
class FakeProbeFactory:
    """``probe_factory(env, canary_pace, named_replicas) -> (probes, canary)`` over one world."""

    world: World
    built: list[FakeProbe] = field(default_factory=list)
    paces: list[CanaryPace] = field(default_factory=list)
    named: list[frozenset[str]] = field(default_factory=list)

    def __call__(self, env: Any, pace: CanaryPace, named: frozenset[str]) -> tuple[list[Probe], FakeCanary]:
        self.paces.append(pace)
        self.named.append(named)
        canary = FakeCanary(self.world)
        # A world whose baseline lists vllm.healthy has the replica's server read too, which
        # brings the platform's per-replica SLOs into the run.
        health = ("vllm.healthy",) if "vllm.healthy" in self.world.baseline else ()
        vllm = FakeProbe(
            "vllm@replica-0",
            Layer.VLLM,
            self.world,
            ("vllm.kv_cache_usage", "vllm.num_requests_waiting", *health),
            {"replica": "replica-0"},
        )
        self.built = [vllm, canary]
        return [vllm, canary], canary


# -- faults ------------------------------------------------------------------------------------
@dataclass
class FaultScript:
    """How the fake fault behaves in one test."""

    bites: bool = True
    reason: str = "the fake fault bit"
    symptoms: dict[str, Any] = field(default_factory=dict)
    # Raised by inject after the ledger entry was written, or by revert before it acts.
    inject_raises: BaseException | None = None
    revert_raises: BaseException | None = None
    # Raised by evidence while the fault is active (the during read), or after its revert.
    evidence_raises: BaseException | None = None
    evidence_after_revert_raises: BaseException | None = None
    # Seconds inject spends acting, after its ledger entry is written and before the fault is active.
    inject_takes_s: float = 0.0
    # Seconds revert spends acting, after "revert" is recorded and before the fault is gone.
    revert_takes_s: float = 0.0


@register
class FakeFault(Fault):
    """A test-only fault: writes the ledger like a real one and flips the world's state.

    The runner gets its instance from the registry; a test attaches ``world`` and ``script``
    to ``runner.fault`` before it runs.
    """

    name: ClassVar[str] = FAKE_FAULT
    layer: ClassVar[Layer] = Layer.VLLM

    def __init__(self) -> None:
        self.world = World()
        self.script = FaultScript()

    def plan(self, env: Any, params: dict[str, Any]) -> FaultPlan:
        self.world.record("plan")
        return FaultPlan(self.name, self.layer, "a fake fault", ["nothing real"], dict(params))

    def inject(self, env: Any, params: dict[str, Any], ledger: Any) -> FaultHandle:
        self.world.record("inject")
        handle = FaultHandle(fault=self.name, layer=self.layer, params=dict(params), env=env.name)
        ledger.record(handle)  # before acting, as the contract says
        self.world.record("inject.acting")
        if self.script.inject_takes_s:
            time.sleep(self.script.inject_takes_s)
        if self.script.inject_raises is not None:
            self.world.active = True  # it acted partly, then failed
            raise self.script.inject_raises
        self.world.active = True
        handle.injected_at = time.time()
        ledger.record(handle)
        self.world.record("inject.done")
        return handle

    def revert(self, env: Any, handle: FaultHandle, ledger: Any) -> None:
        self.world.record("revert")
        if self.script.revert_takes_s:
            time.sleep(self.script.revert_takes_s)
        if self.script.revert_raises is not None:
            raise self.script.revert_raises
        self.world.active = False
        self.world.reverted = True
        handle.reverted_at = time.time()
        ledger.remove(handle.id)
        self.world.record("revert.done")

    def evidence(self, env: Any, handle: FaultHandle) -> Evidence:
        self.world.record("evidence")
        raises = (
            self.script.evidence_after_revert_raises if self.world.reverted else self.script.evidence_raises
        )
        if raises is not None:
            raise raises
        return Evidence(
            bit=self.script.bites,
            reason=self.script.reason,
            symptoms=dict(self.script.symptoms),
            timestamps={"injected_at": handle.injected_at or 0.0},
        )


FAKE_SABOTAGE = "test.fake_sabotage"


@register
class FakeSabotage(Fault):
    """A test-only sabotage fault: while injected it forces ``SABOTAGE_VALUES`` on the world.

    It reaches the world through ``SABOTAGED_WORLD``, set by :func:`run_fake_experiment`, because the
    runner gets a fresh instance from the registry for every inject and revert.
    """

    name: ClassVar[str] = FAKE_SABOTAGE
    layer: ClassVar[Layer] = Layer.VLLM

    def plan(self, env: Any, params: dict[str, Any]) -> FaultPlan:
        return FaultPlan(self.name, self.layer, "a fake sabotage", ["nothing real"], dict(params))

    def inject(self, env: Any, params: dict[str, Any], ledger: Any) -> FaultHandle:
        world = SABOTAGED_WORLD[0]
        handle = FaultHandle(fault=self.name, layer=self.layer, params=dict(params), env=env.name)
        ledger.record(handle)
        world.record("sabotage.inject")
        world.sabotaged.update({str(k): float(v) for k, v in params.get("values", {}).items()})
        handle.injected_at = time.time()
        ledger.record(handle)
        return handle

    def revert(self, env: Any, handle: FaultHandle, ledger: Any) -> None:
        world = SABOTAGED_WORLD[0]
        world.record("sabotage.revert")
        # ``release_fails``: the first release fails (the entry stays for `inferchaos cleanup`).
        if handle.params.get("release_fails") and not world.names().count("sabotage.revert") > 1:
            raise FaultError(f"{self.name}: could not release the sabotage")
        world.sabotaged.clear()
        ledger.remove(handle.id)

    def evidence(self, env: Any, handle: FaultHandle) -> Evidence:
        return Evidence(bit=True, reason="sabotaged")


# The world the fake sabotage acts on (one run at a time in a test process).
SABOTAGED_WORLD: list[World] = [World()]


# -- experiments -------------------------------------------------------------------------------
DEFAULT_SLOS: list[dict[str, Any]] = [
    {
        "name": "kv_headroom_before",
        "probe": "vllm.kv_cache_usage",
        "agg": "max",
        "op": "<=",
        "threshold": 0.5,
        "phase": "baseline",
    },
    {
        "name": "ttft_before",
        "probe": "canary.ttft_s",
        "agg": "p95",
        "op": "<=",
        "threshold": 0.5,
        "phase": "baseline",
    },
    {
        "name": "availability",
        "probe": "canary.success",
        "agg": "mean",
        "op": ">=",
        "threshold": 0.9,
        "phase": "during",
    },
    {
        "name": "ttft_after",
        "probe": "canary.ttft_s",
        "agg": "p95",
        "op": "<=",
        "threshold": 0.5,
        "phase": "recovery",
        "window_s": 0.5,
    },
]
# The guardrail of the stop-condition scenario: the canary must mostly succeed.
STOP_CONDITION: dict[str, Any] = {
    "name": "front_door_down",
    "probe": "canary.success",
    "op": ">=",
    "threshold": 0.5,
    "agg": "mean",
    "window_s": 1,
}
# A during phase long enough that a run which sits it out is plainly seen to.
LONG_DURING_S = 10.0
DEFAULT_RECOVERY: dict[str, Any] = {"within_s": 2, "hold_s": 0.5, "steady": ["ttft_after"]}


def make_spec(
    path: Path,
    *,
    baseline_s: float = 1.0,
    during_s: float = 1.0,
    slos: list[dict[str, Any]] | None = None,
    recovery: dict[str, Any] | None = DEFAULT_RECOVERY,
    stop_conditions: list[dict[str, Any]] | None = None,
    secrets: dict[str, Any] | None = None,
    canary_timeout_s: float = 2.0,
) -> ExperimentSpec:
    """An experiment whose one fault step is the fake fault, with short phases and a short canary
    timeout (the platform steady state holds recovery for at least one)."""
    action = {
        "type": "action",
        "name": "inject-fake-fault",
        "provider": {
            "type": "python",
            "module": "tests.fake",
            "func": "fake_fault",
            "arguments": {"size": 3},
        },
        "pauses": {"after": during_s},
    }
    raw: dict[str, Any] = {
        "version": "1.0.0",
        "title": "The fake fault under the runner",
        "description": "unit test",
        "method": [action],
        "rollbacks": [
            {
                "type": "action",
                "name": "revert-fake-fault",
                "provider": {"type": "python", "module": "tests.fake", "func": "revert_fake_fault"},
            }
        ],
        "slos": slos if slos is not None else DEFAULT_SLOS,
    }
    if recovery is not None:
        raw["recovery"] = recovery
    if secrets is not None:
        raw["secrets"] = secrets
    raw["canary"] = {"request_timeout_s": canary_timeout_s}
    slo_spec = ensure_slos_are_valid(raw, canary_timeout_s=canary_timeout_s)
    stops = ()
    if stop_conditions:
        entries = [{"agg": "last", **entry, "phase": "during"} for entry in stop_conditions]
        stops = ensure_slos_are_valid({"slos": entries}).slos
        raw["stop_conditions"] = stop_conditions
    return ExperimentSpec(
        path=path,
        name=path.stem,
        title=raw["title"],
        description=raw["description"],
        env="local",
        baseline_s=baseline_s,
        fault=FaultStep(
            0, "inject-fake-fault", "tests.fake", "fake_fault", FAKE_FAULT, {"size": 3}, during_s
        ),
        slos=slo_spec,
        stop_conditions=stops,
        raw=raw,
        canary_timeout_s=canary_timeout_s,
    )


# -- running -----------------------------------------------------------------------------------
INTERVAL_S = 0.25


@dataclass
class RunResult:
    """What one runner run left behind."""

    outcome: Verdict | None
    run_dir: Path
    world: World
    env: FakeEnv
    ledger: Ledger
    probes: FakeProbeFactory
    progress: list[str]
    interrupted_at: float | None = None
    # What Runner.run raised instead of returning a verdict (only with ``keep_error``).
    error: Exception | None = None
    # When each signal of ``signals`` was sent.
    signals_sent: list[float] = field(default_factory=list)

    @property
    def verdict(self) -> Verdict:
        if self.outcome is None:
            raise AssertionError(f"the run returned no verdict; Runner.run raised {self.error!r}")
        return self.outcome

    def read(self, name: str) -> str:
        return (self.run_dir / name).read_text()


def wait_for(condition: Any, timeout_s: float, what: str) -> None:
    """Poll ``condition()`` until true; fail naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.02)


InterruptAt = Literal["baseline", "injecting", "during", "reverting", "recovery", "sabotaged"]


def _phase_reached(world: World, at: InterruptAt) -> tuple[Callable[[], bool], float]:
    """When the run is in phase ``at``, and how long to let it settle there before signalling.

    "injecting" needs ``inject_takes_s``, "reverting" ``revert_takes_s`` (the signal lands while
    the act or the revert is under way); "recovery" needs a recovery window that does not close
    within a few tenths of a second.
    """
    if at == "baseline":
        return (lambda: "canary.start" in world.names()), 0.3
    if at == "injecting":
        return (lambda: "inject.acting" in world.names()), 0.1
    if at == "during":
        return (lambda: world.active), 0.3  # into the during phase proper
    if at == "reverting":
        return (lambda: "revert" in world.names()), 0.1
    if at == "sabotaged":
        return (lambda: "sabotage.inject" in world.names()), 0.1  # a control's break just went in
    return (lambda: "revert.done" in world.names()), 0.3


def _interrupt(
    world: World, signals: list[tuple[signal.Signals, InterruptAt]], done: threading.Event, sent: list[float]
) -> None:
    """Signal this process at points of the run, in order (see :func:`_phase_reached`)."""
    for signum, at in signals:
        condition, settle_s = _phase_reached(world, at)
        try:
            wait_for(lambda c=condition: c() or done.is_set(), 60.0, f"the run to reach {at}")
        except AssertionError:
            return
        if done.is_set():
            return  # the run ended first; the test's asserts say so
        time.sleep(settle_s)
        # The runner's signal handlers live until it stops the canary; later, a signal would hit pytest.
        if "canary.stop" in world.names():
            return
        sent.append(time.time())
        os.kill(os.getpid(), signum)


def run_fake_experiment(
    spec: ExperimentSpec,
    run_dir: Path,
    *,
    world: World | None = None,
    script: FaultScript | None = None,
    interrupt: signal.Signals | None = None,
    interrupt_at: InterruptAt = "during",
    signals: list[tuple[signal.Signals, InterruptAt]] | None = None,
    env: FakeEnv | None = None,
    keep_error: bool = False,
    progress_raises: tuple[str, BaseException] | None = None,
    control: ControlSpec | None = None,
    fail_fast: bool = False,
) -> RunResult:
    """Run ``spec`` through the real Runner with fake probes, canary, environment and fault.

    With ``interrupt`` the signal is sent to this process at ``interrupt_at`` (from a thread);
    ``signals`` sends several, in order, each once its phase is reached.
    With ``keep_error`` an exception from Runner.run is kept in the result instead of raised.
    With ``progress_raises=(prefix, error)`` the progress callback raises ``error`` on the first
    line that starts with ``prefix`` (as a broken display would), e.g. a tick's "baseline" line.
    INFERCHAOS_HOME must already point at a private folder: the runner opens the default ledger.
    """
    world = world or World()
    env = env or FakeEnv()
    factory = FakeProbeFactory(world)
    progress: list[str] = []

    def report(line: str) -> None:
        progress.append(line)
        if progress_raises is not None and line.startswith(progress_raises[0]) and not raised:
            raised.append(line)
            raise progress_raises[1]

    raised: list[str] = []

    SABOTAGED_WORLD[0] = world
    options = RunOptions(interval_s=INTERVAL_S, run_dir=run_dir, control=control, fail_fast=fail_fast)
    runner = Runner(spec, env, options, report, factory)
    assert isinstance(runner.fault, FakeFault), (
        f"registry gave {type(runner.fault).__name__} for {FAKE_FAULT}"
    )
    runner.fault.world = world
    runner.fault.script = script or FaultScript()
    sent: list[float] = []
    done = threading.Event()
    interrupter = None
    to_send = list(signals or []) + ([(interrupt, interrupt_at)] if interrupt is not None else [])
    if to_send:
        interrupter = threading.Thread(target=_interrupt, args=(world, to_send, done, sent), daemon=True)
        interrupter.start()
    verdict: Verdict | None = None
    error: Exception | None = None
    try:
        verdict = runner.run()
    except Exception as e:  # kept for the test to judge, re-raised otherwise
        if not keep_error:
            raise
        error = e
    finally:
        done.set()
        if interrupter is not None:
            interrupter.join(timeout=30)
    return RunResult(
        verdict, run_dir, world, env, runner.ledger, factory, progress, sent[0] if sent else None, error, sent
    )


# -- `inferchaos cleanup` ------------------------------------------------------------------------
class RecordedLocalEnvironment:
    """The CLI's LocalEnvironment for cleanup: recorded (up), so entries are reverted, not dropped."""

    name = "local"

    def is_recorded(self) -> bool:
        return True


def run_cleanup(monkeypatch: Any) -> int:
    """Run `inferchaos cleanup` in-process against the ledger of INFERCHAOS_HOME; its exit code."""
    from inferchaos.cli import cleanup as cli_cleanup
    from inferchaos.cli import main as cli

    monkeypatch.setattr(cli_cleanup, "LocalEnvironment", RecordedLocalEnvironment)
    monkeypatch.setattr("sys.argv", ["inferchaos", "cleanup"])
    try:
        cli.main()
    except SystemExit as e:
        return int(e.code or 0)
    return 0
