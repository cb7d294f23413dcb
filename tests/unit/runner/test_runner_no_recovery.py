"""A platform that does not come back fails the run; it is not an error of inferchaos.

A revert that did its part and then waited out the platform (the GCS not back, Serve's
controller not back) raises PlatformDidNotRecover: the run ends ``failed`` (exit 1) with the
reason, the ledger keeps the entry for `inferchaos cleanup`, and the journal says the rollback
failed. Validation keeps every recovery window shorter than its revert's own wait, so that a
platform back late fails the window rather than timing out the revert.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from inferchaos.cli import run_command as cli_run
from inferchaos.errors import ConfigError, PlatformDidNotRecover
from inferchaos.faults.base import RevertWait
from inferchaos.faults.ledger import Ledger
from inferchaos.faults.registry import get_fault
from inferchaos.faults.vllm.flood import NAME as FLOOD
from inferchaos.reports.verdict_schema import Status
from inferchaos.run.spec import ensure_experiment_is_valid, load_and_validate
from tests.fakes.scripted_world import (
    DEFAULT_SLOS,
    FAKE_FAULT,
    FakeEnv,
    FaultScript,
    RunResult,
    World,
    make_spec,
    run_cleanup,
    run_fake_experiment,
)

REPO = Path(__file__).resolve().parents[3]
SERVE_CONTROLLER_LOSS = REPO / "experiments" / "serve_controller_loss.yaml"
GCS_LOSS = REPO / "experiments" / "gcs_loss.yaml"
NOT_BACK = "the GCS did not come back within 30 s"


@pytest.fixture
def not_back_run(tmp_path: Path, private_home: Path) -> RunResult:
    """The fault bites; its revert then waits out a platform that never comes back."""
    spec = make_spec(tmp_path / "not_back.yaml")
    script = FaultScript(revert_raises=PlatformDidNotRecover(f"{FAKE_FAULT}: {NOT_BACK}"))
    return run_fake_experiment(spec, tmp_path / "run", script=script)


def test_a_revert_that_waits_out_the_platform_fails_the_run(
    not_back_run: RunResult,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    verdict = not_back_run.verdict
    assert verdict.status is Status.FAILED, verdict.reason
    assert verdict.exit_code == 1
    assert verdict.reason.startswith(f"no recovery: {FAKE_FAULT} revert: {NOT_BACK}; "), verdict.reason
    stored = json.loads(not_back_run.read("verdict.json"))
    assert (stored["status"], stored["reason"]) == ("failed", verdict.reason)
    # What `inferchaos run` exits with for this verdict.
    monkeypatch.setattr(cli_run, "run_experiment", lambda *args, **kwargs: verdict)
    spec = make_spec(tmp_path / "not_back.yaml")
    assert cli_run.run_one(spec, FakeEnv(), tmp_path / "cli-out", 0.25, False)[0] == 1  # type: ignore[arg-type]
    # The recovery is not sampled: the revert's wait already outlasted its window.
    assert not_back_run.world.count("evidence") == 1, not_back_run.world.names()

    # The journal's rollback is the truth: it failed, and says why.
    journal = json.loads(not_back_run.read("journal.json"))
    (rollback,) = journal["rollbacks"]
    assert rollback["status"] == "failed"
    assert NOT_BACK in json.dumps(rollback)

    # The ledger keeps the entry, and `inferchaos cleanup` reverts it once the platform is back.
    assert [h.fault for h in Ledger().entries()] == [FAKE_FAULT]
    assert "inferchaos cleanup" in verdict.reason
    assert run_cleanup(monkeypatch) == 0, capsys.readouterr().err
    assert Ledger().is_empty(), Ledger().entries()


def test_a_revert_that_breaks_in_inferchaos_stays_an_error(tmp_path: Path, private_home: Path) -> None:
    """Not every revert failure is the platform's: inferchaos' own stays `error` (exit 2)."""
    spec = make_spec(tmp_path / "broken.yaml")
    script = FaultScript(revert_raises=PermissionError("cannot signal pid 4242"))
    verdict = run_fake_experiment(spec, tmp_path / "run", script=script).verdict
    assert verdict.status is Status.ERROR and verdict.exit_code == 2, verdict.reason
    assert "revert failed: PermissionError: cannot signal pid 4242" in verdict.reason


# -- the recovery window against the revert's wait ----------------------------------------------


def _with_arguments(path: Path, arguments: dict[str, Any], **recovery: Any) -> tuple[dict[str, Any], int]:
    """The experiment at ``path`` with its fault action's arguments (and recovery keys) replaced."""
    raw = yaml.safe_load(path.read_text())
    index = next(
        i for i, a in enumerate(raw["method"]) if a.get("type") == "action" and "arguments" in a["provider"]
    )
    raw["method"][index]["provider"]["arguments"] = arguments
    raw["recovery"] = {**raw["recovery"], **recovery}
    return raw, index


def test_each_fault_that_waits_for_the_platform_says_how_long() -> None:
    gcs, controller = get_fault("ray.kill_gcs"), get_fault("ray.kill_serve_controller")
    assert gcs.revert_wait(gcs.parse({"recover_timeout_s": 45})) == RevertWait(45, "recover_timeout_s")  # type: ignore[attr-defined]
    kept_down = controller.parse({"recover_timeout_s": 45, "keep_down": True})  # type: ignore[attr-defined]
    assert controller.revert_wait(kept_down).after_revert_s(15) == 45  # type: ignore[attr-defined]
    # Without keep_down Ray restarts it at once: the deadline counts from the kill.
    once = controller.parse({"recover_timeout_s": 45})  # type: ignore[attr-defined]
    assert controller.revert_wait(once).after_revert_s(15) == 30  # type: ignore[attr-defined]
    flood = get_fault(FLOOD)
    assert flood.revert_wait(flood.parse({})) is None  # type: ignore[attr-defined]


@pytest.mark.parametrize("path", [SERVE_CONTROLLER_LOSS, GCS_LOSS], ids=lambda p: p.stem)
def test_the_shipped_scenarios_leave_the_window_shorter_than_the_revert(path: Path) -> None:
    spec = load_and_validate(path)
    fault = get_fault(spec.fault.fault)
    wait = fault.revert_wait(fault.parse(spec.fault.params))  # type: ignore[attr-defined]
    assert spec.slos.recovery is not None
    assert spec.slos.recovery.within_s < wait.after_revert_s(spec.fault.duration_s)


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        # The window equals the wait: a controller back after 30 s could only time out the revert.
        (
            {"recover_timeout_s": 30, "keep_down": True},
            "recovery.within_s: 30 s must be shorter than the revert's own wait for the platform (30 s: "
            "method[1].provider.arguments.recover_timeout_s 30 s)",
        ),
        # Counted from the kill, the 15 s the fault is held use up part of the wait.
        (
            {"recover_timeout_s": 40},
            "recovery.within_s: 30 s must be shorter than the revert's own wait for the platform (25 s: "
            "method[1].provider.arguments.recover_timeout_s 40 s counted from the injection, less pauses.after 15 s)",
        ),
    ],
)
def test_validation_refuses_a_window_as_long_as_the_revert_waits(
    arguments: dict[str, Any], expected: str, tmp_path: Path
) -> None:
    raw, index = _with_arguments(SERVE_CONTROLLER_LOSS, arguments)
    assert index == 1
    path = tmp_path / "serve_controller_loss.yaml"
    with pytest.raises(ConfigError) as refused:
        ensure_experiment_is_valid(raw, path)
    assert str(refused.value).startswith(f"{path}: {expected}"), refused.value
    assert "\n" not in str(refused.value)


def test_validation_refuses_a_window_that_scales_past_a_fixed_wait(tmp_path: Path) -> None:
    raw, _ = _with_arguments(GCS_LOSS, {"recover_timeout_s": 60.0}, within_cold_starts=2)
    with pytest.raises(ConfigError, match=r"gcs_loss.yaml: recovery.within_cold_starts: "):
        ensure_experiment_is_valid(raw, tmp_path / "gcs_loss.yaml")


def test_inferchaos_run_refuses_it_in_one_line_with_exit_2(tmp_path: Path) -> None:
    raw, _ = _with_arguments(SERVE_CONTROLLER_LOSS, {"recover_timeout_s": 30, "keep_down": True})
    path = tmp_path / "serve_controller_loss.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    home, out = tmp_path / "home", tmp_path / "runs"
    env = {**os.environ, "INFERCHAOS_HOME": str(home), "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "inferchaos.cli.main", "run", str(path), "--out", str(out)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and f"{path}: recovery.within_s: 30 s must be shorter" in lines[0], done.stderr
    assert not out.exists(), "nothing may run"
    ledger = home / "ledger"
    assert not ledger.exists() or not any(ledger.iterdir())


def test_a_recovery_failed_for_good_ends_the_run_there_without_waiting_for_samples(
    tmp_path: Path, private_home: Path
) -> None:
    """TTFT misses its own 0.5 s deadline after the revert, in a 30 s window: the run ends once
    that is settled. A recovery SLO no probe ever samples (a replica the router stopped sending
    to) is not waited for: three samples are asked only of a recovery that was confirmed."""
    unsampled = {
        "name": "running_after",
        "probe": "vllm.num_requests_running",
        "agg": "max",
        "op": "<=",
        "threshold": 4,
        "phase": "recovery",
    }
    recovery = {
        "within_s": 30,
        "hold_s": 0.5,
        "steady": ["ttft_after"],
        "first_within_s": {"ttft_after": 0.5},
    }
    spec = make_spec(tmp_path / "missed.yaml", slos=[*DEFAULT_SLOS, unsampled], recovery=recovery)
    world = World(during={"canary.ttft_s": 3.0}, after={"canary.ttft_s": 3.0})
    run = run_fake_experiment(spec, tmp_path / "run", world=world)
    verdict = run.verdict
    assert verdict.status is Status.FAILED, verdict.reason
    assert verdict.timing.recovered is False
    assert "ttft_after" in verdict.timing.recovery_blocked_by, verdict.timing
    # Settled half a second after the revert (and a tick or two): nowhere near the 30 s window.
    reverted, end = (verdict.phases[k] for k in ("reverted", "end"))
    assert end - reverted < 10, f"the run sat {end - reverted:.1f} s in a recovery settled at +0.5 s"
