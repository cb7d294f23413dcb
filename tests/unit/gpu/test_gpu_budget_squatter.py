"""A host squatter started into a replica's memory budget is charged there and is not the OOM victim.

Needs what the local environment's budgets need: root and a writable memory cgroup (v1, as
on this machine, or v2); it makes a small budget of its own and removes it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from inferchaos.errors import FaultError
from inferchaos.faults.device.launch import (
    SquatterSpec,
    end_squatter,
    squatter_process,
    start_squatter,
    wait_ready,
)
from inferchaos.faults.device.restart import budget_rss_bytes, wait_budget_released
from inferchaos.primitives.memory_budget import MemoryBudget, budget_memory, budgets_available, open_budget
from inferchaos.primitives.processes import kill_tree_now, pid_alive
from tests.skips import host_lacks

MIB = 1024 * 1024


@pytest.fixture
def budget() -> Iterator[MemoryBudget]:
    usable, why = budgets_available()
    if not usable:
        host_lacks(f"memory budgets are unavailable here: {why}")
    made = open_budget(f"inferchaos-unit-{uuid.uuid4().hex[:8]}-replica-0", 256 * MIB)
    yield made
    for pid in made.pids():
        kill_tree_now(pid)
    made.path.rmdir()


def test_squatter_runs_inside_the_budget_and_is_charged_there(budget: MemoryBudget, tmp_path: Path) -> None:
    spec = SquatterSpec(
        "host", "host:0", 64 * MIB, uuid.uuid4().hex[:12], tmp_path / "squatter.log", budget=budget
    )
    pid = start_squatter(spec)
    try:
        ready = wait_ready(pid, spec.log_path, timeout_s=30)
        assert ready.pid == pid, "the budget wrapper execs the squatter: one pid, one process group"
        assert pid in budget.pids()
        assert Path(f"/proc/{pid}/oom_score_adj").read_text().strip() == "0"
        assert budget_rss_bytes(budget) >= 64 * MIB
        device = budget_memory(budget, "host:0")
        assert device.total_bytes == 256 * MIB
        assert device.free_bytes <= 256 * MIB - 64 * MIB
    finally:
        ended = [end_squatter(proc) for proc in squatter_process(pid, spec.squat_id)]
    assert ended == ["released"]
    assert not pid_alive(pid)
    assert wait_budget_released(budget, [pid], timeout_s=10) is not None


def test_squatter_larger_than_its_budget_fails_with_the_kernels_verdict(
    budget: MemoryBudget, tmp_path: Path
) -> None:
    if psutil.swap_memory().total > 0:
        host_lacks("with swap the kernel may swap the squatter out rather than kill it")
    spec = SquatterSpec(
        "host", "host:0", 512 * MIB, uuid.uuid4().hex[:12], tmp_path / "squatter.log", budget=budget
    )
    pid = start_squatter(spec)
    with pytest.raises(FaultError, match="was killed by SIGKILL before it held its memory"):
        wait_ready(pid, spec.log_path, timeout_s=30)
