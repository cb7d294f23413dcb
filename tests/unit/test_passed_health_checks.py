"""A local environment is whole only once each replica's latest Serve health check passed.

A replica that answers /health after a control froze it may still owe Serve failed checks in a
row, and Serve replaces it at the third. Each replica stamps the outcome of every check
(environments/local/serve_app.py); the environment waits while a replica's latest one failed.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from inferchaos.primitives.replica_slots import last_health_check_passed, mark_health_check
from tests.unit.test_vllm_blind_health_check import recorded_env

BOTH = {"replica-0", "replica-1"}


def test_the_latest_check_to_finish_decides(tmp_path: Path) -> None:
    assert last_health_check_passed(tmp_path, "replica-0") is False, "never checked is not passing"
    mark_health_check(tmp_path, "replica-0", passed=True)
    assert last_health_check_passed(tmp_path, "replica-0") is True
    time.sleep(0.05)
    mark_health_check(tmp_path, "replica-0", passed=False)
    assert last_health_check_passed(tmp_path, "replica-0") is False
    time.sleep(0.05)
    mark_health_check(tmp_path, "replica-0", passed=True)
    assert last_health_check_passed(tmp_path, "replica-0") is True


def test_the_wait_holds_a_replica_whose_latest_check_failed_until_one_passes(tmp_path: Path) -> None:
    env = recorded_env(tmp_path / "env")
    replicas_dir = env.load_state().replicas_dir
    replicas_dir.mkdir(parents=True, exist_ok=True)
    for name in BOTH:
        mark_health_check(replicas_dir, name, passed=True)
    assert env.wait_for_passing_health_checks(BOTH, time.monotonic() + 30) == BOTH, "no wait when all pass"
    time.sleep(0.05)
    # replica-1 failed its latest check (frozen, say): held to the deadline unless one passes.
    mark_health_check(replicas_dir, "replica-1", passed=False)
    assert env.wait_for_passing_health_checks(BOTH, time.monotonic() + 0.5) == {"replica-0"}
    timer = threading.Timer(0.3, mark_health_check, (replicas_dir, "replica-1", True))
    timer.start()
    passing = env.wait_for_passing_health_checks(BOTH, time.monotonic() + 30)
    timer.join()
    assert passing == BOTH
