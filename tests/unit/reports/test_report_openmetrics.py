"""openmetrics.txt: it parses as OpenMetrics and says what the verdict says, per status, per SLO,
for a negative control and for a fault left in place."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from inferchaos.reports.load import load_run
from inferchaos.reports.openmetrics import openmetrics_text
from inferchaos.reports.render import render_run
from inferchaos.reports.report_errors import ReportError
from tests.fakes.report_runs import copy_run, read_json

STATUSES = ("passed", "failed", "aborted", "error", "skipped")
Labels = frozenset[tuple[str, str]]


def samples(text: str) -> dict[str, dict[Labels, float]]:
    """Every sample of an exposition by metric name, then by its label set."""
    found: dict[str, dict[Labels, float]] = {}
    for family in text_string_to_metric_families(text):
        assert family.type == "gauge", family.name
        for sample in family.samples:
            series = found.setdefault(sample.name, {})
            key = frozenset(sample.labels.items())
            assert key not in series, f"{sample.name}{sample.labels} twice"
            series[key] = sample.value
    return found


def labels(**values: str) -> Labels:
    return frozenset(values.items())


def of_run(run_dir: Path) -> dict[str, dict[Labels, float]]:
    return samples(openmetrics_text([load_run(run_dir)]))


def run_of(verdict: dict[str, object], control: str = "false") -> dict[str, str]:
    return {"experiment": str(verdict["experiment"]), "env": str(verdict["env"]), "control": control}


def recorded(
    run_copy: Callable[[str], Path], name: str
) -> tuple[dict[str, Any], dict[str, str], dict[str, dict[Labels, float]]]:
    """A copy of the recorded run ``name``: its verdict, its run labels and its metric samples."""
    run_dir = run_copy(name)
    verdict = read_json(run_dir / "verdict.json")
    return verdict, run_of(verdict), of_run(run_dir)


def assert_status(found: dict[str, dict[Labels, float]], run: dict[str, str], status: str) -> None:
    assert found["inferchaos_run_status"] == {
        labels(**run, status=each): 1.0 if each == status else 0.0 for each in STATUSES
    }


def fault_labels(run: dict[str, str], verdict: dict[str, object]) -> Labels:
    fault = verdict["fault"]
    assert isinstance(fault, dict)
    return labels(**run, fault=fault["name"], layer=fault["layer"])


def test_the_rendered_file_is_openmetrics_with_help_type_unit_and_eof(
    run_copy: Callable[[str], Path],
) -> None:
    run_dir = run_copy("failed_kv_flood")
    render_run(run_dir)
    text = (run_dir / "openmetrics.txt").read_text()
    assert text.endswith("# EOF\n")
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert set(families) == {
        "inferchaos_run_status",
        "inferchaos_slo_ok",
        "inferchaos_time_to_detect_seconds",
        "inferchaos_time_to_recover_seconds",
        "inferchaos_fault_active",
    }
    for name, family in families.items():
        assert f"# HELP {name} " in text and f"# TYPE {name} gauge" in text
        assert family.documentation
    assert families["inferchaos_time_to_detect_seconds"].unit == "seconds"
    assert families["inferchaos_time_to_recover_seconds"].unit == "seconds"


def test_a_passed_run(run_copy: Callable[[str], Path]) -> None:
    verdict, run, found = recorded(run_copy, "passed_kv_flood")
    assert_status(found, run, "passed")
    assert found["inferchaos_slo_ok"] == {
        labels(**run, slo=s["name"], layer=s["layer"], phase=s["phase"]): 1.0 for s in verdict["slos"]
    }
    fault = fault_labels(run, verdict)
    assert found["inferchaos_fault_active"] == {fault: 0.0}
    assert found["inferchaos_time_to_recover_seconds"] == {fault: verdict["timing"]["time_to_recover_s"]}
    # Nothing breached: no time to detect, rather than a made-up 0.
    assert "inferchaos_time_to_detect_seconds" not in found
    assert "inferchaos_control_proven" not in found


def test_a_failed_run(run_copy: Callable[[str], Path]) -> None:
    verdict, run, found = recorded(run_copy, "failed_kv_flood")
    assert_status(found, run, "failed")
    slo_ok = found["inferchaos_slo_ok"]
    assert slo_ok[labels(**run, slo="canary_ttft_p95", layer="canary", phase="during")] == 0.0
    assert [k for k, v in slo_ok.items() if v == 0.0] == [
        labels(**run, slo="canary_ttft_p95", layer="canary", phase="during")
    ]
    assert len(slo_ok) == len(verdict["slos"])
    fault = fault_labels(run, verdict)
    assert found["inferchaos_time_to_detect_seconds"] == {fault: verdict["timing"]["time_to_detect_s"]}
    assert found["inferchaos_fault_active"] == {fault: 0.0}


def test_an_aborted_run_has_samples_only_for_what_ran(run_copy: Callable[[str], Path]) -> None:
    """Aborted at its baseline: the baseline SLO that stopped it is 0, the SLOs of phases that
    never ran have no sample, and nothing was injected, so no fault series."""
    verdict, run, found = recorded(run_copy, "aborted_pg_stall")
    assert_status(found, run, "aborted")
    assert found["inferchaos_slo_ok"] == {
        labels(**run, slo="no_pending_groups_before", layer="ray", phase="baseline"): 0.0
    }
    for name in (
        "inferchaos_fault_active",
        "inferchaos_time_to_detect_seconds",
        "inferchaos_time_to_recover_seconds",
    ):
        assert name not in found, name


def test_a_control_that_failed_as_expected_is_marked_and_proven(control_run: Path) -> None:
    verdict = read_json(control_run / "verdict.json")
    run = run_of(verdict, control="true")
    # The runner's own render wrote the file.
    found = samples((control_run / "openmetrics.txt").read_text())
    assert run["experiment"] == "scenario.control"
    assert_status(found, run, "failed")
    assert found["inferchaos_control_proven"] == {labels(**run, of="scenario"): 1.0}
    # Its broken SLOs are the expected outcome, and say so by their control label.
    assert 0.0 in found["inferchaos_slo_ok"].values()
    assert all(("control", "true") in key for series in found.values() for key in series)
    # The held fault was released once the run was judged.
    assert found["inferchaos_fault_active"] == {fault_labels(run, verdict): 0.0}


def test_a_fault_never_reverted_is_still_active(stuck_fault_run: Path) -> None:
    verdict = read_json(stuck_fault_run / "verdict.json")
    run = run_of(verdict)
    found = samples((stuck_fault_run / "openmetrics.txt").read_text())
    assert verdict["fault"]["reverted_at"] is None
    assert_status(found, run, "error")
    assert found["inferchaos_fault_active"] == {fault_labels(run, verdict): 1.0}


def test_several_runs_share_one_family_per_metric(run_copy: Callable[[str], Path]) -> None:
    runs = [load_run(run_copy(name)) for name in ("passed_kv_flood", "aborted_pg_stall")]
    text = openmetrics_text(runs)
    assert text.count("# TYPE inferchaos_run_status gauge") == 1 and text.count("# EOF") == 1
    experiments = {dict(k)["experiment"] for k in samples(text)["inferchaos_run_status"]}
    assert experiments == {"kv_flood", "strict_pg_stall"}


def test_two_runs_of_one_experiment_are_refused_in_one_exposition(tmp_path: Path) -> None:
    """Their series would share every label: no valid exposition holds that."""
    first, second = (
        load_run(copy_run(name, tmp_path / str(i)))
        for i, name in enumerate(("passed_kv_flood", "failed_kv_flood"))
    )
    with pytest.raises(ReportError, match="another run of kv_flood on local"):
        openmetrics_text([first, second])
