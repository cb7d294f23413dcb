"""Inject when the squatter cannot take its memory: the squatter's own reason, and nothing left behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferchaos.errors import FaultError
from inferchaos.faults.device import devices, squat
from inferchaos.faults.device.cuda import cuda_available
from inferchaos.faults.device.launch import find_squatters
from inferchaos.faults.device.squat import SquatDeviceMemory
from inferchaos.faults.ledger import Ledger
from inferchaos.primitives.nvml import Nvml
from tests.fakes.gpu import GIB, FakeGpu, FakeLocalEnv, FakePynvml
from tests.skips import host_lacks


def test_a_squatter_that_cannot_allocate_fails_inject_and_leaves_no_entry(
    fake_env: FakeLocalEnv, inferchaos_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if cuda_available()[0]:
        host_lacks("this machine has a CUDA driver: the squatter would really allocate")
    # Plan is told a GPU exists; the squatter process then finds no driver, as on a broken node.
    monkeypatch.setattr(squat, "cuda_available", lambda: (True, ""))
    monkeypatch.setattr(devices, "Nvml", lambda: Nvml(FakePynvml([FakeGpu(total=80 * GIB, used=GIB)])))
    ledger = Ledger(tmp_path / "ledger")
    fault = SquatDeviceMemory()

    with pytest.raises(FaultError, match=r"the squatter refused: no CUDA driver \(libcuda.so.1\)"):
        fault.inject(fake_env, {"device": "cuda:0", "fraction": 0.1}, ledger)

    assert ledger.is_empty()
    logs = list((inferchaos_home / "logs").glob("squatter-*.log"))
    assert len(logs) == 1, "the squatter's log stays for the post-mortem"
    assert find_squatters(logs[0].stem.removeprefix("squatter-")) == []
