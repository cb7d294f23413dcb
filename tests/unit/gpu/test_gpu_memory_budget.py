"""Replica memory budgets on cgroup v1, on cgroup v2, and on a host with neither.

Each test points INFERCHAOS_CGROUP_ROOT at a fake cgroup tree of plain files (tests/fakes/gpu.py);
the real v1 hierarchy of this machine is exercised by test_gpu_budget_squatter.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from inferchaos.errors import InferchaosError
from inferchaos.primitives import memory_budget
from inferchaos.primitives.memory_budget import (
    MemoryBudgetError,
    MemoryController,
    budget_memory,
    budgets_available,
    find_budget,
    memory_controller_available,
    open_budget,
    parse_memory_cgroup,
    remove_budgets,
)
from tests.fakes.gpu import GIB, fake_cgroup_tree, write_budget

NAME = "inferchaos-abc123-replica-1"


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty folder that detection treats as the cgroup filesystem."""
    folder = tmp_path / "cgroup"
    folder.mkdir()
    monkeypatch.setenv(memory_budget.CGROUP_ROOT_ENV, str(folder))
    return folder


def test_the_root_defaults_to_sys_fs_cgroup_and_follows_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(memory_budget.CGROUP_ROOT_ENV, raising=False)
    assert memory_budget.cgroup_root() == Path("/sys/fs/cgroup")
    monkeypatch.setenv(memory_budget.CGROUP_ROOT_ENV, str(tmp_path))
    assert memory_budget.cgroup_root() == tmp_path


def test_an_empty_root_is_a_host_without_cgroups(root: Path) -> None:
    usable, why = budgets_available()
    assert not usable
    assert why.startswith(f"no cgroup memory controller under {root}")
    assert find_budget(NAME) is None
    assert remove_budgets("abc123") == []
    with pytest.raises(MemoryBudgetError, match="memory budgets are unavailable here: no cgroup memory"):
        open_budget(NAME, GIB)


@pytest.mark.parametrize("version", [1, 2])
def test_a_budget_is_made_found_read_and_removed(root: Path, version: int) -> None:
    parent = fake_cgroup_tree(root, version)
    assert memory_controller_available() == (MemoryController(version, parent), "")
    made = open_budget(NAME, 2 * GIB)
    assert (made.path, made.version) == (parent / NAME, version)
    limit_file = "memory.limit_in_bytes" if version == 1 else "memory.max"
    assert (parent / NAME / limit_file).read_text() == str(2 * GIB)
    # What the kernel would show once a replica runs in it: 1.5 GiB charged, 0.5 GiB of it cache.
    write_budget(
        parent, NAME, 2 * GIB, usage=GIB + GIB // 2, inactive_file=GIB // 2, version=version, oom_kills=1
    )
    found = find_budget(NAME)
    assert found == made
    assert found is not None and found.oom_kills() == 1
    device = budget_memory(found, "host:1")
    assert (device.total_bytes, device.used_bytes, device.free_bytes) == (2 * GIB, GIB, GIB)
    for child in (parent / NAME).iterdir():
        child.unlink()  # the kernel's control files vanish with the group; plain files do not
    assert remove_budgets("abc123") == [NAME]
    assert find_budget(NAME) is None


def test_v2_refuses_a_root_that_does_not_hand_memory_down(root: Path) -> None:
    parent = fake_cgroup_tree(root, 2)
    (parent / "cgroup.subtree_control").write_text("cpu pids\n")
    usable, why = budgets_available()
    assert not usable
    assert f"cgroup v2 at {parent} does not hand the memory controller to its children" in why
    assert "echo +memory" in why


def test_v2_in_a_hybrid_tree_is_found_under_unified(root: Path) -> None:
    unified = fake_cgroup_tree(root / "unified", 2)
    assert memory_controller_available() == (MemoryController(2, unified), "")


def test_v1_wins_on_a_hybrid_host_where_it_holds_memory(root: Path) -> None:
    v1 = fake_cgroup_tree(root, 1)
    (root / "unified").mkdir()
    (root / "unified" / "cgroup.controllers").write_text("")
    assert memory_controller_available() == (MemoryController(1, v1), "")


@pytest.mark.parametrize("systemd", [True, False], ids=["systemd", "no-systemd"])
def test_without_write_access_the_reason_is_no_writable_cgroup(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, systemd: bool
) -> None:
    parent = fake_cgroup_tree(root, 2)
    runtime = tmp_path / "run-systemd-system"
    if systemd:
        runtime.mkdir()
    monkeypatch.setattr(memory_budget, "SYSTEMD_RUNTIME_DIR", runtime)
    # As an unprivileged user sees the root-owned cgroup filesystem.
    monkeypatch.setattr(memory_budget.os, "access", lambda path, mode: False)
    usable, why = budgets_available()
    assert not usable
    assert why.startswith(f"no writable cgroup: the cgroup v2 memory controller at {parent} is not writable")
    if systemd:
        assert "systemd is present" in why and "does not create one yet" in why
    else:
        assert f"no systemd here ({runtime} is absent)" in why


def test_a_budget_error_is_an_inferchaos_error() -> None:
    assert issubclass(MemoryBudgetError, InferchaosError)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("12:pids:/a\n7:memory:/inferchaos-x-replica-1\n0::/user.slice\n", "/inferchaos-x-replica-1"),
        ("0::/inferchaos-x-replica-1\n", "/inferchaos-x-replica-1"),
        ("12:pids:/a\n", ""),
    ],
    ids=["v1-hybrid", "v2", "none"],
)
def test_the_memory_cgroup_of_a_process_is_read_for_either_version(text: str, expected: str) -> None:
    assert parse_memory_cgroup(text) == expected
