"""vllm.hang_engine on real processes: a stand-in vLLM process group is frozen, shown hung, and resumed.

Each test starts its own tree (tests/fakes/vllm_tree.py: an "API server" answering
/health and /metrics, its "EngineCore" with a "worker" child, and a "helper"), all in one new
process group, and ends every one of them by pid afterwards.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from inferchaos.errors import ConfigError, FaultError
from inferchaos.faults.base import FaultHandle, wait_until
from inferchaos.faults.ledger import Ledger
from inferchaos.faults.registry import get_fault
from inferchaos.faults.vllm import hang
from inferchaos.faults.vllm.hang import HangEngine
from inferchaos.faults.vllm.replica_processes import process_state, same_process
from tests.fakes.replica_env import FakeReplicaEnv
from tests.fakes.vllm_tree import Tree, answers, running_tree

pytestmark = pytest.mark.long_running

REPO = Path(__file__).resolve().parents[2]
FLOODED = REPO / "tests" / "fixtures" / "metrics" / "vllm_flooded.txt"


def _states(pids: set[int]) -> dict[int, str | None]:
    return {pid: process_state(pid) for pid in pids}


def _stopped(pids: set[int]) -> set[int]:
    return {pid for pid, state in _states(pids).items() if state == "T"}


@pytest.fixture(autouse=True)
def short_http_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    # A stopped server never answers: keep the reads that prove it short.
    monkeypatch.setattr(hang, "HTTP_TIMEOUT_S", 0.5)


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[Tree]:
    metrics = tmp_path / "metrics.txt"
    metrics.write_text(FLOODED.read_text())
    with running_tree(metrics) as started:
        yield started


class WatchingLedger(Ledger):
    """A ledger that notes, at each write, which of the watched pids were stopped."""

    def __init__(self, folder: Path, watched: set[int]) -> None:
        super().__init__(folder)
        self.watched = watched
        self.stopped_at_writes: list[set[int]] = []

    def record(self, handle: FaultHandle) -> None:
        self.stopped_at_writes.append(_stopped(self.watched))
        super().record(handle)


# -- refused at plan time ---------------------------------------------------------------------


@pytest.mark.parametrize("what", ["gpu", "", "ENGINE"])
def test_plan_refuses_a_what_it_does_not_know_naming_the_choices(what: str) -> None:
    with pytest.raises(
        ConfigError, match=rf"vllm.hang_engine: what: must be one of engine, server, all; got '{what}'"
    ):
        HangEngine().plan(FakeReplicaEnv.around(999_999, "http://127.0.0.1:1"), {"what": what})


def test_plan_refuses_a_duration_that_is_not_positive() -> None:
    with pytest.raises(ConfigError, match="duration_s: must be more than 0 seconds, got 0"):
        HangEngine().plan(FakeReplicaEnv.around(999_999, "http://127.0.0.1:1"), {"duration_s": 0})


def test_plan_refuses_an_unknown_replica_listing_the_known_ones() -> None:
    with pytest.raises(
        ConfigError, match=r"no replica named 'replica-9'; known: \['replica-0', 'replica-1'\]"
    ):
        HangEngine().plan(FakeReplicaEnv.around(999_999, "http://127.0.0.1:1"), {"replica": 9})


def test_plan_refuses_a_replica_that_is_not_healthy() -> None:
    env = FakeReplicaEnv.around(999_999, "http://127.0.0.1:1", others=("healthy",))
    env.records[0].state = "starting"
    with pytest.raises(ConfigError, match="replica-0 is starting, not healthy"):
        HangEngine().plan(env, {"replica": "replica-0"})


@pytest.mark.parametrize("what", ["all", "server", "engine"])
def test_plan_refuses_a_replica_listed_healthy_whose_server_is_gone_as_bad_input(what: str) -> None:
    # Serve replacing the replica: its record still reads healthy, its server has ended.
    env = FakeReplicaEnv.around(999_999, "http://127.0.0.1:1", others=("healthy",))
    with pytest.raises(ConfigError, match="replica-0 is being replaced .*; nothing to freeze"):
        HangEngine().plan(env, {"replica": "replica-0", "what": what})


def test_plan_refuses_the_only_healthy_replica_unless_a_total_outage_is_allowed(tree: Tree) -> None:
    env = tree.env(others=("starting",))
    with pytest.raises(ConfigError, match="replica-0 is the only healthy replica; set allow_total_outage"):
        HangEngine().plan(env, {})
    assert HangEngine().plan(env, {"allow_total_outage": True}).targets[0] == "replica:replica-0"


def test_plan_refuses_processes_that_are_stopped_already(tree: Tree) -> None:
    os.kill(tree.engine, signal.SIGSTOP)
    try:
        assert wait_until(lambda: process_state(tree.engine) == "T", 5, 0.01)
        with pytest.raises(ConfigError, match=f"pids {tree.engine} are stopped already"):
            HangEngine().plan(tree.env(), {})
    finally:
        os.kill(tree.engine, signal.SIGCONT)


@pytest.mark.parametrize(
    ("what", "roles"),
    [
        ("engine", ("engine", "worker")),
        ("server", ("server",)),
        ("all", ("server", "engine", "worker", "helper")),
    ],
)
def test_plan_lists_exactly_the_pids_it_would_stop_and_stops_nothing(
    tree: Tree, what: str, roles: tuple[str, ...]
) -> None:
    plan = HangEngine().plan(tree.env(), {"what": what})
    wanted = {getattr(tree, role) for role in roles}
    assert plan.targets[0] == "replica:replica-0"
    assert {int(t.removeprefix("pid:")) for t in plan.targets[1:]} == wanted
    assert len(plan.targets) == len(wanted) + 1
    assert "replica-1 keeps serving" in plan.description and "frozen until revert" in plan.description
    assert not _stopped(tree.pids)


# -- inject, evidence, revert -----------------------------------------------------------------


def test_inject_records_the_ledger_first_then_hangs_the_engine_while_health_stays_200(
    tree: Tree, tmp_path: Path
) -> None:
    ledger = WatchingLedger(tmp_path / "ledger", tree.pids)
    fault = HangEngine()
    handle = fault.inject(tree.env(), {"replica": 0}, ledger)

    # The entry was on disk before anything was stopped.
    assert ledger.stopped_at_writes[0] == set()
    assert _stopped(tree.pids) == {tree.engine, tree.worker}
    (entry,) = Ledger(tmp_path / "ledger").entries()
    assert entry.id == handle.id and entry.injected_at == handle.injected_at
    assert {p["pid"] for p in entry.state["processes"]} == {tree.engine, tree.worker}

    evidence = fault.evidence(tree.env(), handle)
    assert evidence.bit, evidence.reason
    symptoms = evidence.symptoms
    assert symptoms["states_now"] == {str(tree.engine): "T", str(tree.worker): "T"}
    assert symptoms["health_status"] == 200  # hung but healthy
    assert symptoms["generation_tokens_delta"] == 0 and symptoms["made_progress"] is False
    assert symptoms["running_now"] == 2 and symptoms["waiting_now"] == 2
    assert f"replica-0 hung: EngineCore pids {tree.engine}, {tree.worker} stopped" in evidence.reason
    assert "/health still answered 200" in evidence.reason
    assert (
        "generation_tokens_total stayed at 4979 (the engine last reported 2 running, 2 waiting)"
        in evidence.reason
    )
    assert set(evidence.timestamps) == {"injected_at"}

    fault.revert(tree.env(), handle, ledger)
    assert not _stopped(tree.pids)
    assert ledger.is_empty()
    after = fault.evidence(tree.env(), handle)
    assert after.bit and after.symptoms["resumed_by"] == "revert"
    assert set(after.timestamps) == {"injected_at", "resumed_at", "reverted_at"}
    fault.revert(tree.env(), handle, ledger)  # twice: nothing left to do, nothing raised
    assert not _stopped(tree.pids) and ledger.is_empty()


@pytest.mark.parametrize(
    ("what", "roles"), [("server", ("server",)), ("all", ("server", "engine", "worker", "helper"))]
)
def test_a_stopped_server_leaves_health_and_metrics_unanswered(
    tree: Tree, tmp_path: Path, what: str, roles: tuple[str, ...]
) -> None:
    ledger = Ledger(tmp_path / "ledger")
    fault = HangEngine()
    handle = fault.inject(tree.env(), {"what": what}, ledger)
    assert _stopped(tree.pids) == {getattr(tree, role) for role in roles}
    assert handle.state["metrics_at_inject"] == {"error": "/metrics did not answer within 0.5 s"}

    evidence = fault.evidence(tree.env(), handle)
    assert evidence.bit, evidence.reason
    assert evidence.symptoms["health_status"] is None
    assert evidence.symptoms["health_error"] == "/health did not answer within 0.5 s"
    assert evidence.symptoms["metrics_error_now"] == "/metrics did not answer within 0.5 s"
    assert "/health did not answer within 0.5 s" in evidence.reason

    fault.revert(tree.env(), handle, ledger)
    assert not _stopped(tree.pids) and ledger.is_empty()
    assert answers(tree.url)


def test_evidence_says_the_hang_did_not_hold_when_something_else_resumed_it(
    tree: Tree, tmp_path: Path
) -> None:
    ledger = Ledger(tmp_path / "ledger")
    fault = HangEngine()
    handle = fault.inject(tree.env(), {}, ledger)
    os.kill(tree.engine, signal.SIGCONT)
    assert wait_until(lambda: process_state(tree.engine) != "T", 5, 0.01)
    evidence = fault.evidence(tree.env(), handle)
    assert not evidence.bit
    assert f"replica-0: EngineCore pids {tree.engine} run again" in evidence.reason
    fault.revert(tree.env(), handle, ledger)


def test_duration_resumes_the_processes_by_itself(tree: Tree, tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger")
    fault = HangEngine()
    handle = fault.inject(tree.env(), {"duration_s": 0.5}, ledger)
    assert handle.state["all_stopped_at_inject"]
    assert wait_until(lambda: not _stopped(tree.pids), 10, 0.05), _states(tree.pids)
    evidence = fault.evidence(tree.env(), handle)
    assert evidence.bit, evidence.reason
    assert evidence.symptoms["resumed_by"] == "timer"
    assert evidence.timestamps["resumed_at"] >= handle.injected_at + 0.5
    assert not ledger.is_empty(), "the entry stays until revert"

    fault.revert(tree.env(), handle, ledger)
    assert ledger.is_empty()
    assert handle.state["resumed_by"] == "timer"


def test_revert_before_the_duration_is_over_resumes_at_once_and_the_timer_does_nothing(
    tree: Tree, tmp_path: Path
) -> None:
    ledger = Ledger(tmp_path / "ledger")
    fault = HangEngine()
    handle = fault.inject(tree.env(), {"duration_s": 0.5}, ledger)
    fault.revert(tree.env(), handle, ledger)
    assert not _stopped(tree.pids)
    time.sleep(0.8)
    assert ledger.is_empty(), "the timer must not bring the entry back"
    assert handle.state["resumed_by"] == "revert"


def test_revert_after_the_processes_exited_is_a_no_op(tree: Tree, tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger")
    fault = HangEngine()
    handle = fault.inject(tree.env(), {"what": "all"}, ledger)
    procs = [psutil.Process(pid) for pid in tree.pids]
    for proc in procs:
        proc.kill()
    assert wait_until(lambda: all(same_process(e) is None for e in handle.state["processes"]), 10, 0.05)

    fault.revert(tree.env(), handle, ledger)
    assert ledger.is_empty()
    assert "resumed_at" not in handle.state, "nothing was resumed: the processes were gone"
    evidence = fault.evidence(tree.env(), handle)
    assert sorted(evidence.symptoms["pids_gone"]) == sorted(tree.pids)


def test_revert_never_signals_a_pid_that_another_process_now_holds(tree: Tree, tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger")
    fault = HangEngine()
    handle = fault.inject(tree.env(), {}, ledger)
    # What the ledger says the engine was is no longer what runs under its pid.
    (engine,) = [p for p in handle.state["processes"] if p["pid"] == tree.engine]
    engine["create_time"] -= 100.0
    try:
        fault.revert(tree.env(), handle, ledger)
        assert _stopped(tree.pids) == {tree.engine}, "the process under the reused pid was signalled"
    finally:
        os.kill(tree.engine, signal.SIGCONT)


def test_inject_refuses_when_a_planned_pid_was_reused_before_it_acted(tree: Tree, tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger")
    fault = HangEngine()
    planned = fault._plan(tree.env(), fault.parse({}))
    planned.state["processes"][0]["create_time"] -= 100.0
    handle = FaultHandle(fault.name, fault.layer, {}, "fake-local", state=planned.state)
    with pytest.raises(
        FaultError, match=f"replica-0: pids {tree.engine} .* are gone since the plan; nothing was stopped"
    ):
        fault._act(tree.env(), fault.parse({}), handle, ledger)
    assert not _stopped(tree.pids)


# -- after a crash: `inferchaos cleanup` reverts from the ledger alone ------------------------

INJECTOR = """
import sys, time
from pathlib import Path
from inferchaos.faults.ledger import Ledger
from inferchaos.faults.vllm.hang import HangEngine
from tests.fakes.replica_env import FakeReplicaEnv

handle = HangEngine().inject(FakeReplicaEnv.around(int(sys.argv[1]), sys.argv[2]), {"duration_s": 2.0}, Ledger())
print(handle.id, flush=True)
time.sleep(60)
"""


def test_cleanup_resumes_what_a_killed_injector_left_stopped(
    tree: Tree, inferchaos_home: Path, tmp_path: Path
) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    injector = subprocess.Popen(
        [sys.executable, "-c", INJECTOR, str(tree.server), tree.url],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert injector.stdout is not None
        handle_id = injector.stdout.readline().strip()
        assert handle_id, "the injector did not report its handle"
        injector.send_signal(signal.SIGKILL)
        injector.wait(timeout=10)
    finally:
        if injector.poll() is None:
            injector.kill()
            injector.wait(timeout=10)
    # Its timer died with it: the processes stay stopped past the duration.
    time.sleep(2.2)
    assert _stopped(tree.pids) == {tree.engine, tree.worker}
    entry = json.loads((inferchaos_home / "ledger" / f"{handle_id}.json").read_text())
    assert entry["fault"] == "vllm.hang_engine" and entry["env"] == "fake-local"

    done = subprocess.run(
        [sys.executable, "-m", "inferchaos.cli.main", "cleanup"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"reverted vllm.hang_engine {handle_id}" in done.stdout
    assert not _stopped(tree.pids)
    assert Ledger(inferchaos_home / "ledger").is_empty()


def test_revert_from_a_handle_read_back_from_the_ledger(tree: Tree, tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger")
    HangEngine().inject(tree.env(), {"what": "all"}, ledger)
    (handle,) = Ledger(tmp_path / "ledger").entries()
    fault = get_fault(handle.fault)
    assert fault.evidence(tree.env(), handle).bit
    fault.revert(tree.env(), handle, ledger)
    assert not _stopped(tree.pids) and ledger.is_empty()
    fault.revert(tree.env(), handle, ledger)


def test_the_chaos_toolkit_action_and_rollback_are_generated() -> None:
    from inferchaos.ctk import vllm_actions as actions

    assert {"hang_engine", "rollback_hang_engine"} <= set(actions.__all__)
