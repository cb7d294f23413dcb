"""Reverting a squat from the ledger alone: idempotent, crash-safe, and never signalling a stranger."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from inferchaos.ctk.device_actions import rollback_squat_device_memory
from inferchaos.faults.base import FaultHandle
from inferchaos.faults.device.launch import (
    SQUAT_ID_VAR,
    SquatterSpec,
    find_squatters,
    start_squatter,
    wait_ready,
)
from inferchaos.faults.device.squat import SquatDeviceMemory
from inferchaos.faults.ledger import Ledger
from inferchaos.layers import Layer
from inferchaos.primitives.processes import kill_tree_now, pid_alive, spawn_process_group

MIB = 1024 * 1024


def _handle(state: dict[str, Any]) -> FaultHandle:
    base = {"backend": "host", "device": "host:1", "bytes": 4 * MIB}
    return FaultHandle(
        fault="device.squat_device_memory",
        layer=Layer.DEVICE,
        params={"device": "host:1", "bytes": 4 * MIB},
        env="local",
        state={**base, **state},
    )


def _gone_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=10)
    return proc.pid


@pytest.fixture
def live_squatter(tmp_path: Path) -> Iterator[tuple[str, int]]:
    """A real host squatter (4 MiB, no budget) started as the fault starts it; (squat id, pid)."""
    squat_id = "feedc0ffee01"
    spec = SquatterSpec("host", "host:1", 4 * MIB, squat_id, tmp_path / "squatter.log")
    pid = start_squatter(spec)
    wait_ready(pid, spec.log_path, timeout_s=30)
    yield squat_id, pid
    kill_tree_now(pid)


def test_revert_of_an_entry_whose_squatter_is_gone_is_idempotent(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger")
    ledger.record(_handle({"squatter_pid": _gone_pid()}))
    (entry,) = ledger.entries()

    fault = SquatDeviceMemory()
    fault.revert(None, entry, ledger)
    assert ledger.is_empty()
    assert entry.reverted_at is not None
    first_reverted_at = entry.reverted_at

    fault.revert(None, entry, ledger)
    assert ledger.is_empty()
    assert entry.reverted_at == first_reverted_at


def test_revert_ends_a_live_squatter_from_the_ledger_entry_alone(
    tmp_path: Path, live_squatter: tuple[str, int]
) -> None:
    squat_id, pid = live_squatter
    ledger = Ledger(tmp_path / "ledger")
    handle = _handle({"squatter_pid": pid})
    handle.id = squat_id
    ledger.record(handle)

    # A fresh fault object and the entry read back from disk: what `inferchaos cleanup` has after a crash.
    (entry,) = Ledger(tmp_path / "ledger").entries()
    SquatDeviceMemory().revert(None, entry, ledger)

    assert not pid_alive(pid)
    assert entry.state["squatter_ended"] == "released", "SIGTERM lets the squatter free its memory and exit 0"
    assert ledger.is_empty()


def test_revert_finds_the_squatter_by_its_id_when_its_pid_never_reached_the_ledger(
    tmp_path: Path, live_squatter: tuple[str, int]
) -> None:
    squat_id, pid = live_squatter
    ledger = Ledger(tmp_path / "ledger")
    handle = _handle({})
    handle.id = squat_id
    ledger.record(handle)

    SquatDeviceMemory().revert(None, handle, ledger)
    assert not pid_alive(pid)
    assert find_squatters(squat_id) == []
    assert ledger.is_empty()


def test_revert_never_signals_a_recorded_pid_that_is_no_squatter(tmp_path: Path) -> None:
    stranger = spawn_process_group(
        [sys.executable, "-c", "import time; time.sleep(60)"], dict(os.environ), tmp_path / "stranger.log"
    )
    try:
        ledger = Ledger(tmp_path / "ledger")
        handle = _handle({"squatter_pid": stranger})
        ledger.record(handle)
        SquatDeviceMemory().revert(None, handle, ledger)
        assert pid_alive(stranger), "a reused pid must survive the revert"
        assert ledger.is_empty()
    finally:
        kill_tree_now(stranger)


def test_revert_ends_a_squatter_that_an_older_release_started(tmp_path: Path) -> None:
    # Before the device faults moved to faults/device the squatter ran as
    # inferchaos.faults.gpu.squatter: `inferchaos cleanup` after an upgrade must still end it.
    squat_id = "feedc0ffee02"
    argv = [
        sys.executable,
        "-c",
        "import time; time.sleep(60)",
        "-m",
        "inferchaos.faults.gpu.squatter",
    ]
    older = spawn_process_group(argv, {**os.environ, SQUAT_ID_VAR: squat_id}, tmp_path / "older.log")
    try:
        ledger = Ledger(tmp_path / "ledger")
        handle = _handle({"squatter_pid": older})
        handle.id = squat_id
        ledger.record(handle)
        SquatDeviceMemory().revert(None, handle, ledger)
        assert not pid_alive(older), "the older release's squatter must be ended"
        assert ledger.is_empty()
    finally:
        kill_tree_now(older)


def test_rollback_action_reverts_only_squat_entries(inferchaos_home: Path) -> None:
    ledger = Ledger()
    squat = _handle({"squatter_pid": _gone_pid()})
    other = FaultHandle(fault="kill_node", layer=Layer.RAY, params={}, env="local")
    ledger.record(squat)
    ledger.record(other)

    assert rollback_squat_device_memory() == [squat.id]
    assert [h.id for h in ledger.entries()] == [other.id]
    assert rollback_squat_device_memory() == []


def test_rollback_action_reverts_an_entry_an_older_release_wrote(inferchaos_home: Path) -> None:
    ledger = Ledger()
    old = _handle({"squatter_pid": _gone_pid()})
    old.fault = "squat_device_memory"  # the name before faults were <layer>.<verb>
    ledger.record(old)

    assert rollback_squat_device_memory() == [old.id]
    assert ledger.is_empty()
