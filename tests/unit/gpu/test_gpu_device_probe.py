"""The device probe: NVML per GPU, else the local replica budgets, else a reason; and NVML's process view."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferchaos.primitives import memory_budget, nvml
from inferchaos.primitives.nvml import Nvml, NvmlError, nvml_available
from inferchaos.steady_state.device import DeviceProbe, device_probe_for
from inferchaos.steady_state.probe_base import Sample
from tests.fakes.gpu import GIB, FakeGpu, FakeLocalEnv, FakePynvml, fake_cgroup_tree, write_budget


def _by_name(samples: list[Sample]) -> dict[tuple[str, str], float]:
    return {(s.probe, s.label_text()): s.value for s in samples}


@pytest.fixture
def no_pynvml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nvml, "NVML_MODULE", "pynvml_is_not_installed_here")


async def test_gpus_are_read_through_nvml_per_device() -> None:
    nvml = FakePynvml([FakeGpu(total=80 * GIB, used=20 * GIB), FakeGpu(total=80 * GIB, used=1 * GIB)])
    probe = DeviceProbe(nvml_module=nvml)
    samples = _by_name(await probe.read())
    assert samples[("device.free_bytes", "device=cuda:0")] == 60 * GIB
    assert samples[("device.used_bytes", "device=cuda:1")] == 1 * GIB
    assert samples[("device.total_bytes", "device=cuda:1")] == 80 * GIB
    assert samples[("device.available", "device=cuda:0")] == 1.0
    probe.close()
    assert nvml.initialised == 0


async def test_without_a_gpu_the_replica_budgets_are_the_devices(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_pynvml: None
) -> None:
    monkeypatch.setenv(memory_budget.CGROUP_ROOT_ENV, str(tmp_path))
    write_budget(
        fake_cgroup_tree(tmp_path, 1),
        "inferchaos-abc123-replica-0",
        2 * GIB,
        usage=GIB + 300,
        inactive_file=300,
    )
    samples = _by_name(await DeviceProbe("abc123", slots=(0, 1)).read())
    # Inactive page cache is reclaimable: it does not count as taken.
    assert samples[("device.used_bytes", "device=host:0")] == GIB
    assert samples[("device.free_bytes", "device=host:0")] == GIB
    assert samples[("device.total_bytes", "device=host:0")] == 2 * GIB
    assert samples[("device.available", "device=host:0")] == 1.0
    assert not any("host:1" in labels for _, labels in samples), "slot 1 has no budget"


async def test_the_probe_for_a_local_environment_reads_its_replica_budgets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_pynvml: None, fake_env: FakeLocalEnv
) -> None:
    monkeypatch.setenv(memory_budget.CGROUP_ROOT_ENV, str(tmp_path))
    parent = fake_cgroup_tree(tmp_path, 2)
    for slot in (0, 1):
        write_budget(parent, f"inferchaos-abc123-replica-{slot}", version=2, limit=2 * GIB, usage=GIB)
    samples = _by_name(await device_probe_for(fake_env).read())
    assert samples[("device.available", "device=host:0")] == 1.0
    assert samples[("device.free_bytes", "device=host:1")] == GIB


async def test_with_neither_it_reports_unavailable_with_the_reason(no_pynvml: None) -> None:
    (sample,) = await DeviceProbe().read()
    assert (sample.probe, sample.value) == ("device.available", 0.0)
    assert "nvidia-ml-py package is not installed" in sample.labels["reason"]
    assert "no local environment attached" in sample.labels["reason"]


async def test_an_nvml_that_fails_to_start_is_a_reason_not_an_error() -> None:
    (sample,) = await DeviceProbe(nvml_module=FakePynvml([], init_error="Driver Not Loaded")).read()
    assert sample.value == 0.0
    assert "nvmlInit failed: Driver Not Loaded" in sample.labels["reason"]


def test_nvml_observation_lists_the_compute_processes_and_their_memory() -> None:
    nvml = FakePynvml([FakeGpu(total=80 * GIB, used=22 * GIB, processes=[(4242, 20 * GIB), (77, None)])])
    with Nvml(nvml) as session:
        observation = session.observe(0)
        with pytest.raises(NvmlError, match="GPU 2 does not exist; NVML sees 1 GPU"):
            session.observe(2)
    assert observation.pids == [4242, 77]
    assert [p.used_bytes for p in observation.processes] == [20 * GIB, None]
    assert observation.memory.free_bytes == 58 * GIB
    assert nvml.initialised == 0


def test_nvml_unavailable_is_a_clear_reason(no_pynvml: None) -> None:
    usable, why = nvml_available()
    assert not usable
    assert "install the project's `gpu` extra" in why
    with pytest.raises(NvmlError, match="NVML unavailable"):
        Nvml()
