"""verdict.json ``detection``: written by the runner's Verdict, read back by reports/load.py, drawn
in report.html as one row per layer with "never" on a row whose signal never noticed."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from inferchaos.reports.load import load_run, load_verdict
from inferchaos.reports.render import render_run
from inferchaos.reports.report_errors import ReportError
from inferchaos.reports.verdict_schema import Status, Verdict
from inferchaos.steady_state.detection import SignalDetection
from tests.fakes.report_runs import edit_json, read_json

RUN = "failed_kv_flood"


def detections(injected_at: float) -> list[SignalDetection]:
    return [
        SignalDetection(
            "inferchaos", "inferchaos.slo_or_detector", 1.2, injected_at + 1.2, "slo availability"
        ),
        SignalDetection(
            "canary", "canary.first_failed_request", 0.8, injected_at + 0.8, "canary request failed"
        ),
        SignalDetection("vllm", "vllm.health", None),
        SignalDetection("ray", "ray.nodes", None),
        SignalDetection(
            "ray", "ray.serve_replicas", 6.1, injected_at + 6.1, "Serve replica abc of Replica STOPPING"
        ),
    ]


def with_detection(run_dir: Path) -> list[SignalDetection]:
    """Store in ``run_dir``'s verdict.json the ``detection`` a runner's Verdict writes; return it."""
    injected_at = float(read_json(run_dir / "verdict.json")["phases"]["injected"])
    expected = detections(injected_at)
    written = Verdict("x", "x", "local", Status.FAILED, "", 0.0, 1.0, detection=tuple(expected)).to_dict()[
        "detection"
    ]

    def store(data: dict[str, Any]) -> None:
        data["detection"] = written

    edit_json(run_dir / "verdict.json", store)
    return expected


def test_detection_round_trips_through_verdict_json(run_copy: Callable[[str], Path]) -> None:
    run_dir = run_copy(RUN)
    expected = with_detection(run_dir)
    assert load_verdict(run_dir / "verdict.json").detection == tuple(expected)


def test_an_older_verdict_without_detection_still_loads_and_renders(run_copy: Callable[[str], Path]) -> None:
    run_dir = run_copy(RUN)
    assert "detection" not in read_json(run_dir / "verdict.json")
    assert load_run(run_dir).verdict.detection == ()
    render_run(run_dir)
    section = _section((run_dir / "report.html").read_text())
    assert "records no detection" in section


def test_a_malformed_entry_names_the_key(run_copy: Callable[[str], Path]) -> None:
    run_dir = run_copy(RUN)

    def store(data: dict[str, Any]) -> None:
        data["detection"] = [{"layer": "vllm", "signal": 3, "noticed_after_s": None}]

    edit_json(run_dir / "verdict.json", store)
    with pytest.raises(ReportError, match=r"verdict.json: detection\[0\].signal: expected a string"):
        load_verdict(run_dir / "verdict.json")


def _section(page: str) -> str:
    match = re.search(r'<section id="detection">(.*?)</section>', page, re.S)
    assert match, "report.html has no detection section"
    return match.group(1)


def test_the_report_draws_one_row_per_layer_and_writes_never(run_copy: Callable[[str], Path]) -> None:
    run_dir = run_copy(RUN)
    with_detection(run_dir)
    render_run(run_dir)
    section = _section((run_dir / "report.html").read_text())

    rows = dict(re.findall(r'<g class="detection-row" data-layer="([^"]+)">(.*?)</g>', section, re.S))
    assert list(rows) == ["inferchaos", "canary", "vllm", "ray"]
    assert re.search(r'class="never"[^>]*>never</text>', rows["vllm"])
    assert "<circle" not in rows["vllm"]
    assert "inferchaos 1.2 s" in rows["inferchaos"]
    # Two signals on one layer: the one that noticed is drawn, the other is named as never.
    assert "serve 6.1 s" in rows["ray"] and "ray nodes never" in rows["ray"]
    table_rows = re.findall(r"<tr>(.*?)</tr>", section, re.S)
    assert any("vllm /health" in r and ">never<" in r for r in table_rows)
