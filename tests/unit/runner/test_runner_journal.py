"""journal.json is a Chaos Toolkit journal: the shape chaoslib itself writes, filled from the run.

The reference is a journal real chaoslib code writes in this test (tests/fakes/chaoslib_reference.py);
ours must have the same keys and value types at every level, and its SLO probes must be
activities chaoslib accepts and can replay from the run folder with the same outcome.
"""

from __future__ import annotations

import copy
import json
from datetime import datetime
from typing import Any

import pytest
from chaoslib.extension import get_extension
from chaoslib.hypothesis import ensure_hypothesis_is_valid, run_steady_state_hypothesis
from chaoslib.run import EventHandlerRegistry

from inferchaos.reports.load import load_journal
from inferchaos.run.journal import EXTENSION
from tests.fakes.chaoslib_reference import failed_hypothesis, reference_journal
from tests.fakes.scripted_world import RunResult

pytestmark = pytest.mark.long_running

# Keys whose content is the experiment's own (any JSON): their shape is not chaoslib's to fix.
OPAQUE = {"experiment", "activity", "output"}
SCENARIOS = [
    "passed_run",
    "slo_failed_run",
    "no_bite_run",
    "baseline_failed_run",
    "inject_error_run",
    "revert_error_run",
    "stopped_run",
]


@pytest.fixture(scope="module")
def reference() -> dict[str, Any]:
    journal = reference_journal()
    states = journal["steady_states"]
    # Every part this test compares against must be filled, or the comparison proves nothing.
    assert states["before"]["probes"] and states["after"]["probes"] and states["during"]
    assert journal["run"] and journal["rollbacks"]
    return journal


@pytest.fixture(scope="module")
def failed_probe() -> dict[str, Any]:
    [probe] = failed_hypothesis()["probes"]
    assert probe["status"] == "failed" and "exception" in probe
    return probe


def _journal(result: RunResult) -> dict[str, Any]:
    journal: dict[str, Any] = json.loads(result.read("journal.json"))
    return journal


def assert_same_shape(ours: Any, ref: Any, where: str) -> None:
    """``ours`` has ``ref``'s keys and value types, recursively (OPAQUE keys: presence only)."""
    if isinstance(ref, dict):
        assert isinstance(ours, dict), f"{where}: expected an object, got {ours!r:.80}"
        assert set(ours) == set(ref), (
            f"{where}: keys differ: ours only {sorted(set(ours) - set(ref))}, chaoslib only {sorted(set(ref) - set(ours))}"
        )
        for key, value in ref.items():
            if key not in OPAQUE:
                assert_same_shape(ours[key], value, f"{where}.{key}")
    elif isinstance(ref, list):
        assert isinstance(ours, list), f"{where}: expected a list, got {ours!r:.80}"
        for index, item in enumerate(ours):
            if ref:
                assert_same_shape(item, ref[0], f"{where}[{index}]")
    else:
        assert type(ours) is type(ref), (
            f"{where}: {type(ours).__name__} {ours!r:.60}, chaoslib writes {type(ref).__name__}"
        )
        if where.endswith((".start", ".end")):
            datetime.fromisoformat(ours)


def _assert_hypothesis(ours: Any, ref_state: dict[str, Any], failed: dict[str, Any], where: str) -> None:
    if ours is None:
        return
    assert set(ours) == set(ref_state), where
    assert isinstance(ours["steady_state_met"], bool), where
    for index, probe in enumerate(ours["probes"]):
        ref = ref_state["probes"][0] if probe.get("status") == "succeeded" else failed
        assert_same_shape(probe, ref, f"{where}.probes[{index}]")


def assert_journal_shape(journal: dict[str, Any], ref: dict[str, Any], failed: dict[str, Any]) -> None:
    """Our journal against chaoslib's: top level, hypotheses (per probe status), activity runs."""
    assert set(journal) - {"extensions"} == set(ref), sorted(set(journal) ^ set(ref))
    for key, value in ref.items():
        if key not in ("experiment", "steady_states", "run", "rollbacks"):
            assert_same_shape(journal[key], value, key)
    assert journal["status"] in ("completed", "failed", "aborted", "interrupted")
    states, ref_states = journal["steady_states"], ref["steady_states"]
    assert set(states) == set(ref_states)
    _assert_hypothesis(states["before"], ref_states["before"], failed, "steady_states.before")
    _assert_hypothesis(states["after"], ref_states["after"], failed, "steady_states.after")
    assert isinstance(states["during"], list)
    for index, state in enumerate(states["during"]):
        _assert_hypothesis(state, ref_states["during"][0], failed, f"steady_states.during[{index}]")
    failed_run = {k: v for k, v in failed.items() if k != "tolerance_met"}
    for key in ("run", "rollbacks"):
        for index, run in enumerate(journal[key]):
            assert_same_shape(
                run, ref[key][0] if run.get("status") == "succeeded" else failed_run, f"{key}[{index}]"
            )


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_journal_has_the_shape_chaoslib_writes(
    request: pytest.FixtureRequest, scenario: str, reference: dict[str, Any], failed_probe: dict[str, Any]
) -> None:
    assert_journal_shape(_journal(request.getfixturevalue(scenario)), reference, failed_probe)


def test_interrupted_journal_has_the_shape_chaoslib_writes(
    interrupted_run: RunResult, reference: dict[str, Any], failed_probe: dict[str, Any]
) -> None:
    assert_journal_shape(_journal(interrupted_run), reference, failed_probe)


def test_the_shape_check_catches_a_flat_journal(
    passed_run: RunResult, reference: dict[str, Any], failed_probe: dict[str, Any]
) -> None:
    # The journal as it was before: verdict SLO entries as probes, ``during`` flat.
    journal = _journal(passed_run)
    verdict = json.loads(passed_run.read("verdict.json"))
    journal["steady_states"]["before"]["probes"] = [s for s in verdict["slos"] if s["phase"] == "baseline"]
    with pytest.raises(AssertionError, match=r"steady_states\.before\.probes\[0\]: keys differ"):
        assert_journal_shape(journal, reference, failed_probe)


def test_report_tables_are_filled_for_an_injected_run(passed_run: RunResult) -> None:
    journal = _journal(passed_run)
    states = journal["steady_states"]
    verdict = passed_run.verdict
    for key, phase in (("before", "baseline"), ("after", "recovery")):
        names = [p["activity"]["name"] for p in states[key]["probes"]]
        assert names == [s.name for s in verdict.slos if s.phase == phase], key
        for probe in states[key]["probes"]:
            assert probe["tolerance_met"] is True and probe["status"] == "succeeded", probe
            assert isinstance(probe["output"], float), probe
            assert probe["activity"]["provider"]["arguments"]["slo"]["name"] == probe["activity"]["name"]
    # A windowed recovery SLO is replayed where recovery was confirmed: it carries that declaration.
    # The scenario's own SLOs keep their declarations; the platform steady state's follow them.
    [after] = [
        p["activity"]["provider"]["arguments"]
        for p in states["after"]["probes"]
        if not p["activity"]["name"].startswith("platform.")
    ]
    assert after["recovery"]["steady"] == ["ttft_after"] and [s["name"] for s in after["steady"]] == [
        "ttft_after"
    ]
    [during] = states["during"]
    assert [
        p["activity"]["name"] for p in during["probes"] if not p["activity"]["name"].startswith("platform.")
    ] == ["availability"]
    [inject] = journal["run"]
    assert inject["activity"]["name"] == "inject-fake-fault" and inject["status"] == "succeeded"
    assert inject["output"]["evidence"]["bit"] is True
    [revert] = journal["rollbacks"]
    assert revert["activity"]["name"] == "revert-fake-fault" and revert["status"] == "succeeded"
    assert inject["start"] <= inject["end"] <= revert["start"] <= revert["end"]


def test_slo_probes_are_activities_chaoslib_accepts(passed_run: RunResult) -> None:
    states = _journal(passed_run)["steady_states"]
    probes = [
        p["activity"]
        for p in (*states["before"]["probes"], *states["during"][0]["probes"], *states["after"]["probes"])
    ]
    # Imports each provider's module and checks its arguments against the function's signature.
    ensure_hypothesis_is_valid({"steady-state-hypothesis": {"title": "replay", "probes": probes}})


@pytest.mark.parametrize(
    ("scenario", "key"), [("passed_run", "before"), ("passed_run", "after"), ("slo_failed_run", "during")]
)
def test_chaoslib_replays_the_slo_probes_from_the_run_folder(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, scenario: str, key: str
) -> None:
    result: RunResult = request.getfixturevalue(scenario)
    state = _journal(result)["steady_states"][key]
    state = state[0] if key == "during" else state
    experiment = {
        "steady-state-hypothesis": {
            "title": "replay",
            "probes": [copy.deepcopy(p["activity"]) for p in state["probes"]],
        }
    }
    monkeypatch.chdir(result.run_dir)
    replayed = run_steady_state_hypothesis(
        experiment, {}, {}, dry=None, event_registry=EventHandlerRegistry()
    )
    assert replayed["steady_state_met"] is state["steady_state_met"]
    # chaoslib stops at the first probe out of tolerance; up to there, every outcome is the same.
    outcome = [(p["status"], p["output"], p["tolerance_met"]) for p in replayed["probes"]]
    assert (
        outcome == [(p["status"], p["output"], p["tolerance_met"]) for p in state["probes"]][: len(outcome)]
    )


@pytest.mark.parametrize(
    ("scenario", "status", "deviated"),
    [
        ("passed_run", "completed", False),
        # A during SLO breached: the steady state deviated.
        ("slo_failed_run", "failed", True),
        # The fault never bit: the run failed, the steady state held.
        ("no_bite_run", "failed", False),
        # The baseline was not met: nothing ran, nothing deviated.
        # Not steady before the fault: chaoslib's "failed", and no deviation (nothing ran).
        ("baseline_failed_run", "failed", False),
        # The stop condition fired because the front door stopped serving.
        ("stopped_run", "aborted", True),
        # The inject raised: chaoslib's word for a fatal error in the method.
        ("inject_error_run", "aborted", False),
    ],
)
def test_status_and_deviated(
    request: pytest.FixtureRequest, scenario: str, status: str, deviated: bool
) -> None:
    journal = _journal(request.getfixturevalue(scenario))
    assert (journal["status"], journal["deviated"]) == (status, deviated)


def test_a_breached_slo_is_out_of_tolerance(slo_failed_run: RunResult) -> None:
    [during] = _journal(slo_failed_run)["steady_states"]["during"]
    assert during["steady_state_met"] is False
    [availability] = during["probes"]
    # The value was read and it breaks the threshold: the probe ran, its tolerance was not met.
    assert availability["status"] == "succeeded" and availability["tolerance_met"] is False
    tolerance = availability["activity"]["tolerance"]["provider"]["arguments"]
    assert tolerance["op"] == ">=" and availability["output"] < tolerance["threshold"]


def test_baseline_not_met_has_no_method_and_no_after(baseline_failed_run: RunResult) -> None:
    journal = _journal(baseline_failed_run)
    states = journal["steady_states"]
    assert states["before"]["steady_state_met"] is False
    # The scenario's own baseline SLOs, then the platform steady state's (the front door served).
    assert [p["tolerance_met"] for p in states["before"]["probes"]] == [False, True, True]
    assert states["before"]["probes"][-1]["activity"]["name"] == "platform.front_door_before"
    assert states["during"] == [] and states["after"] is None
    assert journal["run"] == [] and journal["rollbacks"] == []


def test_interrupted_run_is_interrupted_and_rolled_back(interrupted_run: RunResult) -> None:
    journal = _journal(interrupted_run)
    assert journal["status"] == "interrupted"
    # The runner does not sample a recovery after a signal; chaoslib has no after hypothesis then.
    assert journal["steady_states"]["after"] is None
    assert [r["status"] for r in journal["run"]] == ["succeeded"]
    assert [r["status"] for r in journal["rollbacks"]] == ["succeeded"]


def test_failed_inject_and_revert_carry_their_exception(
    inject_error_run: RunResult, revert_error_run: RunResult
) -> None:
    [inject] = _journal(inject_error_run)["run"]
    assert inject["status"] == "failed" and "replica-0 vanished mid-flood" in inject["exception"][0]
    [revert] = _journal(revert_error_run)["rollbacks"]
    assert revert["status"] == "failed" and "could not stop the flood" in revert["exception"][0]


@pytest.mark.parametrize("scenario", ["passed_run", "slo_failed_run"])
def test_inferchaos_figures_are_an_extension(request: pytest.FixtureRequest, scenario: str) -> None:
    result: RunResult = request.getfixturevalue(scenario)
    journal = _journal(result)
    extension = get_extension(journal, EXTENSION)
    assert extension is not None, journal.get("extensions")
    verdict = json.loads(result.read("verdict.json"))
    for key in ("status", "reason", "slos", "timing", "triage", "detection", "control", "fault", "layers"):
        assert extension[key] == verdict[key], key


def test_the_reports_read_the_journal(interrupted_run: RunResult, passed_run: RunResult) -> None:
    record = load_journal(passed_run.run_dir / "journal.json")
    assert (record.status, record.steady_state_before, record.steady_state_after) == ("completed", True, True)
    assert [a.name for a in record.activities] == ["inject-fake-fault"]
    assert [a.name for a in record.rollbacks] == ["revert-fake-fault"]
    interrupted = load_journal(interrupted_run.run_dir / "journal.json")
    assert (interrupted.status, interrupted.steady_state_after) == ("interrupted", None)
