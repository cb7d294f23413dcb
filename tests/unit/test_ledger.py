"""The ledger keeps every live injection on disk until its revert removes it."""

from __future__ import annotations

from pathlib import Path

from inferchaos.faults.base import FaultHandle
from inferchaos.faults.ledger import Ledger
from inferchaos.layers import Layer


def test_entries_survive_a_new_ledger_object(tmp_path: Path) -> None:
    handle = FaultHandle(fault="ray.leak_actors", layer=Layer.RAY, params={"count": 3}, env="local")
    Ledger(tmp_path).record(handle)
    handle.state["actor_ids"] = ["a1", "a2"]
    Ledger(tmp_path).record(handle)
    (loaded,) = Ledger(tmp_path).entries()
    assert loaded.id == handle.id and loaded.layer is Layer.RAY
    assert loaded.state == {"actor_ids": ["a1", "a2"]}


def test_remove_is_idempotent(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    handle = FaultHandle(fault="ray.kill_node", layer=Layer.RAY, params={}, env="local")
    ledger.record(handle)
    ledger.remove(handle.id)
    ledger.remove(handle.id)
    assert ledger.is_empty()
