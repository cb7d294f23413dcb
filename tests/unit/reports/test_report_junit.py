"""junit.xml: the counts a CI reads, the testcase names, and messages with observed vs threshold."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

from inferchaos.reports.junit import junit_xml
from inferchaos.reports.load import load_run
from tests.fakes.report_runs import edit_json, read_json

OUTCOMES = ("failure", "error", "skipped")


def suite_of(run_dir: Path) -> ET.Element:
    root = ET.fromstring((run_dir / "junit.xml").read_text().encode())
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert len(suites) == 1
    return suites[0]


def suite_after(run_dir: Path, change: Callable[[dict[str, Any]], None]) -> ET.Element:
    edit_json(run_dir / "verdict.json", change)
    return ET.fromstring(junit_xml(load_run(run_dir)).encode()).find("testsuite")


def outcome(case: ET.Element) -> str:
    found = [child.tag for child in case if child.tag in OUTCOMES]
    assert len(found) <= 1
    return found[0] if found else "passed"


def cases_by_name(suite: ET.Element) -> dict[str, ET.Element]:
    return {case.get("name"): case for case in suite.findall("testcase")}


def assert_counts_match_cases(element: ET.Element, cases: list[ET.Element]) -> None:
    outcomes = [outcome(c) for c in cases]
    assert element.get("tests") == str(len(cases))
    for kind in OUTCOMES:
        assert element.get(f"{kind}s" if kind != "skipped" else "skipped") == str(outcomes.count(kind)), kind


def test_each_recorded_run_has_one_suite_named_after_its_experiment_with_true_counts(rendered: Path) -> None:
    for run_dir in sorted(p for p in rendered.iterdir() if p.is_dir()):
        verdict = read_json(run_dir / "verdict.json")
        root = ET.fromstring((run_dir / "junit.xml").read_text().encode())
        suite = suite_of(run_dir)
        cases = suite.findall("testcase")
        assert suite.get("name") == verdict["experiment"]
        # every SLO, plus the effect and recovery testcases
        assert len(cases) == len(verdict["slos"]) + 2
        assert_counts_match_cases(suite, cases)
        assert_counts_match_cases(root, cases)


def test_slo_testcases_are_named_and_classed_by_layer_and_phase(rendered: Path) -> None:
    verdict = read_json(rendered / "failed_kv_flood" / "verdict.json")
    cases = cases_by_name(suite_of(rendered / "failed_kv_flood"))
    for slo in verdict["slos"]:
        case = cases[f"{slo['name']} [{slo['phase']}]"]
        assert case.get("classname") == f"inferchaos.{slo['layer']}"
    assert "fault had an observable effect" in cases
    within = verdict["timing"]["recovery_within_s"]
    assert f"recovered within {within:g} s" in cases


def test_failed_run_fails_exactly_its_breached_slos_with_observed_and_threshold(rendered: Path) -> None:
    verdict = read_json(rendered / "failed_kv_flood" / "verdict.json")
    cases = cases_by_name(suite_of(rendered / "failed_kv_flood"))
    breached = [s for s in verdict["slos"] if not s["ok"]]
    assert breached, "the failed recording must breach an SLO"
    for slo in verdict["slos"]:
        case = cases[f"{slo['name']} [{slo['phase']}]"]
        if slo["ok"]:
            assert outcome(case) == "passed"
            continue
        assert outcome(case) == "failure"
        message = case.find("failure").get("message")
        assert message.startswith(f"{slo['name']} [{slo['phase']}]: observed ")
        assert f" threshold {slo['op']} " in message


def test_failure_message_reads_observed_breach_operator_then_threshold(
    run_copy: Callable[[str], Path],
) -> None:
    def breach(verdict: dict[str, Any]) -> None:
        verdict["slos"] = [
            {
                "name": "canary_ttft_p95",
                "layer": "canary",
                "phase": "during",
                "ok": False,
                "observed": 2.31,
                "op": "<=",
                "threshold": 1.5,
                "samples": 20,
                "reason": "",
            }
        ]

    suite = suite_after(run_copy("failed_kv_flood"), breach)
    failure = cases_by_name(suite)["canary_ttft_p95 [during]"].find("failure")
    assert failure.get("message") == "canary_ttft_p95 [during]: observed 2.31 > threshold <= 1.5"


def test_observed_is_printed_precisely_enough_to_show_the_breach(run_copy: Callable[[str], Path]) -> None:
    def breach(verdict: dict[str, Any]) -> None:
        verdict["slos"][0].update(
            name="ttft_x", phase="during", ok=False, observed=1.500004, op="<=", threshold=1.5
        )

    suite = suite_after(run_copy("failed_kv_flood"), breach)
    message = cases_by_name(suite)["ttft_x [during]"].find("failure").get("message")
    assert message == "ttft_x [during]: observed 1.500004 > threshold <= 1.5"


def test_slo_without_data_fails_and_says_so(run_copy: Callable[[str], Path]) -> None:
    def silence(verdict: dict[str, Any]) -> None:
        verdict["slos"][0].update(
            name="kv",
            phase="baseline",
            ok=False,
            observed=None,
            op=">=",
            threshold=1,
            reason="no samples of vllm.kv_cache_usage in the baseline phase",
        )

    suite = suite_after(run_copy("passed_kv_flood"), silence)
    failure = cases_by_name(suite)["kv [baseline]"].find("failure")
    assert failure.get("message").startswith("kv [baseline]: observed no data, threshold >= 1")
    assert suite.get("failures") == "1"


def test_aborted_run_skips_what_never_ran_and_fails_the_broken_baseline(rendered: Path) -> None:
    verdict = read_json(rendered / "aborted_pg_stall" / "verdict.json")
    suite = suite_of(rendered / "aborted_pg_stall")
    cases = cases_by_name(suite)
    assert verdict["status"] == "aborted"
    assert verdict["fault"] is None or verdict["fault"]["injected_at"] is None
    for slo in verdict["slos"]:
        case = cases[f"{slo['name']} [{slo['phase']}]"]
        if slo["phase"] == "baseline":
            assert outcome(case) == ("passed" if slo["ok"] else "failure")
        else:
            assert outcome(case) == "skipped"
            assert case.find("skipped").get("message") == f"run aborted: {verdict['reason']}"
    assert outcome(cases["fault had an observable effect"]) == "skipped"
    assert int(suite.get("skipped")) == len([s for s in verdict["slos"] if s["phase"] != "baseline"]) + 2
    assert suite.get("errors") == "0"


def test_error_run_reports_errors_not_skips_so_ci_cannot_pass_it(run_copy: Callable[[str], Path]) -> None:
    def error(verdict: dict[str, Any]) -> None:
        verdict.update(status="error", reason="environment not up: no Ray cluster at 127.0.0.1:6379")

    suite = suite_after(run_copy("aborted_pg_stall"), error)
    errors = suite.findall("testcase/error")
    assert errors and suite.get("errors") == str(len(errors))
    assert suite.get("skipped") == "0"
    assert all(
        e.get("message") == "run error: environment not up: no Ray cluster at 127.0.0.1:6379" for e in errors
    )


def test_fault_without_effect_fails_with_its_evidence(run_copy: Callable[[str], Path]) -> None:
    def no_effect(verdict: dict[str, Any]) -> None:
        verdict["fault"]["effect_observed"] = False
        verdict["fault"]["evidence"]["reason"] = "KV cache peaked at 0.31 with no queue or preemption"

    suite = suite_after(run_copy("passed_kv_flood"), no_effect)
    failure = cases_by_name(suite)["fault had an observable effect"].find("failure")
    assert "observed no effect" in failure.get("message")
    assert "KV cache peaked at 0.31" in failure.get("message")


def test_slow_recovery_fails_with_time_and_limit(run_copy: Callable[[str], Path]) -> None:
    def slow(verdict: dict[str, Any]) -> None:
        verdict["timing"].update(time_to_recover_s=41.5, recovered=False, recovery_within_s=30.0)

    suite = suite_after(run_copy("passed_kv_flood"), slow)
    failure = cases_by_name(suite)["recovered within 30 s"].find("failure")
    assert failure.get("message") == "recovered within 30 s: observed 41.5 s > threshold <= 30 s"


def test_passing_run_has_no_failures(rendered: Path) -> None:
    verdict = read_json(rendered / "passed_kv_flood" / "verdict.json")
    assert verdict["status"] == "passed"
    suite = suite_of(rendered / "passed_kv_flood")
    assert (suite.get("failures"), suite.get("errors"), suite.get("skipped")) == ("0", "0", "0")
