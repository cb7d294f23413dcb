"""ray.kill_gcs's own logic, without Ray: refusals, the kill, the restart from the ledger, evidence.

Ray is never started here. The "GCS" is a stand-in process run as ``gcs_server`` (a link to
this Python) that listens on its port and carries the environment's marker, as the real one
does; what the fault reads from Ray's state API goes through its one reader, ``read_cluster``,
which these tests replace with the views a cluster would show. That the real GCS dies, comes
back from Redis and leaves the front door serving is the integration test's
(tests/integration/test_gcs_ft.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest

from inferchaos.errors import ConfigError, PlatformDidNotRecover
from inferchaos.faults.base import FaultHandle
from inferchaos.faults.ledger import Ledger
from inferchaos.faults.ray import gcs
from inferchaos.faults.ray.gcs import ClusterView, gcs_evidence, gcs_processes, intact, is_serve_actor
from inferchaos.faults.registry import get_fault
from inferchaos.primitives.env_status import EnvStatus, FrontDoorStatus, ModelStatus, RayStatus, VllmStatus
from inferchaos.primitives.gcs_state import GcsStorage, is_gcs_server
from inferchaos.primitives.processes import ENV_MARKER, free_port, processes_with_marker, wait_for_port

NAME = "ray.kill_gcs"
TOKEN = "not-a-real-token-0123456789"
LISTEN = (
    "import socket, sys, time\n"
    "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "s.bind(('127.0.0.1', int(sys.argv[1].split('=')[1]))); s.listen(); time.sleep(120)\n"
)
BEFORE = ClusterView(
    nodes={"head": "ALIVE", "w1": "ALIVE", "w2": "ALIVE", "old": "DEAD"},
    serve_actors={
        "c": ["ServeController", 11],
        "p": ["ProxyActor", 12],
        "r": ["ServeReplica:inferchaos:vllm", 13],
    },
)


@dataclass
class FakeEnvironment:
    """The capability ray.kill_gcs acts through (GcsEnvironment), on this host's stand-in processes."""

    storage: GcsStorage | None
    name: str = "local"
    connects: int = 0
    front_door_url: str = field(default_factory=lambda: f"http://127.0.0.1:{free_port()}")

    def gcs_storage(self) -> GcsStorage | None:
        return self.storage

    def ray_auth_token(self) -> str:
        return TOKEN

    def connect_ray(self) -> None:
        self.connects += 1

    def status(self) -> EnvStatus:
        return EnvStatus(
            env=self.name,
            up=True,
            ray=RayStatus(address="127.0.0.1:1", dashboard_url="http://127.0.0.1:1"),
            vllm=VllmStatus(),
            front_door=FrontDoorStatus(url=self.front_door_url, healthy=True),
            model=ModelStatus(name="tiny", max_model_len=512),
        )

    # The rest of the process capability; ray.kill_gcs never calls these.
    def load_state(self) -> Any:
        raise AssertionError("not used")

    def ray_nodes(self) -> list[Any]:
        return []

    def replica_records(self) -> list[Any]:
        return []

    def add_worker(self) -> Any:
        raise AssertionError("not used")

    def mark_node_lost(self, name: str) -> None:
        raise AssertionError("not used")


@pytest.fixture
def env_id(request: pytest.FixtureRequest) -> Iterator[str]:
    """A marker of this test's own; every stand-in carrying it is ended afterwards, by pid."""
    marker = f"gcs-unit-{os.getpid()}-{abs(hash(request.node.name)) % 10**8}"
    yield marker
    for proc in processes_with_marker(marker):
        proc.kill()
        proc.wait(timeout=5)


@pytest.fixture
def stand_in(tmp_path: Path, env_id: str) -> tuple[Path, int]:
    """A ``gcs_server`` executable (a link to this Python) and the port its stand-in listens on."""
    link = tmp_path / "gcs_server"
    link.symlink_to(sys.executable)
    return link, free_port()


def _start_gcs(link: Path, port: int, env_id: str) -> psutil.Process:
    env = {**os.environ, ENV_MARKER: env_id, "RAY_AUTH_TOKEN": TOKEN}
    proc = subprocess.Popen(
        [str(link), "-c", LISTEN, f"--gcs_server_port={port}"], env=env, start_new_session=True
    )
    assert wait_for_port(port, 10), "the stand-in GCS never listened"
    return psutil.Process(proc.pid)


def _storage(env_id: str, port: int, tmp_path: Path, redis_pid: int | None = None) -> GcsStorage:
    return GcsStorage(
        env_id=env_id,
        gcs_address=f"127.0.0.1:{port}",
        gcs_port=port,
        redis_address="127.0.0.1:1",
        redis_pid=os.getpid() if redis_pid is None else redis_pid,
        reconnect_timeout_s=600,
        logs_dir=str(tmp_path),
    )


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> list[ClusterView]:
    """What Ray's state API answers: the view appended last."""
    views = [BEFORE]

    def read(dashboard_url: str, timeout_s: int = 5) -> ClusterView:
        return views[-1]

    monkeypatch.setattr(gcs, "read_cluster", read)
    return views


def test_without_gcs_fault_tolerance_the_plan_refuses_in_one_line_and_nothing_is_recorded(
    tmp_path: Path,
) -> None:
    ledger = Ledger(tmp_path / "ledger")
    fault = get_fault(NAME)
    with pytest.raises(
        ConfigError, match=r"needs GCS fault tolerance: .*inferchaos env up --gcs-ft"
    ) as caught:
        fault.inject(FakeEnvironment(storage=None), {}, ledger)
    assert "\n" not in str(caught.value)
    assert ledger.is_empty()


def test_an_environment_without_a_gcs_on_this_host_is_refused() -> None:
    with pytest.raises(ConfigError, match="embedded local environment only"):
        get_fault(NAME).plan(object(), {})


@pytest.mark.parametrize("value", [0, -1, float("nan")])
def test_recover_timeout_must_be_a_positive_number_of_seconds(value: float) -> None:
    with pytest.raises(ConfigError, match="recover_timeout_s"):
        get_fault(NAME).plan(FakeEnvironment(storage=None), {"recover_timeout_s": value})


def test_a_recover_timeout_past_half_the_reconnect_budget_is_refused(
    stand_in: tuple[Path, int], env_id: str, tmp_path: Path, cluster: list[ClusterView]
) -> None:
    link, port = stand_in
    _start_gcs(link, port, env_id)
    env = FakeEnvironment(_storage(env_id, port, tmp_path))
    with pytest.raises(ConfigError, match="below half the raylets' GCS reconnect budget"):
        get_fault(NAME).plan(env, {"recover_timeout_s": 300})


def test_a_dead_redis_is_refused_since_the_gcs_could_not_come_back(env_id: str, tmp_path: Path) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    env = FakeEnvironment(_storage(env_id, free_port(), tmp_path, redis_pid=gone.pid))
    with pytest.raises(ConfigError, match="Redis .* is not running"):
        get_fault(NAME).plan(env, {})


def test_no_gcs_server_of_the_environment_is_refused_and_another_clusters_is_never_taken(
    stand_in: tuple[Path, int], env_id: str, tmp_path: Path
) -> None:
    link, port = stand_in
    _start_gcs(link, port, env_id)
    # The same port, but another environment's marker: not ours to kill.
    env = FakeEnvironment(_storage("another-environment", port, tmp_path))
    with pytest.raises(ConfigError, match="expected one gcs_server of this environment .* found 0"):
        get_fault(NAME).plan(env, {})


def test_kill_then_revert_starts_the_same_command_again_with_the_token_kept_out_of_the_ledger(
    stand_in: tuple[Path, int], env_id: str, tmp_path: Path, cluster: list[ClusterView]
) -> None:
    link, port = stand_in
    original = _start_gcs(link, port, env_id)
    env = FakeEnvironment(_storage(env_id, port, tmp_path))
    ledger = Ledger(tmp_path / "ledger")
    fault = get_fault(NAME)

    plan = fault.plan(env, {"recover_timeout_s": 20})
    assert plan.targets == [f"ray-gcs:127.0.0.1:{port}", f"pid:{original.pid}"]
    assert original.is_running(), "planning kills nothing"

    handle = fault.inject(env, {"recover_timeout_s": 20}, ledger)
    assert not original.is_running() or original.status() == psutil.STATUS_ZOMBIE
    entry = (ledger.folder / f"{handle.id}.json").read_text()
    assert TOKEN not in entry, "the ledger must not hold the cluster's token"
    at_inject = fault.evidence(env, handle)
    assert at_inject.bit and "not back yet" in at_inject.reason
    assert gcs_processes(env.storage) == []  # type: ignore[arg-type]

    # The cluster after the restart: every node back, Serve's actors in the same processes.
    cluster.append(BEFORE)
    fault.revert(env, handle, ledger)
    assert ledger.is_empty()
    (restarted,) = gcs_processes(env.storage)  # type: ignore[arg-type]
    assert restarted.pid != original.pid
    assert restarted.cmdline() == original_cmdline(link, port)
    assert restarted.environ()["RAY_AUTH_TOKEN"] == TOKEN
    after = fault.evidence(env, handle)
    s = after.symptoms
    assert after.bit and s["gcs_back"] and s["nodes_intact"] and s["serve_intact"], after.reason
    assert (s["gcs_pid_before"], s["gcs_pid_after"]) == (original.pid, restarted.pid)
    assert s["down_s"] is not None and s["down_s"] >= s["restarted_after_s"]
    # The fault's own requests went to a front door that is not there: all counted, none served.
    assert s["front_door_requests_during_outage"] >= 1 and s["front_door_served_during_outage"] == 0

    fault.revert(env, handle, ledger)  # idempotent: no second GCS
    assert [p.pid for p in gcs_processes(env.storage)] == [restarted.pid]  # type: ignore[arg-type]


def original_cmdline(link: Path, port: int) -> list[str]:
    return [str(link), "-c", LISTEN, f"--gcs_server_port={port}"]


def test_a_revert_from_the_ledger_alone_never_starts_a_second_gcs(
    stand_in: tuple[Path, int], env_id: str, tmp_path: Path, cluster: list[ClusterView]
) -> None:
    link, port = stand_in
    _start_gcs(link, port, env_id)
    env = FakeEnvironment(_storage(env_id, port, tmp_path))
    ledger = Ledger(tmp_path / "ledger")
    fault = get_fault(NAME)
    handle = fault.inject(env, {"recover_timeout_s": 20}, ledger)
    # Someone (an earlier cleanup that died before removing the entry) started it again.
    again = _start_gcs(link, port, env_id)
    (recorded,) = Ledger(tmp_path / "ledger").entries()
    fault.revert(env, recorded, ledger)
    assert ledger.is_empty()
    assert [p.pid for p in gcs_processes(env.storage)] == [again.pid]  # type: ignore[arg-type]
    assert handle.id == recorded.id


def test_a_revert_whose_gcs_never_answers_keeps_the_entry(
    stand_in: tuple[Path, int], env_id: str, tmp_path: Path, cluster: list[ClusterView]
) -> None:
    link, port = stand_in
    _start_gcs(link, port, env_id)
    env = FakeEnvironment(_storage(env_id, port, tmp_path))
    ledger = Ledger(tmp_path / "ledger")
    fault = get_fault(NAME)
    handle = fault.inject(env, {"recover_timeout_s": 2}, ledger)
    # A head node missing after the restart: never "every node back".
    cluster.append(ClusterView(nodes={"w1": "ALIVE", "w2": "ALIVE"}, serve_actors={}))
    # The platform failed, not inferchaos: the runner makes this a `failed` run, not an `error`.
    with pytest.raises(PlatformDidNotRecover, match="did not answer with every node ALIVE within 2 s"):
        fault.revert(env, handle, ledger)
    assert [h.id for h in ledger.entries()] == [handle.id]
    for proc in gcs_processes(env.storage):  # type: ignore[arg-type]
        os.kill(proc.pid, signal.SIGKILL)


def test_intact_names_lost_nodes_and_restarted_serve_actors() -> None:
    same = intact(_view(BEFORE), _view(BEFORE))
    assert same["nodes_intact"] and same["serve_intact"]
    lost = ClusterView(
        nodes={"head": "ALIVE", "w1": "DEAD", "w2": "ALIVE"},
        serve_actors={
            "c": ["ServeController", 11],
            "p": ["ProxyActor", 99],
            "r": ["ServeReplica:inferchaos:vllm", 13],
        },
    )
    changed = intact(_view(BEFORE), _view(lost))
    assert changed["nodes_lost"] == ["w1"] and not changed["nodes_intact"]
    assert changed["serve_actors_lost"] == ["ProxyActor:p"] and not changed["serve_intact"]
    assert intact(_view(BEFORE), None)["nodes_intact"] is None


def test_evidence_says_when_the_kill_never_happened() -> None:
    state = {"pid": 5, "before": _view(BEFORE)}
    evidence = gcs_evidence(state, None, [5], None, None)
    assert not evidence.bit and "never killed" in evidence.reason


def test_gcs_and_serve_processes_are_recognised_by_name() -> None:
    assert is_gcs_server(["/x/ray/core/src/ray/gcs/gcs_server", "--gcs_server_port=61006"], 61006)
    assert not is_gcs_server(["/x/gcs_server", "--gcs_server_port=61206"], 61006)
    assert not is_gcs_server(["/x/raylet", "--gcs_server_port=61006"], 61006)
    assert not is_gcs_server([], 61006)
    assert all(map(is_serve_actor, ["ServeController", "ProxyActor", "ServeReplica:inferchaos:vllm"]))
    assert not is_serve_actor("LeakedActor")


def _view(view: ClusterView) -> dict[str, Any]:
    return {"nodes": dict(view.nodes), "serve_actors": dict(view.serve_actors)}


def test_the_handle_records_how_to_start_the_gcs_again(
    stand_in: tuple[Path, int], env_id: str, tmp_path: Path, cluster: list[ClusterView]
) -> None:
    link, port = stand_in
    _start_gcs(link, port, env_id)
    env = FakeEnvironment(_storage(env_id, port, tmp_path))
    ledger = Ledger(tmp_path / "ledger")
    handle: FaultHandle = get_fault(NAME).inject(env, {"recover_timeout_s": 20}, ledger)
    launch = handle.state["launch"]
    assert launch["argv"] == original_cmdline(link, port)
    assert launch["withheld"] == ["RAY_AUTH_TOKEN"] and "RAY_AUTH_TOKEN" not in launch["environ"]
    assert launch["environ"][ENV_MARKER] == env_id
    cluster.append(BEFORE)
    get_fault(NAME).revert(env, handle, ledger)
