"""ray.kill_serve_controller's own logic, without Ray: parameters, plan refusals, evidence, revert.

Ray is never started here. What the fault reads from Ray's state API goes through one function
of its own, ``read_controllers``; the tests that need it replace that function with a script
built from Ray's real ``ActorState`` records (the Serve controller ALIVE, then RESTARTING, then
ALIVE in a new process). The "controller" killed is a stand-in process titled
``ray::ServeController``, and the front door a fake OpenAI server. That the real controller dies,
comes back and leaves the data plane serving is the integration test's
(tests/integration/test_serve_controller.py).
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest
from ray.util.state.common import ActorState

from inferchaos.errors import ConfigError, EnvironmentError_, PlatformDidNotRecover
from inferchaos.faults.base import FaultHandle, wait_until
from inferchaos.faults.ledger import Ledger
from inferchaos.faults.ray import serve_controller
from inferchaos.faults.ray.serve_controller import (
    ControllerSighting,
    KillServeController,
    controller_evidence,
    is_back,
    is_controller_title,
    sightings,
)
from inferchaos.faults.registry import get_fault
from inferchaos.layers import Layer
from inferchaos.primitives.env_status import (
    EnvStatus,
    FrontDoorStatus,
    ModelStatus,
    NodeStatus,
    RayStatus,
    VllmStatus,
)
from inferchaos.primitives.processes import pid_alive
from tests.fakes.openai_server import FAKE_MODEL, FakeOpenAIServer

NAME = "ray.kill_serve_controller"
ACTOR_ID = "c" * 32
HEAD = "h" * 56
NEW_PID = 4_194_000  # above every pid a stand-in can get here: never a live process
NO_SUCH_PID = 4_194_305  # above the kernel's largest pid_max (2**22)


def actor(pid: int, state: str = "ALIVE", restarts: int | None = 0, **overrides: Any) -> ActorState:
    """Ray's own record of an actor, as ``list_actors(detail=True)`` returns it."""
    fields: dict[str, Any] = dict(
        actor_id=ACTOR_ID,
        class_name="ServeController",
        state=state,
        job_id="01000000",
        name="SERVE_CONTROLLER_ACTOR",
        node_id=HEAD,
        pid=pid,
        ray_namespace="serve",
    )
    if restarts is not None:
        # A read without detail=True leaves it out (Ray refuses an explicit None).
        fields["num_restarts"] = restarts
    fields.update(overrides)
    return ActorState(**fields)


@dataclass
class FakeServeEnv:
    """Satisfies ServeProcessEnvironment with a status naming a front door; nothing else is used."""

    front_door_url: str = "http://127.0.0.1:1"
    name: str = "fake-local"
    connects: int = 0

    def status(self) -> EnvStatus:
        return EnvStatus(
            env=self.name,
            up=True,
            ray=RayStatus("", "http://127.0.0.1:1", [NodeStatus(HEAD, True, True, 0, 1, "head")]),
            vllm=VllmStatus(),
            front_door=FrontDoorStatus(self.front_door_url, True),
            model=ModelStatus(FAKE_MODEL, 2048),
        )

    def connect_ray(self) -> None:
        self.connects += 1

    def load_state(self) -> Any:
        raise AssertionError("this fault needs no process records")

    def ray_nodes(self) -> list[Any]:
        raise AssertionError("this fault reads nodes from status()")

    def replica_records(self) -> list[Any]:
        raise AssertionError("this fault needs no replica records")

    def add_worker(self) -> Any:
        raise AssertionError("this fault starts nothing")

    def mark_node_lost(self, name: str) -> None:
        raise AssertionError("this fault loses no node")


@dataclass
class ScriptedStateApi:
    """Stands in for ``read_controllers`` (the fault's wrapper of Ray's state API), scripted on the stand-in.

    While the stand-in lives, the controller is ALIVE in it. Once it is gone, Ray shows the actor
    RESTARTING for ``down_reads`` reads, then ALIVE in a new process (never, with None).
    """

    pid: int
    down_reads: int | None = 2
    others: list[ActorState] = field(default_factory=list)
    reads_after_death: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, dashboard_url: str, timeout_s: int = 5) -> list[ControllerSighting]:
        with self._lock:
            if pid_alive(self.pid):
                records = [actor(self.pid)]
            else:
                self.reads_after_death += 1
                back = self.down_reads is not None and self.reads_after_death > self.down_reads
                records = [actor(NEW_PID, "ALIVE", 1) if back else actor(self.pid, "RESTARTING", 0)]
        return sightings([*self.others, *records])


def start_stand_in() -> subprocess.Popen[bytes]:
    """A process titled as Ray titles the controller's worker (``ray::ServeController``)."""
    proc = subprocess.Popen(["bash", "-c", "exec -a ray::ServeController sleep 60"])
    titled = wait_until(lambda: psutil.Process(proc.pid).cmdline()[:1] == ["ray::ServeController"], 10, 0.01)
    assert titled, psutil.Process(proc.pid).cmdline()
    return proc


@pytest.fixture
def stand_in() -> Iterator[subprocess.Popen[bytes]]:
    proc = start_stand_in()
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=10)


@pytest.fixture
def front_door() -> Iterator[FakeOpenAIServer]:
    server = FakeOpenAIServer().start()
    yield server
    server.stop()


def _script(monkeypatch: pytest.MonkeyPatch, api: Any) -> None:
    monkeypatch.setattr(serve_controller, "read_controllers", api)


# -- parameters -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"recover_timeout_s": 0}, f"{NAME}: recover_timeout_s: must be more than 0 seconds, got 0"),
        ({"recover_timeout_s": -5}, f"{NAME}: recover_timeout_s: must be more than 0 seconds, got -5"),
        (
            {"recover_timeout_s": float("nan")},
            f"{NAME}: parameter 'recover_timeout_s' must be a finite number, got nan",
        ),
        (
            {"recover_timeout_s": float("inf")},
            f"{NAME}: parameter 'recover_timeout_s' must be a finite number, got inf",
        ),
        ({"recover_timeout_s": "60"}, f"{NAME}: parameter 'recover_timeout_s' must be float, got '60'"),
        ({"recover_timeout_s": True}, f"{NAME}: parameter 'recover_timeout_s' must be float, got True"),
        ({"timeout": 5}, f"{NAME}: unknown parameter(s) timeout; known: recover_timeout_s, keep_down"),
    ],
)
def test_plan_refuses_bad_parameters_before_ray_is_read(params: dict[str, Any], message: str) -> None:
    env = FakeServeEnv()
    with pytest.raises(ConfigError) as raised:
        KillServeController().plan(env, params)
    assert str(raised.value) == message
    assert raised.value.exit_code == 2
    assert env.connects == 0


def test_the_default_recovery_budget_and_a_whole_number_are_accepted() -> None:
    fault = KillServeController()
    assert fault.parse({}).recover_timeout_s == 60.0
    assert fault.parse({"recover_timeout_s": 5}).recover_timeout_s == 5


# -- plan -------------------------------------------------------------------------------------


def test_plan_reports_a_state_api_that_does_not_answer_as_an_environment_error() -> None:
    # Ray's real state-API client, at a port where nothing listens: nothing is injected, exit 2.
    with pytest.raises(
        EnvironmentError_, match=r"^Ray's state API at http://127.0.0.1:1 did not list"
    ) as raised:
        KillServeController().plan(FakeServeEnv(), {})
    assert raised.value.exit_code == 2


def test_plan_refuses_when_serve_has_no_controller(monkeypatch: pytest.MonkeyPatch) -> None:
    _script(monkeypatch, lambda url, timeout_s=5: [])
    with pytest.raises(ConfigError, match=rf"^{NAME}: no ALIVE Serve controller .* is Serve running\?$"):
        KillServeController().plan(FakeServeEnv(), {})


def test_plan_refuses_a_controller_that_is_not_alive_saying_what_it_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A controller still RESTARTING after an earlier kill is not there to kill again.
    _script(monkeypatch, lambda url, timeout_s=5: sightings([actor(123, "RESTARTING")]))
    with pytest.raises(ConfigError, match=rf"is Serve running\? \(seen: {ACTOR_ID[:12]} RESTARTING\)$"):
        KillServeController().plan(FakeServeEnv(), {})


def test_plan_refuses_a_controller_pid_that_is_not_on_this_host(monkeypatch: pytest.MonkeyPatch) -> None:
    _script(monkeypatch, lambda url, timeout_s=5: sightings([actor(NO_SUCH_PID)]))
    with pytest.raises(ConfigError, match=f"pid {NO_SUCH_PID} is not a process of this host"):
        KillServeController().plan(FakeServeEnv(), {})


def test_plan_refuses_a_pid_that_runs_something_else(monkeypatch: pytest.MonkeyPatch) -> None:
    # What the state API says is never enough to SIGKILL a pid: its title must be the controller's.
    here = psutil.Process()
    _script(monkeypatch, lambda url, timeout_s=5: sightings([actor(here.pid)]))
    with pytest.raises(ConfigError, match=f"pid {here.pid} runs .*, not Ray's ray::ServeController worker"):
        KillServeController().plan(FakeServeEnv(), {})


def test_plan_names_the_actor_and_pid_and_kills_nothing(
    monkeypatch: pytest.MonkeyPatch, stand_in: subprocess.Popen[bytes]
) -> None:
    # An application's own actor of a class called ServeController is not Serve's.
    theirs = actor(NO_SUCH_PID, actor_id="d" * 32, name="mine", ray_namespace="app")
    _script(monkeypatch, ScriptedStateApi(stand_in.pid, others=[theirs]))
    plan = KillServeController().plan(FakeServeEnv(), {"recover_timeout_s": 30})
    assert plan.targets == [f"ray-actor:ServeController:{ACTOR_ID}", f"pid:{stand_in.pid}"]
    assert f"pid {stand_in.pid}, ray::ServeController" in plan.description
    assert "on node head, restarted 0 times so far" in plan.description
    assert "up to 30 s from the kill" in plan.description
    assert stand_in.poll() is None


# -- pure reads -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("title", "is_it"),
    [
        ("ray::ServeController", True),
        ("ray::ServeController.listen_for_change", True),
        ("ray::IDLE", False),
        ("ServeController", False),
        ("python -m ray.serve", False),
        ("", False),
    ],
)
def test_only_a_ray_worker_titled_for_the_controller_is_one(title: str, is_it: bool) -> None:
    assert is_controller_title(title) is is_it


def test_sightings_keep_only_serves_named_controller_and_its_restart_count() -> None:
    records = [
        actor(11, actor_id="d" * 32, name="mine"),
        actor(12, actor_id="e" * 32, ray_namespace="app"),
        actor(13, actor_id="f" * 32, class_name="ProxyActor", name="SERVE_CONTROLLER_ACTOR"),
        actor(14, "DEAD", None),
        actor(15, "ALIVE", 2),
    ]
    assert sightings(records) == [
        ControllerSighting(ACTOR_ID, "DEAD", 14, HEAD, None),
        ControllerSighting(ACTOR_ID, "ALIVE", 15, HEAD, 2),
    ]


def test_back_means_alive_in_another_process() -> None:
    assert is_back({10}, ControllerSighting(ACTOR_ID, "ALIVE", 11, HEAD, 1))
    assert not is_back(
        {10}, ControllerSighting(ACTOR_ID, "ALIVE", 10, HEAD, 0)
    )  # the raylet has not noticed yet
    assert not is_back({10}, ControllerSighting(ACTOR_ID, "RESTARTING", 10, HEAD, 0))
    assert not is_back({10}, ControllerSighting(ACTOR_ID, "ALIVE", 0, HEAD, 1))
    assert not is_back({10}, None)


# -- evidence from a handle's state -----------------------------------------------------------

KILLED_AT = 1000.0


def _state(**extra: Any) -> dict[str, Any]:
    return {
        "actor_id": ACTOR_ID,
        "pid": 10,
        "create_time": 1.0,
        "num_restarts": 0,
        "killed_at": KILLED_AT,
        "pid_gone_at": KILLED_AT + 0.1,
        **extra,
    }


OUTAGE = {
    "sent": 6,
    "served": 5,
    "failed": 1,
    "served_by": {"replica-0": 3, "replica-1": 2},
    "errors": ["HTTP 503: busy"],
    "last_state": "ALIVE",
    "read_errors": 0,
    "last_read_error": "",
    "back_at": KILLED_AT + 3.2,
    "timed_out": False,
    "after": {"actor_id": ACTOR_ID, "state": "ALIVE", "pid": 11, "node_id": HEAD, "num_restarts": 1},
}
BACK_NOW = ControllerSighting(ACTOR_ID, "ALIVE", 11, HEAD, 1)


def test_evidence_of_a_kill_the_watcher_saw_recover_while_the_front_door_served() -> None:
    evidence = controller_evidence(_state(), OUTAGE, BACK_NOW, "", True, KILLED_AT, None)
    assert evidence.bit
    s = evidence.symptoms
    assert (s["controller_actor_id_before"], s["controller_actor_id_after"], s["same_actor"]) == (
        ACTOR_ID,
        ACTOR_ID,
        True,
    )
    assert (s["controller_pid_before"], s["controller_pid_after"]) == (10, 11)
    assert (s["num_restarts_before"], s["num_restarts_after"]) == (0, 1)
    assert (s["controller_back"], s["back_after_s"], s["back_seen_by"]) == (True, 3.2, "watcher")
    assert (s["front_door_requests_during_outage"], s["front_door_served_during_outage"]) == (6, 5)
    assert s["front_door_served_by"] == {"replica-0": 3, "replica-1": 2}
    assert evidence.timestamps == {
        "injected_at": KILLED_AT,
        "pid_gone_at": KILLED_AT + 0.1,
        "controller_back_at": KILLED_AT + 3.2,
    }
    assert evidence.reason == (
        "the Serve controller's process 10 died; Ray restarted it as pid 11 after 3.2 s; "
        "the front door served 5 of 6 requests sent meanwhile"
    )


def test_evidence_while_the_controller_is_still_down() -> None:
    down = {**OUTAGE, "back_at": None, "after": None, "last_state": "RESTARTING"}
    now = ControllerSighting(ACTOR_ID, "RESTARTING", 10, HEAD, 0)
    evidence = controller_evidence(_state(), down, now, "", True, KILLED_AT, None)
    assert evidence.bit
    assert evidence.symptoms["controller_back"] is False
    assert evidence.symptoms["back_after_s"] is None and evidence.symptoms["controller_pid_after"] is None
    assert "it is not back yet (state RESTARTING)" in evidence.reason


def test_evidence_of_a_return_seen_only_by_a_later_revert_says_it_is_an_upper_bound() -> None:
    after = {"actor_id": ACTOR_ID, "state": "ALIVE", "pid": 11, "node_id": HEAD, "num_restarts": 1}
    state = _state(back_at=KILLED_AT + 40, back_seen_by="revert", controller_after=after)
    evidence = controller_evidence(state, None, BACK_NOW, "", True, KILLED_AT, KILLED_AT + 40)
    assert evidence.symptoms["back_seen_by"] == "revert" and evidence.symptoms["back_after_s"] == 40
    assert evidence.symptoms["front_door_requests_during_outage"] is None
    assert evidence.reason == (
        "the Serve controller's process 10 died; Ray restarted it as pid 11 after 40 s (at most: seen by revert)"
    )


def test_evidence_says_the_kill_did_not_bite_when_the_process_still_runs() -> None:
    state = _state(pid_gone_at=None)
    alive = ControllerSighting(ACTOR_ID, "ALIVE", 10, HEAD, 0)
    evidence = controller_evidence(state, None, alive, "", False, KILLED_AT, None)
    assert not evidence.bit
    assert (
        evidence.reason
        == "the Serve controller's process 10 still runs after SIGKILL and Ray shows no restart"
    )


def test_evidence_of_an_injection_that_never_killed() -> None:
    state = _state(pid_gone_at=None)
    del state["killed_at"]
    evidence = controller_evidence(state, None, None, "state API down", False, None, None)
    assert not evidence.bit
    assert evidence.symptoms["controller_state_now"] == "unknown"
    assert "was never killed" in evidence.reason


# -- inject and revert on a stand-in ----------------------------------------------------------


def test_inject_kills_the_recorded_process_counts_front_door_requests_and_revert_sees_it_back(
    monkeypatch: pytest.MonkeyPatch,
    stand_in: subprocess.Popen[bytes],
    front_door: FakeOpenAIServer,
    tmp_path: Path,
) -> None:
    api = ScriptedStateApi(stand_in.pid, down_reads=4)
    _script(monkeypatch, api)
    env = FakeServeEnv(front_door.url)
    ledger = Ledger(tmp_path / "ledger")
    fault = get_fault(NAME)
    handle = fault.inject(env, {"recover_timeout_s": 20}, ledger)
    assert stand_in.wait(timeout=5) == -9  # SIGKILL, as a crash
    (recorded,) = Ledger(tmp_path / "ledger").entries()
    assert recorded.state["killed_at"] == handle.injected_at and recorded.state["pid_gone_at"]
    assert fault.evidence(env, handle).bit

    fault.revert(env, handle, ledger)
    assert ledger.is_empty()
    after = fault.evidence(env, handle)
    print("stand-in evidence:", after)
    s = after.symptoms
    assert s["controller_back"] and s["back_seen_by"] == "watcher" and s["controller_pid_after"] == NEW_PID
    assert s["front_door_requests_during_outage"] >= 1
    assert s["front_door_served_during_outage"] == s["front_door_requests_during_outage"]
    assert 0 < s["back_after_s"] < 20
    fault.revert(env, handle, ledger)  # idempotent


def test_revert_raises_and_keeps_the_entry_when_the_controller_never_comes_back(
    monkeypatch: pytest.MonkeyPatch, stand_in: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    _script(monkeypatch, ScriptedStateApi(stand_in.pid, down_reads=None))
    env = FakeServeEnv()  # nothing listens at its front door: the outage's requests all fail
    ledger = Ledger(tmp_path / "ledger")
    fault = get_fault(NAME)
    handle = fault.inject(env, {"recover_timeout_s": 1}, ledger)
    with pytest.raises(
        PlatformDidNotRecover,
        match=rf"^{NAME}: Serve's controller was not ALIVE in a new process within 1 s of the kill "
        r"\(last seen: RESTARTING\)",
    ):
        fault.revert(env, handle, ledger)
    (kept,) = ledger.entries()
    assert kept.state["outage"]["timed_out"] and kept.state["outage"]["served"] == 0
    assert not fault.evidence(env, handle).symptoms["controller_back"]


def test_revert_from_the_ledger_alone_waits_for_the_controller_and_says_who_saw_it(
    monkeypatch: pytest.MonkeyPatch, stand_in: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    # What a crashed injector left: the kill recorded, no watcher in this process.
    stand_in.kill()
    stand_in.wait(timeout=5)
    _script(monkeypatch, ScriptedStateApi(stand_in.pid, down_reads=2))
    handle = FaultHandle(
        NAME,
        Layer.RAY,
        {"recover_timeout_s": 10},
        "fake-local",
        state={
            "actor_id": ACTOR_ID,
            "pid": stand_in.pid,
            "create_time": 1.0,
            "num_restarts": 0,
            "dashboard_url": "http://127.0.0.1:1",
        },
    )
    handle.state["killed_at"] = handle.created_at
    ledger = Ledger(tmp_path / "ledger")
    ledger.record(handle)
    (from_disk,) = Ledger(tmp_path / "ledger").entries()
    env = FakeServeEnv()
    get_fault(from_disk.fault).revert(env, from_disk, ledger)
    assert ledger.is_empty()
    assert from_disk.state["back_seen_by"] == "revert"
    assert from_disk.state["controller_after"]["pid"] == NEW_PID
    assert env.connects >= 1


def test_revert_of_an_entry_whose_kill_never_happened_waits_for_nothing(
    monkeypatch: pytest.MonkeyPatch, stand_in: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    _script(monkeypatch, ScriptedStateApi(stand_in.pid, down_reads=None))
    created = psutil.Process(stand_in.pid).create_time()
    handle = FaultHandle(
        NAME,
        Layer.RAY,
        {"recover_timeout_s": 30},
        "fake-local",
        state={
            "actor_id": ACTOR_ID,
            "pid": stand_in.pid,
            "create_time": created,
            "num_restarts": 0,
            "dashboard_url": "http://127.0.0.1:1",
        },
    )
    ledger = Ledger(tmp_path / "ledger")
    ledger.record(handle)
    get_fault(NAME).revert(FakeServeEnv(), handle, ledger)
    assert ledger.is_empty() and handle.state["not_killed"]
    assert stand_in.poll() is None


def test_the_chaos_toolkit_action_and_rollback_are_generated() -> None:
    import inspect

    from inferchaos.ctk import ray_actions as actions

    assert {"kill_serve_controller", "rollback_kill_serve_controller"} <= set(actions.__all__)
    assert list(inspect.signature(actions.kill_serve_controller).parameters) == [
        "recover_timeout_s",
        "keep_down",
        "configuration",
        "secrets",
    ]


@dataclass
class CrashLoopStateApi:
    """Ray restarting the controller into each of ``restarts`` in turn, as the state API shows it.

    The controller is ALIVE in the first of ``incarnations`` still running. Once all have died,
    the fault's own crash loop (its watcher thread) sees it RESTARTING; any other reader (the
    revert, after the loop stopped) sees it ALIVE in ``last``: Ray bringing it back for good.
    """

    incarnations: list[subprocess.Popen[bytes]]
    last: subprocess.Popen[bytes]

    def __call__(self, dashboard_url: str, timeout_s: int = 5) -> list[ControllerSighting]:
        running = [p for p in self.incarnations if pid_alive(p.pid)]
        if running:
            return sightings([actor(running[0].pid, "ALIVE", len(self.incarnations) - len(running))])
        if threading.current_thread().name.startswith("serve-controller-watch-"):
            return sightings([actor(self.incarnations[-1].pid, "RESTARTING", len(self.incarnations))])
        return sightings([actor(self.last.pid, "ALIVE", len(self.incarnations))])


def test_keep_down_kills_each_controller_ray_brings_back_until_revert_which_then_waits_for_it(
    monkeypatch: pytest.MonkeyPatch, front_door: FakeOpenAIServer, tmp_path: Path
) -> None:
    first, restarted, last = start_stand_in(), start_stand_in(), start_stand_in()
    try:
        _script(monkeypatch, CrashLoopStateApi([first, restarted], last))
        env = FakeServeEnv(front_door.url)
        ledger = Ledger(tmp_path / "ledger")
        fault = get_fault(NAME)
        handle = fault.inject(env, {"recover_timeout_s": 10, "keep_down": True}, ledger)
        assert first.wait(timeout=5) == -9
        # Ray's restart is killed too: the control plane stays down while the fault holds.
        assert restarted.wait(timeout=10) == -9
        held = fault.evidence(env, handle)
        assert held.bit and not held.symptoms["controller_back"]
        assert held.symptoms["kept_down_by_killing"] == 1
        assert "kept down by killing it 1 more time(s)" in held.reason

        fault.revert(env, handle, ledger)
        assert ledger.is_empty()
        assert pid_alive(last.pid), "once reverted, the controller Ray brings back is left alone"
        after = fault.evidence(env, handle).symptoms
        assert after["controller_back"] and after["controller_pid_after"] == last.pid
        assert handle.state["crash_loop_pids"] == [restarted.pid]
    finally:
        for proc in (first, restarted, last):
            proc.kill()
            proc.wait(timeout=10)
