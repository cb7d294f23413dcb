"""The ledger keeps every live injection on disk until its revert removes it."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from inferchaos.faults.base import FaultHandle
from inferchaos.faults.ledger import Ledger
from inferchaos.layers import Layer
from tests.fakes.scripted_world import FAKE_FAULT, run_cleanup


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


def _live(ledger: Ledger, fault: str = "ray.leak_actors") -> FaultHandle:
    handle = FaultHandle(fault=fault, layer=Layer.RAY, params={}, env="local")
    ledger.record(handle)
    return handle


UNREADABLE = {
    "bad JSON": ('{"fault": "ray.kill_node", "layer": ', "not JSON"),
    "unknown layer": (
        '{"fault": "x.y", "layer": "mainframe", "params": {}, "env": "local", "id": "broken"}',
        "unknown layer 'mainframe'",
    ),
    "missing keys": (
        '{"fault": "ray.kill_node", "layer": "ray", "id": "broken"}',
        "missing keys: params, env",
    ),
    "not an object": ("[1, 2]", "not a JSON object"),
}


@pytest.mark.parametrize("text, why", UNREADABLE.values(), ids=UNREADABLE.keys())
def test_an_unreadable_entry_is_reported_and_kept_and_the_others_still_read(
    tmp_path: Path, text: str, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    ledger = Ledger(tmp_path)
    first, second = _live(ledger), _live(ledger)
    broken = tmp_path / "broken.json"
    broken.write_text(text)

    scan = ledger.scan()
    assert [h.id for h in scan.handles] == [first.id, second.id]
    (entry,) = scan.unreadable
    assert entry.path == broken and why in entry.why, entry.why

    with caplog.at_level(logging.WARNING, logger="inferchaos.faults.ledger"):
        assert [h.id for h in ledger.entries()] == [first.id, second.id]
    (line,) = [r.getMessage() for r in caplog.records]
    assert str(broken) in line and why in line and "\n" not in line
    assert broken.read_text() == text, "the unreadable entry was changed or removed"
    ledger.remove(first.id)
    ledger.remove(second.id)
    assert not ledger.is_empty(), "a ledger holding an unreadable entry is not empty"


def test_an_entry_under_another_name_is_unreadable(tmp_path: Path) -> None:
    """revert removes `<id>.json`: an entry filed under another name would outlive its revert."""
    ledger = Ledger(tmp_path)
    handle = _live(ledger)
    (tmp_path / f"{handle.id}.json").rename(tmp_path / "copied.json")
    (entry,) = ledger.scan().unreadable
    assert "does not match its file name" in entry.why


def test_cleanup_reverts_every_readable_entry_and_keeps_the_unreadable_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("INFERCHAOS_HOME", str(tmp_path))
    ledger = Ledger()
    live = [_live(ledger, FAKE_FAULT), _live(ledger, FAKE_FAULT)]
    broken = ledger.folder / "0000-broken.json"  # sorted first: it must not stop the others
    broken.write_text("{not json")

    assert run_cleanup(monkeypatch) == 1
    out, err = capsys.readouterr()
    for handle in live:
        assert f"reverted {FAKE_FAULT} {handle.id}" in out
    assert [p.name for p in ledger.folder.glob("*.json")] == [broken.name]
    assert broken.read_text() == "{not json"
    assert f"ledger entry {broken} is unreadable: not JSON" in err
    assert "cleanup incomplete: 1 entry(ies) left" in err and broken.name in err.splitlines()[-1]

    # Once the broken file is dealt with, cleanup succeeds and has nothing left to do.
    broken.unlink()
    assert run_cleanup(monkeypatch) == 0
    assert "the ledger is empty" in capsys.readouterr().out


def test_cleanup_keeps_an_entry_whose_revert_fails_and_reverts_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("INFERCHAOS_HOME", str(tmp_path))
    ledger = Ledger()
    unknown = _live(ledger, "ray.no_such_fault")
    reverted = _live(ledger, FAKE_FAULT)

    assert run_cleanup(monkeypatch) == 1
    out, err = capsys.readouterr()
    assert f"reverted {FAKE_FAULT} {reverted.id}" in out
    assert f"ledger entry {unknown.id}.json: unknown fault 'ray.no_such_fault'" in err
    assert [h.id for h in ledger.entries()] == [unknown.id]
