"""vllm.slow_engine: its parameters, the quota rule, the cgroup primitives on a fake tree, and real slowdowns.

The cgroup primitives are checked against a tree of plain files under tmp_path (the layout
of a v1 cpu hierarchy or a v2 root). The fault itself acts on real processes: the stand-in
vLLM process group of tests/fakes/vllm_tree.py, whose "API server" streams completions at a
speed bound by its CPU, and a busy child process for the duty-cycle thread. The cgroup
mechanism is exercised on this machine's real cpu controller where one is writable (root).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from inferchaos.errors import ConfigError, FaultError, Unsupported
from inferchaos.faults.base import FaultHandle, wait_until
from inferchaos.faults.ledger import Ledger
from inferchaos.faults.registry import get_fault
from inferchaos.faults.vllm import slow
from inferchaos.faults.vllm.replica_processes import process_state
from inferchaos.faults.vllm.slow import QUOTA_PERIOD_US, DutyCycle, SlowEngine, SlowEngineParams, duty_phases
from inferchaos.layers import Layer
from inferchaos.params import InvalidValue
from inferchaos.primitives import cpu_quota
from inferchaos.primitives.cpu_quota import CpuController, CpuGroup, CpuQuotaError
from tests.fakes.replica_env import FakeReplicaEnv
from tests.fakes.vllm_tree import Tree, running_tree

pytestmark = pytest.mark.long_running

REPO = Path(__file__).resolve().parents[2]
FLOODED = REPO / "tests" / "fixtures" / "metrics" / "vllm_flooded.txt"
NOWHERE = FakeReplicaEnv.around(999_999, "http://127.0.0.1:1")
REAL_CPU, NO_CPU_CGROUP = cpu_quota.cpu_quota_available()
NO_CPU_CGROUP_WHY = f"no writable cpu cgroup here: {NO_CPU_CGROUP}"


def needs_cpu_cgroup(test: Callable[..., None]) -> Callable[..., None]:
    """Skip where no cpu controller is writable: a property of the host, no package gives it."""
    skipped: Callable[..., None] = pytest.mark.skipif(REAL_CPU is None, reason=NO_CPU_CGROUP_WHY)(test)
    return pytest.mark.may_skip(NO_CPU_CGROUP_WHY)(skipped)


def _stopped(pids: set[int]) -> set[int]:
    return {pid for pid in pids if process_state(pid) == "T"}


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[Tree]:
    metrics = tmp_path / "metrics.txt"
    metrics.write_text(FLOODED.read_text())
    with running_tree(metrics) as started:
        yield started
        # A test that failed half-way may leave its cgroup behind: the one its processes are still
        # in. Only those are removed, never every fake-local slow group on the machine: a test on
        # another pytest-xdist worker may be slowing its own tree in one right now.
        left = _slow_groups_holding(started.pids)
    for group in left:
        _remove_when_empty(group)


def _slow_groups_holding(pids: set[int]) -> set[Path]:
    if REAL_CPU is None:
        return set()
    groups = set()
    for pid in pids:
        relative = cpu_quota.process_cgroup(pid, REAL_CPU)
        if relative and cpu_quota.is_slow_group(Path(relative).name):
            groups.add(REAL_CPU.path_of(relative))
    return groups


def _remove_when_empty(group: Path) -> None:
    wait_until(lambda: not cpu_quota.group_pids(group), 5, 0.05)
    cpu_quota.remove_group(group)


@pytest.fixture
def busy_child() -> Iterator[psutil.Process]:
    """A process that keeps one core busy, in its own session, ended by its process group."""
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
    try:
        yield psutil.Process(child.pid)
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(timeout=10)


# -- parameters ------------------------------------------------------------------------------


@pytest.mark.parametrize("slowdown", [1, 1.0, 0.5, 0, -3])
def test_a_slowdown_that_is_not_more_than_1_is_refused(slowdown: float) -> None:
    with pytest.raises(ConfigError, match=r"vllm.slow_engine: slowdown: must be a finite number more than 1"):
        SlowEngine().plan(NOWHERE, {"slowdown": slowdown})


@pytest.mark.parametrize("slowdown", [float("nan"), float("inf"), float("-inf")])
def test_a_slowdown_that_is_not_finite_is_refused(slowdown: float) -> None:
    with pytest.raises(ConfigError, match=r"parameter 'slowdown' must be a finite number"):
        SlowEngine().plan(NOWHERE, {"slowdown": slowdown})


@pytest.mark.parametrize("slowdown", [float("nan"), float("inf"), 1.0])
def test_the_params_check_themselves_when_built_directly(slowdown: float) -> None:
    with pytest.raises(InvalidValue, match="slowdown: must be a finite number more than 1"):
        SlowEngineParams(slowdown=slowdown)


def test_a_slowdown_must_be_a_number() -> None:
    with pytest.raises(ConfigError, match=r"parameter 'slowdown' must be float, got 'x10'"):
        SlowEngine().plan(NOWHERE, {"slowdown": "x10"})


@pytest.mark.parametrize("mechanism", ["freeze", "", "CGROUP"])
def test_an_unknown_mechanism_is_refused_naming_the_choices(mechanism: str) -> None:
    with pytest.raises(
        ConfigError,
        match=rf"vllm.slow_engine: mechanism: must be one of auto, cgroup, duty_cycle; got '{mechanism}'",
    ):
        SlowEngine().plan(NOWHERE, {"mechanism": mechanism})


def test_a_duration_that_is_not_positive_is_refused() -> None:
    with pytest.raises(ConfigError, match="duration_s: must be more than 0 seconds, got 0"):
        SlowEngine().plan(NOWHERE, {"duration_s": 0})


def test_an_unknown_replica_is_refused_listing_the_known_ones() -> None:
    with pytest.raises(
        ConfigError, match=r"no replica named 'replica-7'; known: \['replica-0', 'replica-1'\]"
    ):
        SlowEngine().plan(NOWHERE, {"replica": 7})


# -- the rules --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("slowdown", "cores", "period", "quota", "granted_period"),
    [
        (10, 2, 100_000, 20_000, 100_000),
        (10, 1, 100_000, 10_000, 100_000),
        (4, 1.5, 100_000, 37_500, 100_000),
        (2.5, 1, 50_000, 20_000, 50_000),
        (10, 1.05, 10_000, 1_050, 10_000),
        # Below the kernel's smallest quota, the period grows so the share stays the one asked.
        (10, 0.5, 10_000, 1_000, 20_000),
        (10, 0.05, 100_000, 1_000, 200_000),
        (1000, 1, 100_000, 1_000, 1_000_000),
        # Past the longest period the smallest quota is all there is.
        (10_000, 1, 100_000, 1_000, 1_000_000),
    ],
)
def test_the_quota_is_the_cores_used_per_period_divided_by_the_slowdown(
    slowdown: float, cores: float, period: int, quota: int, granted_period: int
) -> None:
    assert cpu_quota.bandwidth(slowdown, cores, period) == cpu_quota.Bandwidth(quota, granted_period)


@pytest.mark.parametrize(("slowdown", "cores"), [(0, 1), (10, 0), (-1, 2)])
def test_the_quota_rule_refuses_what_makes_no_quota(slowdown: float, cores: float) -> None:
    with pytest.raises(ValueError, match="must be positive"):
        cpu_quota.bandwidth(slowdown, cores)


@pytest.mark.parametrize(
    ("slowdown", "stopped", "running"), [(10, 0.09, 0.01), (4, 0.075, 0.025), (2, 0.05, 0.05)]
)
def test_the_duty_cycle_runs_one_slowdown_th_of_each_period(
    slowdown: float, stopped: float, running: float
) -> None:
    assert duty_phases(slowdown) == pytest.approx((stopped, running))


# -- the cgroup primitives on a fake tree -----------------------------------------------------


def _v1_tree(root: Path, mount: str = "cpu") -> Path:
    hierarchy = root / mount
    hierarchy.mkdir(parents=True)
    (hierarchy / "cpu.cfs_quota_us").write_text("-1\n")
    (hierarchy / "cpu.cfs_period_us").write_text("100000\n")
    (hierarchy / "cgroup.procs").write_text("1\n")
    return hierarchy


def _v2_tree(root: Path, subtree: str = "memory") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (root / "cgroup.subtree_control").write_text(f"{subtree}\n")
    (root / "cgroup.procs").write_text("1\n")
    return root


def _play_the_kernel_removing(group: CpuGroup) -> None:
    # On the cgroup filesystem the control files vanish with their directory; here they are files.
    for path in group.path.iterdir():
        path.unlink()


@pytest.mark.parametrize("mount", ["cpu", "cpu,cpuacct"])
def test_v1_is_found_under_the_root_and_at_its_own_mount(tmp_path: Path, mount: str) -> None:
    hierarchy = _v1_tree(tmp_path, mount)
    assert cpu_quota.find_cpu_controller(tmp_path) == CpuController(1, hierarchy)
    assert cpu_quota.find_cpu_controller(hierarchy) == CpuController(1, hierarchy)
    assert cpu_quota.cpu_quota_available(tmp_path) == (CpuController(1, hierarchy), "")


def test_v2_is_found_where_the_root_lists_the_cpu_controller(tmp_path: Path) -> None:
    _v2_tree(tmp_path / "unified")
    assert cpu_quota.find_cpu_controller(tmp_path) == CpuController(2, tmp_path / "unified")
    _v2_tree(tmp_path / "pure")
    assert cpu_quota.find_cpu_controller(tmp_path / "pure") == CpuController(2, tmp_path / "pure")


def test_no_controller_is_found_without_cpu_files_or_the_v2_cpu_controller(tmp_path: Path) -> None:
    assert cpu_quota.cpu_quota_available(tmp_path) == (None, f"no cgroup cpu controller under {tmp_path}")
    (tmp_path / "cgroup.controllers").write_text("memory pids\n")
    assert cpu_quota.find_cpu_controller(tmp_path) is None


def test_v1_group_gets_its_period_and_quota_and_takes_pids(tmp_path: Path) -> None:
    controller = CpuController(1, _v1_tree(tmp_path))
    group = cpu_quota.create_group(controller, "inferchaos-x-slow-1", 20_000)
    assert group.path == tmp_path / "cpu" / "inferchaos-x-slow-1" and group.relative == "/inferchaos-x-slow-1"
    assert (group.path / "cpu.cfs_period_us").read_text() == "100000"
    assert (group.path / "cpu.cfs_quota_us").read_text() == "20000"
    assert cpu_quota.read_quota(group.path, 1) == (20_000, 100_000)
    assert cpu_quota.read_quota(controller.root, 1) == (None, 100_000)
    assert cpu_quota.move(group.path, 4242)
    assert cpu_quota.group_pids(group.path) == [4242]
    # The same group again (a retried inject): reused, quota rewritten.
    cpu_quota.create_group(controller, "inferchaos-x-slow-1", 5_000, 50_000)
    assert cpu_quota.read_quota(group.path, 1) == (5_000, 50_000)


def test_v2_group_enables_cpu_for_children_and_writes_cpu_max(tmp_path: Path) -> None:
    controller = CpuController(2, _v2_tree(tmp_path))
    group = cpu_quota.create_group(controller, "inferchaos-x-slow-2", 20_000)
    assert (tmp_path / "cgroup.subtree_control").read_text() == "+cpu"
    assert (group.path / "cpu.max").read_text() == "20000 100000"
    assert cpu_quota.read_quota(group.path, 2) == (20_000, 100_000)
    (group.path / "cpu.max").write_text("max 100000\n")
    assert cpu_quota.read_quota(group.path, 2) == (None, 100_000)


def test_v2_leaves_subtree_control_alone_when_cpu_is_on_already(tmp_path: Path) -> None:
    controller = CpuController(2, _v2_tree(tmp_path, subtree="cpu memory"))
    cpu_quota.create_group(controller, "g", 1_000)
    assert (tmp_path / "cgroup.subtree_control").read_text() == "cpu memory\n"


def test_a_group_is_removed_only_once_empty_and_removing_twice_is_harmless(tmp_path: Path) -> None:
    controller = CpuController(1, _v1_tree(tmp_path))
    group = cpu_quota.create_group(controller, "g", 10_000)
    cpu_quota.move(group.path, 4242)
    with pytest.raises(CpuQuotaError, match=r"could not remove cgroup .*/g: .*\(pids still in it: 4242\)"):
        cpu_quota.remove_group(group.path)
    _play_the_kernel_removing(group)
    assert cpu_quota.remove_group(group.path) is True
    assert cpu_quota.remove_group(group.path) is False
    assert cpu_quota.group_pids(group.path) == []


def test_env_down_removes_its_empty_slow_groups_and_leaves_busy_and_foreign_ones(tmp_path: Path) -> None:
    controller = CpuController(1, _v1_tree(tmp_path))
    empty = cpu_quota.create_group(controller, cpu_quota.slow_group_name("local", "a1"), 10_000)
    busy = cpu_quota.create_group(controller, cpu_quota.slow_group_name("local", "b2"), 10_000)
    foreign = cpu_quota.create_group(controller, cpu_quota.slow_group_name("kind", "c3"), 10_000)
    cpu_quota.move(busy.path, 4242)
    _play_the_kernel_removing(empty)
    assert cpu_quota.remove_empty_slow_groups("local", tmp_path) == [empty.name]
    assert not empty.path.exists() and busy.path.is_dir() and foreign.path.is_dir()
    assert cpu_quota.is_slow_group(busy.name) and not cpu_quota.is_slow_group("inferchaos-local-budget-0")


@pytest.mark.parametrize("name", ["", "a/b", "..", "."])
def test_a_group_name_must_be_one_directory(tmp_path: Path, name: str) -> None:
    with pytest.raises(CpuQuotaError, match="is not a cgroup name"):
        cpu_quota.create_group(CpuController(1, _v1_tree(tmp_path)), name, 10_000)


def test_a_quota_below_the_kernels_minimum_is_refused(tmp_path: Path) -> None:
    group = cpu_quota.create_group(CpuController(1, _v1_tree(tmp_path)), "g", 10_000)
    with pytest.raises(CpuQuotaError, match="at least 1000 us"):
        cpu_quota.set_quota(group, 999)


def test_a_write_the_tree_refuses_is_one_cpu_quota_error(tmp_path: Path) -> None:
    controller = CpuController(1, tmp_path / "missing")
    with pytest.raises(CpuQuotaError, match="could not create cgroup"):
        cpu_quota.create_group(controller, "g", 10_000)


def test_proc_cgroup_lines_name_the_cpu_cgroup_per_version() -> None:
    text = "12:cpu,cpuacct:/a/b\n4:memory:/m\n1:name=systemd:/\n0::/unified/x\n"
    assert cpu_quota.parse_proc_cgroup(text, 1) == "/a/b"
    assert cpu_quota.parse_proc_cgroup(text, 2) == "/unified/x"
    assert cpu_quota.parse_proc_cgroup("3:cpuset:/s\n2:cpuacct:/\n", 1) is None
    assert cpu_quota.parse_proc_cgroup("", 2) is None


def test_a_controller_names_paths_as_proc_does(tmp_path: Path) -> None:
    controller = CpuController(1, tmp_path)
    assert controller.path_of("/a/b") == tmp_path / "a" / "b"
    assert controller.relative(tmp_path / "a" / "b") == "/a/b"
    assert controller.relative(tmp_path) == "/"
    assert cpu_quota.process_cgroup(os.getpid(), controller) is not None
    assert cpu_quota.process_cgroup(999_999_999, controller) is None


def test_a_missing_group_holds_no_pids_and_moving_a_gone_pid_is_false(tmp_path: Path) -> None:
    assert cpu_quota.group_pids(tmp_path / "nothing") == []
    if REAL_CPU is not None:
        # The kernel answers ESRCH for a pid that is gone: nothing to move.
        assert cpu_quota.move(REAL_CPU.root, 999_999_999) is False


# -- the duty cycle on a real process ---------------------------------------------------------


def test_the_duty_cycle_stops_a_busy_process_part_of_the_time_and_resumes_it(
    busy_child: psutil.Process,
) -> None:
    duty = DutyCycle("test-duty", [busy_child], slowdown=4)
    duty.start()
    try:
        states = []
        for _ in range(60):
            states.append(process_state(busy_child.pid))
            time.sleep(0.013)  # not a divisor of the 100 ms period: samples fall all over it
    finally:
        duty.stop()
    stopped = states.count("T") / len(states)
    print(f"stopped in {stopped:.2f} of {len(states)} samples (0.75 wanted)")
    assert 0.4 <= stopped < 1.0, states
    assert duty.cycles >= 5
    assert not duty.is_alive()
    assert wait_until(lambda: process_state(busy_child.pid) != "T", 2, 0.01)
    assert duty.resumed_at is None, "ended by stop(), not by its deadline"
    duty.stop()  # twice: nothing left to do
    time.sleep(0.15)
    assert process_state(busy_child.pid) != "T"


def test_the_duty_cycle_ends_by_itself_at_its_deadline_or_when_no_longer_wanted(
    busy_child: psutil.Process,
) -> None:
    duty = DutyCycle("test-duty", [busy_child], slowdown=10, deadline=time.time() + 0.3)
    duty.start()
    duty.join(2)
    assert not duty.is_alive() and duty.resumed_at is not None
    assert process_state(busy_child.pid) != "T"

    wanted = [True]
    duty = DutyCycle("test-duty", [busy_child], slowdown=10, still_wanted=lambda: wanted[0])
    duty.start()
    time.sleep(0.25)
    wanted[0] = False
    duty.join(2)
    assert not duty.is_alive() and duty.resumed_at is None
    assert process_state(busy_child.pid) != "T"


# -- the fault on the stand-in replica: plan ---------------------------------------------------


def test_plan_lists_the_whole_process_group_and_touches_nothing(tree: Tree) -> None:
    plan = SlowEngine().plan(tree.env(), {"mechanism": "duty_cycle"})
    assert plan.targets[0] == "replica:replica-0"
    assert {int(t.removeprefix("pid:")) for t in plan.targets[1:]} == tree.pids
    assert "SIGSTOP replica-0's vLLM process group" in plan.description
    assert "90 ms of every 100 ms" in plan.description and "replica-1 keeps full speed" in plan.description
    assert not _stopped(tree.pids)


def test_plan_refuses_the_only_healthy_replica_unless_a_total_outage_is_allowed(tree: Tree) -> None:
    env = tree.env(others=("starting",))
    with pytest.raises(ConfigError, match="replica-0 is the only healthy replica; set allow_total_outage"):
        SlowEngine().plan(env, {"mechanism": "duty_cycle"})
    assert SlowEngine().plan(env, {"mechanism": "duty_cycle", "allow_total_outage": True}).targets


def test_plan_refuses_processes_that_are_stopped(tree: Tree) -> None:
    os.kill(tree.engine, signal.SIGSTOP)
    try:
        assert wait_until(lambda: process_state(tree.engine) == "T", 5, 0.01)
        with pytest.raises(ConfigError, match=f"pids {tree.engine} are stopped"):
            SlowEngine().plan(tree.env(), {"mechanism": "duty_cycle"})
    finally:
        os.kill(tree.engine, signal.SIGCONT)


class NoCgroupHere(SlowEngine):
    """The fault on a machine whose cgroup tree has no cpu controller."""

    cgroup_root = Path("/nonexistent-cgroup-root")


def test_auto_falls_back_to_the_duty_cycle_and_cgroup_is_unsupported_where_no_cpu_cgroup_is(
    tree: Tree,
) -> None:
    plan = NoCgroupHere().plan(tree.env(), {})
    assert "SIGSTOP" in plan.description
    with pytest.raises(
        Unsupported,
        match="mechanism cgroup is not available here: no cgroup cpu controller under /nonexistent",
    ):
        NoCgroupHere().plan(tree.env(), {"mechanism": "cgroup"})


@needs_cpu_cgroup
def test_auto_picks_the_cgroup_where_one_is_writable(tree: Tree) -> None:
    plan = SlowEngine().plan(tree.env(), {})
    assert "into a new cgroup under" in plan.description
    assert plan.targets[-1].startswith(f"cgroup:{REAL_CPU.root if REAL_CPU else ''}/inferchaos-")


def test_inject_refuses_a_replica_that_serves_no_probe_and_slows_nothing(tree: Tree, tmp_path: Path) -> None:
    env = tree.env()
    env.records[0].url = "http://127.0.0.1:1"  # its processes live, its port answers nothing
    with pytest.raises(FaultError, match="could not read the served model from http://127.0.0.1:1/v1/models"):
        SlowEngine().inject(env, {"mechanism": "duty_cycle"}, Ledger(tmp_path / "ledger"))
    assert not _stopped(tree.pids)


# -- inject, evidence, revert: the duty cycle ---------------------------------------------------


class WatchingLedger(Ledger):
    """A ledger that notes, at each write, which of the watched pids were stopped."""

    def __init__(self, folder: Path, watched: set[int]) -> None:
        super().__init__(folder)
        self.watched = watched
        self.stopped_at_writes: list[set[int]] = []

    def record(self, handle: FaultHandle) -> None:
        self.stopped_at_writes.append(_stopped(self.watched))
        super().record(handle)


def test_duty_cycle_slows_the_replica_by_at_least_half_the_asked_factor_and_revert_restores_it(
    tree: Tree, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The stand-in makes 32 tokens in about one duty period, so a probe during the fault ends
    # after a whole number of running windows and reads faster than the cycle allows; beside
    # other test workers' load on the "before" probes, that fell under the bar. Probes three
    # times as long span a dozen windows.
    monkeypatch.setattr(slow, "PROBE_TOKENS", 3 * slow.PROBE_TOKENS)
    ledger = WatchingLedger(tmp_path / "ledger", tree.pids)
    fault = SlowEngine()
    handle = fault.inject(tree.env(), {"mechanism": "duty_cycle", "slowdown": 4}, ledger)
    try:
        assert ledger.stopped_at_writes[0] == set(), "the entry was on disk before anything was stopped"
        (entry,) = Ledger(tmp_path / "ledger").entries()
        assert {p["pid"] for p in entry.state["processes"]} == tree.pids
        assert all(p["create_time"] > 0 for p in entry.state["processes"])

        evidence = fault.evidence(tree.env(), handle)
        print("duty-cycle evidence:", evidence.reason)
        assert evidence.bit, evidence.reason
        symptoms = evidence.symptoms
        assert symptoms["mechanism"] == "duty_cycle"
        assert symptoms["duty_cycle"] == pytest.approx(
            {"period_s": 0.1, "stopped_s": 0.075, "running_s": 0.025}
        )
        assert symptoms["tokens_per_s_during"] <= symptoms["tokens_per_s_before"] / 2
        assert symptoms["served_during"] is True and symptoms["escaped_pids"] == []
        assert "replica-0 slowed by SIGSTOP duty cycle" in evidence.reason
        assert set(evidence.timestamps) == {"injected_at"}
    finally:
        fault.revert(tree.env(), handle, ledger)

    assert wait_until(lambda: not _stopped(tree.pids), 2, 0.01)
    time.sleep(0.15)  # a whole period: nothing stops them again
    assert not _stopped(tree.pids)
    assert ledger.is_empty()
    after = fault.evidence(tree.env(), handle)
    assert after.bit and after.symptoms["restored_by"] == "revert"
    assert set(after.timestamps) == {"injected_at", "restored_at", "reverted_at"}
    fault.revert(tree.env(), handle, ledger)  # twice: nothing left to do, nothing raised
    assert not _stopped(tree.pids) and ledger.is_empty()


def test_duty_cycle_ends_by_itself_after_its_duration(tree: Tree, tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger")
    fault = SlowEngine()
    handle = fault.inject(tree.env(), {"mechanism": "duty_cycle", "slowdown": 4, "duration_s": 0.5}, ledger)
    assert wait_until(lambda: fault.evidence(tree.env(), handle).symptoms["restored_by"] == "timer", 5, 0.1)
    assert not _stopped(tree.pids)
    assert not ledger.is_empty(), "the entry stays until revert"
    fault.revert(tree.env(), handle, ledger)
    assert ledger.is_empty() and handle.state["restored_by"] == "timer"


def test_evidence_says_it_did_not_bite_when_the_speed_barely_dropped() -> None:
    handle = FaultHandle(
        SlowEngine.name,
        Layer.VLLM,
        {"slowdown": 10, "mechanism": "duty_cycle"},
        "fake-local",
        injected_at=time.time(),
        state={
            "replica": "replica-0",
            "mechanism": "duty_cycle",
            "slowdown": 10,
            "processes": [{"pid": 999_999_999, "create_time": 1.0, "name": "gone"}],
            "duty_cycle": {"period_s": 0.1, "stopped_s": 0.09, "running_s": 0.01},
            "speed_before": {"tokens_per_s": 300.0, "served": True, "samples": []},
            "speed_during": {"tokens_per_s": 90.0, "served": True, "samples": []},
        },
    )
    evidence = SlowEngine().evidence(NOWHERE, handle)
    assert not evidence.bit
    assert evidence.symptoms["observed_slowdown"] == pytest.approx(3.33, abs=0.01)
    assert evidence.reason.startswith(
        "replica-0 not slowed enough by SIGSTOP duty cycle: 300 tokens/s before, 90 during (3.33x slower; at least 5x wanted)"
    )
    handle.state["speed_during"]["tokens_per_s"] = 60.0
    assert SlowEngine().evidence(NOWHERE, handle).bit


# -- after a crash: `inferchaos cleanup` resumes what a killed injector left stopped ------------

INJECTOR = """
import sys, time
from inferchaos.faults.ledger import Ledger
from inferchaos.faults.vllm.slow import SlowEngine
from tests.fakes.replica_env import FakeReplicaEnv

env = FakeReplicaEnv.around(int(sys.argv[1]), sys.argv[2])
handle = SlowEngine().inject(env, {"mechanism": "duty_cycle", "slowdown": 10}, Ledger())
print(handle.id, flush=True)
time.sleep(60)
"""


def test_cleanup_resumes_what_a_killed_duty_cycle_left_stopped(
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
        # Kill it just as a stop phase begins (90 ms long), so it leaves the processes stopped.
        seen_running = wait_until(lambda: process_state(tree.server) != "T", 2, 0.001)
        # Every process, not the first: the stop signals go out one by one, and a kill between
        # two of them (seen once under load) left one process running.
        began = wait_until(lambda: _stopped(tree.pids) == tree.pids, 2, 0.001)
        assert seen_running and began
        injector.send_signal(signal.SIGKILL)
        injector.wait(timeout=10)
    finally:
        if injector.poll() is None:
            injector.kill()
            injector.wait(timeout=10)
    time.sleep(0.3)  # longer than a period: nothing resumes them any more
    assert _stopped(tree.pids) == tree.pids
    entry = json.loads((inferchaos_home / "ledger" / f"{handle_id}.json").read_text())
    assert entry["fault"] == "vllm.slow_engine" and entry["state"]["mechanism"] == "duty_cycle"

    done = subprocess.run(
        [sys.executable, "-m", "inferchaos.cli.main", "cleanup"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"reverted vllm.slow_engine {handle_id}" in done.stdout
    assert not _stopped(tree.pids)
    assert Ledger(inferchaos_home / "ledger").is_empty()


def test_a_new_fault_instance_resumes_from_the_handle_read_back(
    busy_child: psutil.Process, tmp_path: Path
) -> None:
    # What the ledger holds for a duty cycle whose injector died in a stop phase.
    busy_child.suspend()
    assert wait_until(lambda: process_state(busy_child.pid) == "T", 2, 0.01)
    ledger = Ledger(tmp_path / "ledger")
    record = {"pid": busy_child.pid, "create_time": busy_child.create_time(), "name": busy_child.name()}
    ledger.record(
        FaultHandle(
            SlowEngine.name,
            Layer.VLLM,
            {"replica": 0, "mechanism": "duty_cycle"},
            "fake-local",
            injected_at=time.time(),
            state={
                "replica": "replica-0",
                "mechanism": "duty_cycle",
                "slowdown": 10.0,
                "processes": [record],
            },
        )
    )
    (handle,) = Ledger(tmp_path / "ledger").entries()
    fault = get_fault(handle.fault)
    fault.revert(NOWHERE, handle, ledger)
    assert wait_until(lambda: process_state(busy_child.pid) != "T", 2, 0.01)
    assert ledger.is_empty() and handle.state["restored_by"] == "revert"
    fault.revert(NOWHERE, handle, ledger)


# -- inject, evidence, revert: the cgroup, on this machine's real cpu controller ---------------


def _cgroups(pids: set[int]) -> dict[int, str | None]:
    assert REAL_CPU is not None
    return {pid: cpu_quota.process_cgroup(pid, REAL_CPU) for pid in pids}


@needs_cpu_cgroup
def test_cgroup_throttles_the_replica_and_revert_moves_every_process_back(tree: Tree, tmp_path: Path) -> None:
    assert REAL_CPU is not None
    originally = _cgroups(tree.pids)
    ledger = Ledger(tmp_path / "ledger")
    fault = SlowEngine()
    handle = fault.inject(tree.env(), {"mechanism": "cgroup", "slowdown": 10}, ledger)
    group = handle.state["cgroup"]
    path = Path(group["path"])
    try:
        assert path.parent == REAL_CPU.root and path.name == f"inferchaos-fake-local-slow-{handle.id}"
        assert set(_cgroups(tree.pids).values()) == {group["relative"]}
        assert sorted(cpu_quota.group_pids(path)) == sorted(tree.pids)
        assert cpu_quota.read_quota(path, REAL_CPU.version) == (group["quota_us"], group["period_us"])
        assert group["cores_basis"] == "measured"
        first = group.get("first_quota_us", group["quota_us"])
        asked = cpu_quota.bandwidth(10, group["cores"], QUOTA_PERIOD_US)
        assert (first, group.get("first_period_us", group["period_us"])) == (asked.quota_us, asked.period_us)
        assert group["quota_us"] <= first, "a quota is only ever tightened"
        (entry,) = Ledger(tmp_path / "ledger").entries()
        assert entry.state["cgroup"]["path"] == str(path)
        assert {str(p["pid"]): p["cgroup"] for p in entry.state["processes"]} == {
            str(pid): cgroup for pid, cgroup in originally.items()
        }

        evidence = fault.evidence(tree.env(), handle)
        print("cgroup evidence:", evidence.reason)
        assert evidence.bit, evidence.reason
        assert evidence.symptoms["tokens_per_s_during"] <= evidence.symptoms["tokens_per_s_before"] / 5
        assert evidence.symptoms["cgroup_exists"] and evidence.symptoms["escaped_pids"] == []
        assert not _stopped(tree.pids), "a quota throttles; it stops nothing"
    finally:
        fault.revert(tree.env(), handle, ledger)

    assert _cgroups(tree.pids) == originally
    assert not path.exists()
    assert ledger.is_empty()
    after = fault.evidence(tree.env(), handle)
    assert after.bit and after.symptoms["restored_by"] == "revert" and not after.symptoms["cgroup_exists"]
    fault.revert(tree.env(), handle, ledger)  # twice: nothing left to do
    assert _cgroups(tree.pids) == originally


@needs_cpu_cgroup
def test_a_quota_that_slowed_the_replica_too_little_is_tightened_by_the_shortfall_once(
    tree: Tree, tmp_path: Path
) -> None:
    assert REAL_CPU is not None
    ledger = Ledger(tmp_path / "ledger")
    fault = SlowEngine()
    params = SlowEngineParams(mechanism="cgroup", slowdown=10)
    handle = fault.inject(tree.env(), {"mechanism": "cgroup", "slowdown": 10}, ledger)
    try:
        state, path = handle.state, Path(handle.state["cgroup"]["path"])
        # As a fresh-clone run measured it: 1/10 of the measured use, only 4x slower.
        quota, period = state["cgroup"]["quota_us"], state["cgroup"]["period_us"]
        short = {**state["speed_during"], "tokens_per_s": state["speed_before"]["tokens_per_s"] / 4}
        state["speed_during"] = short
        fault._tighten_if_short(params, handle, ledger)
        assert state["cgroup"]["first_quota_us"] == quota
        tighter = cpu_quota.bandwidth(10 / 4, quota / period, QUOTA_PERIOD_US)
        assert (state["cgroup"]["quota_us"], state["cgroup"]["period_us"]) == (
            tighter.quota_us,
            tighter.period_us,
        )
        assert tighter.quota_us / tighter.period_us == pytest.approx(quota / period * 4 / 10, rel=0.01)
        assert cpu_quota.read_quota(path, REAL_CPU.version) == (tighter.quota_us, tighter.period_us)
        (entry,) = ledger.entries()
        assert entry.state["cgroup"]["quota_us"] == state["cgroup"]["quota_us"], (
            "the ledger holds what is applied"
        )
        assert state["speed_during"] is not short, "the speed is measured again under the new quota"
        # Slowed enough now (or measured so): nothing more is changed.
        state["speed_during"] = {
            **state["speed_during"],
            "tokens_per_s": state["speed_before"]["tokens_per_s"] / 9,
        }
        tightened = state["cgroup"]["quota_us"]
        fault._tighten_if_short(params, handle, ledger)
        assert state["cgroup"]["quota_us"] == tightened
    finally:
        fault.revert(tree.env(), handle, ledger)
    assert not path.exists() and ledger.is_empty()


@needs_cpu_cgroup
def test_evidence_names_a_process_moved_out_of_the_group_by_someone_else(tree: Tree, tmp_path: Path) -> None:
    assert REAL_CPU is not None
    ledger = Ledger(tmp_path / "ledger")
    fault = SlowEngine()
    handle = fault.inject(tree.env(), {"mechanism": "cgroup", "slowdown": 4}, ledger)
    try:
        cpu_quota.move(REAL_CPU.root, tree.helper)
        evidence = fault.evidence(tree.env(), handle)
        assert not evidence.bit
        assert evidence.symptoms["escaped_pids"] == [tree.helper]
        assert f"pids {tree.helper} left the cgroup though nothing restored them" in evidence.reason
    finally:
        fault.revert(tree.env(), handle, ledger)
    assert not Path(handle.state["cgroup"]["path"]).exists()


@needs_cpu_cgroup
def test_cgroup_duration_restores_by_timer_and_cleanup_from_the_ledger_finds_nothing_left(
    tree: Tree, tmp_path: Path
) -> None:
    ledger = Ledger(tmp_path / "ledger")
    handle = SlowEngine().inject(
        tree.env(), {"mechanism": "cgroup", "slowdown": 4, "duration_s": 0.5}, ledger
    )
    path = Path(handle.state["cgroup"]["path"])
    assert wait_until(lambda: not path.exists(), 5, 0.05), "the timer must remove the group"
    assert set(_cgroups(tree.pids).values()) != {handle.state["cgroup"]["relative"]}
    (read_back,) = Ledger(tmp_path / "ledger").entries()
    fault = get_fault(read_back.fault)
    fault.revert(tree.env(), read_back, ledger)
    assert ledger.is_empty()
    assert read_back.state["restored_by"] == "timer"


@needs_cpu_cgroup
def test_cleanup_from_the_ledger_alone_moves_processes_back_and_removes_the_group(
    tree: Tree, tmp_path: Path
) -> None:
    originally = _cgroups(tree.pids)
    ledger = Ledger(tmp_path / "ledger")
    handle = SlowEngine().inject(tree.env(), {"mechanism": "cgroup", "slowdown": 4}, ledger)
    path = Path(handle.state["cgroup"]["path"])
    # As after kill -9 of the injector: this process forgets it, the ledger remembers.
    slow._ACTIVE.pop(handle.id)
    (read_back,) = Ledger(tmp_path / "ledger").entries()
    get_fault(read_back.fault).revert(tree.env(), read_back, ledger)
    assert _cgroups(tree.pids) == originally
    assert not path.exists() and ledger.is_empty()
    assert read_back.state["restored_by"] == "revert"


def test_the_chaos_toolkit_action_and_rollback_are_generated() -> None:
    from inferchaos.ctk import vllm_actions as actions

    assert {"slow_engine", "rollback_slow_engine"} <= set(actions.__all__)


def test_cpu_stat_gives_the_periods_run_and_throttled_in_both_versions() -> None:
    v1 = "nr_periods 120\nnr_throttled 97\nthrottled_time 8123456789\nnr_bursts 0\nburst_time 0\n"
    v2 = "usage_usec 5000\nuser_usec 4000\nsystem_usec 1000\nnr_periods 40\nnr_throttled 3\nthrottled_usec 900\n"
    assert cpu_quota.parse_cpu_stat(v1) == cpu_quota.Throttling(periods=120, throttled=97)
    assert cpu_quota.parse_cpu_stat(v2) == cpu_quota.Throttling(periods=40, throttled=3)
    assert cpu_quota.parse_cpu_stat("usage_usec 5000\n") is None, "no bandwidth counters: nothing to judge"


def test_throttling_is_read_only_from_a_cgroup_the_process_does_not_share(tmp_path: Path) -> None:
    # A tree of plain files in place of the cgroup filesystem, of the version this host runs.
    own = Path("/proc/self/cgroup").read_text()
    version = 1 if cpu_quota.parse_proc_cgroup(own, 1) is not None else 2
    controller = CpuController(version, _v1_tree(tmp_path) if version == 1 else _v2_tree(tmp_path))
    relative = cpu_quota.process_cgroup(os.getpid(), controller)
    assert relative is not None, "this test's own /proc/self/cgroup names its cpu group"
    group = controller.path_of(relative)
    group.mkdir(parents=True, exist_ok=True)
    (group / "cpu.stat").write_text("nr_periods 10\nnr_throttled 9\nthrottled_time 1\n")
    if version == 1:
        (group / "cpu.cfs_quota_us").write_text("5000\n")
        (group / "cpu.cfs_period_us").write_text("50000\n")
    else:
        (group / "cpu.max").write_text("5000 50000\n")
    # A child starts in its parent's group: a quota there throttles both alike (a CI container's
    # CPU limit over the whole platform), which says nothing about either.
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"]) as sibling:
        try:
            assert cpu_quota.own_group_throttling(os.getpid(), controller, beside=sibling.pid) is None
        finally:
            sibling.kill()
    # Beside a pid no process can have, the group is this one's own: its counters are read.
    nobody = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1
    assert cpu_quota.own_group_throttling(os.getpid(), controller, beside=nobody) == cpu_quota.Throttling(
        10, 9, period_us=50_000
    ), "the group's own period, which turns busy time into periods"
    (group / "cpu.stat").unlink()
    assert cpu_quota.own_group_throttling(os.getpid(), controller, beside=nobody) is None


def test_the_cgroup_root_override_plays_a_host_without_a_cpu_controller(
    tree: Tree, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # INFERCHAOS_CGROUP_ROOT, which memory budgets read, points the cpu controller's detection too.
    empty = tmp_path / "no-cgroups"
    empty.mkdir()
    monkeypatch.setenv("INFERCHAOS_CGROUP_ROOT", str(empty))
    assert cpu_quota.find_cpu_controller() is None
    with pytest.raises(Unsupported, match=f"no cgroup cpu controller under {empty}"):
        SlowEngine().plan(tree.env(), {"mechanism": "cgroup"})
