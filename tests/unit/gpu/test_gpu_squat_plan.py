"""squat_device_memory's plan: complete validation, clear refusals, exactly what would be touched."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psutil
import pytest

from inferchaos.errors import ConfigError, Unsupported
from inferchaos.faults.device import devices, squat
from inferchaos.faults.device.squat import SquatDeviceMemory
from inferchaos.primitives import memory_budget
from inferchaos.primitives.memory_budget import MemoryBudget
from inferchaos.primitives.nvml import Nvml
from tests.fakes.gpu import GIB, FakeGpu, FakeLocalEnv, FakePynvml, replica_record, write_budget

BUDGET_LIMIT = 2560 * 1024 * 1024
NO_DRIVER = "no CUDA driver (libcuda.so.1) on this machine: libcuda.so.1: cannot open shared object file"


@pytest.fixture
def budgets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_env: FakeLocalEnv
) -> dict[str, MemoryBudget]:
    """Replica budgets of the fake environment: replica-1 running (1.2 GB charged), replica-0 likewise."""
    found = {
        f"inferchaos-abc123-replica-{slot}": write_budget(
            tmp_path / "cgroup", f"inferchaos-abc123-replica-{slot}", BUDGET_LIMIT, 1_200_000_000
        )
        for slot in (0, 1)
    }
    monkeypatch.setattr(squat, "budgets_available", lambda: (True, ""))
    monkeypatch.setattr(squat, "find_budget", found.get)
    for slot in (0, 1):
        replica_record(slot, vllm_pid=4000 + slot).save(fake_env.state.replicas_dir)
    return found


@pytest.fixture
def no_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(squat, "cuda_available", lambda: (False, NO_DRIVER))


@pytest.fixture
def one_gpu(monkeypatch: pytest.MonkeyPatch) -> FakePynvml:
    nvml = FakePynvml([FakeGpu(total=80 * GIB, used=2 * GIB)])
    monkeypatch.setattr(squat, "cuda_available", lambda: (True, ""))
    monkeypatch.setattr(devices, "Nvml", lambda: Nvml(nvml))
    return nvml


def _plan(env: Any, **params: Any) -> Any:
    return SquatDeviceMemory().plan(env, params)


def test_no_budgets_and_no_driver_is_unsupported_here_with_each_reason(
    fake_env: FakeLocalEnv, monkeypatch: pytest.MonkeyPatch, no_cuda: None
) -> None:
    monkeypatch.setattr(squat, "budgets_available", lambda: (False, "memory cgroups need root"))
    # Unsupported, not ConfigError: the experiment is fine, this host lacks what it needs.
    with pytest.raises(Unsupported, match="budgets cannot be used here: memory cgroups need root"):
        _plan(fake_env, device="host:1", fraction=0.75)
    with pytest.raises(Unsupported, match=r"cuda:0 cannot be squatted here: no CUDA driver \(libcuda.so.1\)"):
        _plan(fake_env, device="cuda:0", fraction=0.25)
    assert not issubclass(Unsupported, ConfigError)


def test_a_host_without_cgroups_is_unsupported_naming_the_root(
    fake_env: FakeLocalEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(memory_budget.CGROUP_ROOT_ENV, str(tmp_path))
    with pytest.raises(Unsupported, match=f"no cgroup memory controller under {tmp_path}"):
        _plan(fake_env, device="host:1", fraction=0.75)


def test_host_plan_lists_the_budget_the_replica_and_its_process_group(
    fake_env: FakeLocalEnv, budgets: dict[str, MemoryBudget]
) -> None:
    plan = _plan(fake_env, device="host:1", fraction=0.75)
    assert plan.params["bytes"] == int(BUDGET_LIMIT * 0.75)
    assert plan.targets == [
        "device:host:1",
        "memory-cgroup:inferchaos-abc123-replica-1",
        "process:squatter (new)",
        "replica:replica-1",
        "process-group:4001",
    ]
    assert "replica-0 keep serving" in plan.description


def test_host_device_without_a_budget_does_not_exist(
    fake_env: FakeLocalEnv, budgets: dict[str, MemoryBudget]
) -> None:
    with pytest.raises(
        ConfigError, match="device host:5 does not exist: environment abc123 has no memory budget"
    ):
        _plan(fake_env, device="host:5", bytes=GIB)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"device": "host:1"}, "exactly one of 'bytes' or 'fraction'"),
        ({"device": "host:1", "bytes": GIB, "fraction": 0.5}, "exactly one of 'bytes' or 'fraction'"),
        ({"device": "host:1", "fraction": 1.5}, r"fraction must be in \(0, 1\]"),
        ({"device": "host:1", "bytes": -5}, "positive number of bytes"),
        ({"device": "gpu0", "bytes": GIB}, "neither host:<slot>"),
        ({"device": "host:1", "bytes": GIB, "backend": "cuda"}, "does not match device host:1"),
        ({"device": "host:1", "bytes": GIB, "color": "red"}, r"unknown parameter\(s\) color"),
        ({"bytes": GIB}, r"missing required parameter\(s\) device"),
    ],
)
def test_malformed_parameters_are_refused(
    fake_env: FakeLocalEnv, budgets: dict[str, MemoryBudget], params: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        SquatDeviceMemory().plan(fake_env, params)


def test_host_squat_over_the_machine_safety_cap_is_refused(
    fake_env: FakeLocalEnv, budgets: dict[str, MemoryBudget], tmp_path: Path
) -> None:
    machine = psutil.virtual_memory().total
    # A budget larger than the machine, so only the machine cap can refuse.
    budgets["inferchaos-abc123-replica-1"] = write_budget(
        tmp_path / "big", "inferchaos-abc123-replica-1", 4 * machine, 0
    )
    with pytest.raises(ConfigError, match="over the safety cap of 50% of this machine"):
        _plan(fake_env, device="host:1", bytes=int(0.6 * machine))


def test_host_squat_larger_than_the_budget_is_refused(
    fake_env: FakeLocalEnv, budgets: dict[str, MemoryBudget]
) -> None:
    with pytest.raises(ConfigError, match="does not fit in host:1's .* budget"):
        _plan(fake_env, device="host:1", fraction=1.0)


def test_host_squat_too_small_to_bite_is_refused(
    fake_env: FakeLocalEnv, budgets: dict[str, MemoryBudget]
) -> None:
    with pytest.raises(ConfigError, match="the replica would start normally"):
        _plan(fake_env, device="host:1", bytes=100 * 1024 * 1024, replica_need_bytes=1_000_000_000)


def test_restart_that_would_leave_no_healthy_replica_is_refused(
    fake_env: FakeLocalEnv, budgets: dict[str, MemoryBudget]
) -> None:
    replica_record(0, state="starting").save(fake_env.state.replicas_dir)
    with pytest.raises(ConfigError, match="would leave no healthy replica"):
        _plan(fake_env, device="host:1", fraction=0.75)


def test_squat_beside_a_running_replica_that_would_oom_kill_it_is_refused(
    fake_env: FakeLocalEnv, budgets: dict[str, MemoryBudget]
) -> None:
    with pytest.raises(ConfigError, match="OOM-kill the running replica"):
        _plan(fake_env, device="host:1", fraction=0.75, restart_replica=False)


def test_cuda_plan_on_a_missing_gpu_and_over_the_cap(fake_env: FakeLocalEnv, one_gpu: FakePynvml) -> None:
    with pytest.raises(ConfigError, match="device cuda:3 does not exist; NVML sees 1 GPU"):
        _plan(fake_env, device="cuda:3", fraction=0.25)
    with pytest.raises(ConfigError, match="over the safety cap of 95%"):
        _plan(fake_env, device="cuda:0", fraction=0.99)
    with pytest.raises(ConfigError, match="restart_replica applies to host"):
        _plan(fake_env, device="cuda:0", fraction=0.25, restart_replica=True)


def test_cuda_plan_sizes_the_squat_from_the_device(fake_env: FakeLocalEnv, one_gpu: FakePynvml) -> None:
    plan = _plan(fake_env, device="cuda:0", fraction=0.25)
    assert plan.params["bytes"] == 20 * GIB
    assert plan.targets == ["device:cuda:0", "process:squatter (new)"]
    assert one_gpu.initialised == 0, "plan must shut the NVML session it opened"
