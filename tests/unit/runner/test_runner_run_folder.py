"""The run folder: journal.json (Chaos Toolkit shape), timeline.csv, verdict.json; no secrets in any of it."""

from __future__ import annotations

import csv
import json

import pytest

from tests.fakes.scripted_world import DEFAULT_RECOVERY, EXPERIMENT_SECRET, FAKE_FAULT, RAY_TOKEN, RunResult

JOURNAL_KEYS = {
    "chaoslib-version",
    "platform",
    "node",
    "experiment",
    "start",
    "end",
    "duration",
    "status",
    "deviated",
    "steady_states",
    "run",
    "rollbacks",
    "extensions",
}
PHASES = ["phase.baseline_start", "phase.injected", "phase.reverted", "phase.end"]


def test_run_folder_holds_the_run_files(passed_run: RunResult) -> None:
    names = {p.name for p in passed_run.run_dir.iterdir()}
    assert {"journal.json", "timeline.csv", "verdict.json"} <= names, names


def test_journal_has_the_chaos_toolkit_shape(passed_run: RunResult) -> None:
    journal = json.loads(passed_run.read("journal.json"))
    assert JOURNAL_KEYS <= set(journal), sorted(JOURNAL_KEYS - set(journal))
    assert journal["status"] == "completed" and journal["deviated"] is False
    assert journal["experiment"]["title"] == "The fake fault under the runner"
    assert journal["steady_states"]["before"]["steady_state_met"] is True
    assert journal["steady_states"]["after"]["steady_state_met"] is True
    [activity] = journal["run"]
    assert activity["activity"]["name"] == "inject-fake-fault"
    assert activity["status"] == "succeeded" and activity["start"] and activity["end"]
    [rollback] = journal["rollbacks"]
    assert rollback["activity"]["name"] == "revert-fake-fault" and rollback["status"] == "succeeded"


def test_journal_of_a_failed_run_deviated(slo_failed_run: RunResult) -> None:
    journal = json.loads(slo_failed_run.read("journal.json"))
    assert journal["status"] == "failed" and journal["deviated"] is True


def _timeline(result: RunResult) -> tuple[list[tuple[str, float]], list[list[str]]]:
    """The phase marks (name, t) and the sample rows of a run's timeline.csv."""
    with (result.run_dir / "timeline.csv").open(newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["t", "probe", "labels", "value", "error"]
    marks = [(row[1], float(row[0])) for row in rows[1:] if row[1].startswith("phase.")]
    return marks, [row for row in rows[1:] if not row[1].startswith("phase.")]


@pytest.mark.parametrize("scenario", ["passed_run", "slo_failed_run", "stopped_run"])
def test_timeline_has_the_phase_rows_in_order(request: pytest.FixtureRequest, scenario: str) -> None:
    result: RunResult = request.getfixturevalue(scenario)
    marks, samples = _timeline(result)
    assert [name for name, _ in marks] == PHASES
    times = [t for _, t in marks]
    assert times == sorted(times)
    for begin, end in zip(times, times[1:], strict=False):
        assert any(begin <= float(row[0]) <= end for row in samples), f"no sample between {begin} and {end}"
    probes = {row[1] for row in samples}
    assert {"canary.success", "canary.ttft_s", "vllm.kv_cache_usage"} <= probes, probes


def test_interrupted_timeline_still_has_every_phase_row(interrupted_run: RunResult) -> None:
    marks, samples = _timeline(interrupted_run)
    assert [name for name, _ in marks] == PHASES
    assert [t for _, t in marks] == sorted(t for _, t in marks)
    injected = dict(marks)["phase.injected"]
    assert any(float(row[0]) >= injected for row in samples), "nothing was sampled while the fault was active"


def test_verdict_json_has_the_design_keys(passed_run: RunResult) -> None:
    verdict = json.loads(passed_run.read("verdict.json"))
    assert verdict["experiment"] == "passed" and verdict["env"] == "local" and verdict["status"] == "passed"
    fault = verdict["fault"]
    assert {"name", "layer", "injected_at", "reverted_at", "effect_observed", "evidence"} <= set(fault)
    assert fault["name"] == FAKE_FAULT and fault["layer"] == "vllm" and fault["effect_observed"] is True
    assert fault["injected_at"] < fault["reverted_at"]
    assert fault["evidence"]["reason"] == "the KV cache filled"
    own = [s["name"] for s in verdict["slos"] if not s["name"].startswith("platform.")]
    assert own == ["kv_headroom_before", "ttft_before", "availability", "ttft_after"]
    # The shared platform steady state follows the scenario's own SLOs.
    assert [s["name"] for s in verdict["slos"]][: len(own)] == own
    assert verdict["platform"]["steady"] is True and verdict["platform"]["failure"] is None
    for slo in verdict["slos"]:
        assert {"name", "layer", "phase", "ok", "observed", "op", "threshold"} <= set(slo), slo
        assert slo["ok"] is True, slo
    assert {"time_to_detect_s", "time_to_recover_s"} <= set(verdict["timing"])
    timing = verdict["timing"]
    assert timing["time_to_recover_s"] is not None
    # Recovery is confirmed once the steady SLOs have held for hold_s after recovering.
    recovered_at = verdict["phases"]["reverted"] + timing["time_to_recover_s"]
    assert timing["recovery_confirmed_at"] == pytest.approx(recovered_at + DEFAULT_RECOVERY["hold_s"])
    assert {"layer", "reason"} <= set(verdict["triage"])
    # The KV cache the fault filled is what triage names.
    assert verdict["triage"]["layer"] == "vllm", verdict["triage"]
    # Who noticed: inferchaos' own row first, then each signal the fake probes sampled.
    detection = verdict["detection"]
    assert detection[0]["layer"] == "inferchaos" and detection[0]["signal"] == "inferchaos.slo_or_detector"
    for entry in detection:
        assert set(entry) == {"layer", "signal", "noticed_after_s", "at", "detail", "lead_s"}, entry


def test_secrets_never_reach_the_run_folder(passed_run: RunResult) -> None:
    # The secrets did travel: the fault's evidence quoted them and the experiment holds one.
    assert EXPERIMENT_SECRET in passed_run.verdict.fault.evidence["symptoms"]["note"]  # type: ignore[union-attr]
    files = [p for p in passed_run.run_dir.rglob("*") if p.is_file()]
    assert len(files) >= 3
    for path in files:
        data = path.read_bytes()
        for secret in (EXPERIMENT_SECRET, RAY_TOKEN):
            assert secret.encode() not in data, f"{path.name} holds the secret {secret!r}"
    verdict = json.loads(passed_run.read("verdict.json"))
    assert verdict["fault"]["evidence"]["symptoms"]["note"] == "flood sent with key ***"
