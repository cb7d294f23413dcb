"""report.html: the verdict, the tables, every plot with the fault marked, self-contained and escaped."""

from __future__ import annotations

import csv
import html
import re
from collections import Counter
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from inferchaos.reports.plots import PLOTS
from inferchaos.reports.render import render_run
from tests.fakes.report_runs import RUN_NAMES, edit_json, read_json

PLOT_IDS = [spec.id for spec in PLOTS]
FAULT_MARKS = ("fault-window", "injected", "reverted", "recovered")


class Elements(HTMLParser):
    """Every start tag with its attributes, and the text inside elements with an id."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def ids(self) -> list[str]:
        return [a["id"] for _, a in self.tags if a.get("id")]

    def by_id(self, element_id: str) -> tuple[str, dict[str, str | None]]:
        (found,) = [(t, a) for t, a in self.tags if a.get("id") == element_id]
        return found


def parse(html: str) -> Elements:
    parser = Elements()
    parser.feed(html)
    return parser


def section(html: str, element_id: str) -> str:
    """The markup of the element with ``element_id`` (sections and tables here do not nest in
    themselves)."""
    match = re.search(rf'<(\w+)[^>]*\bid="{element_id}"[^>]*>', html)
    assert match, element_id
    tag = match.group(1)
    return html[match.start() : html.index(f"</{tag}>", match.end()) + len(tag) + 3]


def report(rendered: Path, name: str) -> str:
    return (rendered / name / "report.html").read_text()


@pytest.mark.parametrize("name", RUN_NAMES)
def test_every_plot_is_on_the_page_with_a_stable_id(rendered: Path, name: str) -> None:
    page = parse(report(rendered, name))
    for plot_id in PLOT_IDS:
        tag, attrs = page.by_id(plot_id)
        assert tag == "figure"
        assert attrs["data-has-data"] in ("yes", "no")


def recorded_probes(run_dir: Path) -> set[str]:
    with (run_dir / "timeline.csv").open(newline="") as f:
        return {row["probe"] for row in csv.DictReader(f)}


def test_plots_with_data_are_inline_svg_with_the_fault_marked(rendered: Path) -> None:
    html = report(rendered, "failed_kv_flood")
    probes = recorded_probes(rendered / "failed_kv_flood")
    for plot_id in (spec.id for spec in PLOTS if set(spec.probes) & probes):
        figure = section(html, plot_id)
        assert "<svg" in figure, plot_id
        for mark in FAULT_MARKS:
            assert f'id="{plot_id}-{mark}"' in figure, (plot_id, mark)


def test_a_run_that_injected_nothing_marks_no_fault(rendered: Path) -> None:
    html = report(rendered, "aborted_pg_stall")
    for plot_id in PLOT_IDS:
        for mark in FAULT_MARKS:
            assert f'id="{plot_id}-{mark}"' not in html


def test_a_plot_without_data_shows_a_note_instead_of_disappearing(run_copy: Callable[[str], Path]) -> None:
    run_dir = run_copy("passed_kv_flood")
    path = run_dir / "timeline.csv"
    with path.open(newline="") as f:
        rows = [r for r in csv.reader(f) if not r[1].startswith("ray.")]
    with path.open("w", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows(rows)
    render_run(run_dir)
    html = (run_dir / "report.html").read_text()
    for plot_id in ("plot-actors-alive", "plot-pending-pgs", "plot-nodes-alive"):
        figure = section(html, plot_id)
        assert 'data-has-data="no"' in figure
        assert "<svg" not in figure
        assert "no data" in figure
    assert 'data-has-data="yes"' in section(html, "plot-kv-cache")


@pytest.mark.parametrize("name", RUN_NAMES)
def test_banner_shows_status_title_env_reason_and_duration(rendered: Path, name: str) -> None:
    verdict = read_json(rendered / name / "verdict.json")
    banner = section(report(rendered, name), "verdict")
    assert f"status-{verdict['status']}" in banner
    assert verdict["status"] in banner
    for text in (verdict["title"], verdict["experiment"], verdict["env"], verdict["reason"]):
        assert _escaped(text) in banner
    assert f"duration {verdict['duration_s']:.1f} s" in banner


def _escaped(text: str) -> str:
    return html.escape(text, quote=True)


def test_layer_table_lists_the_four_stack_layers_and_which_breached(rendered: Path) -> None:
    slos = read_json(rendered / "failed_kv_flood" / "verdict.json")["slos"]
    layers = section(report(rendered, "failed_kv_flood"), "layers")
    verdicts = dict(re.findall(r"<tr><td>([^<]+)</td><td><span[^>]*>([^<]+)</span>", layers))
    assert {"k8s", "ray", "vllm", "device"} <= set(verdicts)
    for layer, verdict in verdicts.items():
        mine = [s for s in slos if s["layer"] == layer]
        expected = "no SLO" if not mine else ("ok" if all(s["ok"] for s in mine) else "breached")
        assert verdict == expected, layer
    assert "breached" in verdicts.values()


def test_slo_tables_show_each_phase_with_observed_and_threshold(rendered: Path) -> None:
    html = report(rendered, "failed_kv_flood")
    verdict = read_json(rendered / "failed_kv_flood" / "verdict.json")
    for slo in verdict["slos"]:
        rows = section(html, f"slos-{slo['phase']}")
        assert f"<td>{slo['name']}</td>" in rows
        assert f"{_escaped(slo['op'])} " in rows


def test_aborted_run_shows_slos_of_phases_that_never_ran_as_not_run(rendered: Path) -> None:
    assert "not run" in section(report(rendered, "aborted_pg_stall"), "slos-during")


def test_timing_triage_and_fault_evidence_are_shown(rendered: Path) -> None:
    html = report(rendered, "failed_kv_flood")
    verdict = read_json(rendered / "failed_kv_flood" / "verdict.json")
    timing = section(html, "timing")
    assert f"{verdict['timing']['time_to_detect_s']:.1f} s" in timing
    assert f"{verdict['timing']['time_to_recover_s']:.1f} s" in timing
    triage = section(html, "triage")
    assert "<strong>vllm</strong>" in triage
    assert _escaped(verdict["triage"]["reason"]) in triage
    fault = section(html, "fault")
    assert _escaped(verdict["fault"]["evidence"]["reason"]) in fault
    stamps = section(html, "fault-timestamps")
    for name in verdict["fault"]["evidence"]["timestamps"]:
        assert f"<td>{name}</td>" in stamps


def test_probe_errors_are_counted_per_probe(rendered: Path) -> None:
    with (rendered / "probe_error_node_loss" / "timeline.csv").open(newline="") as f:
        expected = Counter(row["probe"] for row in csv.DictReader(f) if row["error"])
    assert expected, "the probe-error recording must hold failed reads"
    errors = section(report(rendered, "probe_error_node_loss"), "errors-table")
    shown = dict(re.findall(r'<tr><td>([^<]+)</td><td class="num">(\d+)</td>', errors))
    assert shown == {probe: str(count) for probe, count in expected.items()}


def test_a_run_without_probe_errors_says_so(rendered: Path) -> None:
    # The aborted recording sampled only its calm baseline: no read failed.
    assert "No probe read failed." in section(report(rendered, "aborted_pg_stall"), "errors")


@pytest.mark.parametrize("name", RUN_NAMES)
def test_page_is_self_contained(rendered: Path, name: str) -> None:
    html = report(rendered, name)
    page = parse(html)
    assert not [t for t, _ in page.tags if t in ("script", "link", "img", "iframe", "object", "embed")]
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", html)
    assert not re.search(r"url\(\s*(?!#)", html)
    assert "@import" not in html
    assert "Content-Security-Policy" in html


@pytest.mark.parametrize("name", RUN_NAMES)
def test_element_ids_are_unique_across_the_inline_svgs(rendered: Path, name: str) -> None:
    ids = parse(report(rendered, name)).ids()
    duplicates = [i for i, n in Counter(ids).items() if n > 1]
    assert not duplicates


def test_every_text_from_the_run_is_escaped(run_copy: Callable[[str], Path]) -> None:
    run_dir = run_copy("failed_kv_flood")
    evil = '<script>alert("x")</script>'

    def inject(verdict: dict[str, Any]) -> None:
        verdict["reason"] = evil
        verdict["title"] = evil
        verdict["slos"][0]["name"] = evil
        verdict["triage"]["reason"] = evil
        verdict["fault"]["evidence"]["symptoms"]["target"] = evil

    edit_json(run_dir / "verdict.json", inject)
    render_run(run_dir)
    html = (run_dir / "report.html").read_text()
    assert "<script" not in html
    assert html.count("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;") >= 5
    assert "<script" not in (run_dir / "junit.xml").read_text()


def test_rendering_again_gives_the_same_bytes(run_copy: Callable[[str], Path]) -> None:
    run_dir = run_copy("probe_error_node_loss")
    first = [p.read_bytes() for p in render_run(run_dir)]
    second = [p.read_bytes() for p in render_run(run_dir)]
    assert first == second


def test_the_plots_stand_in_the_dashboards_rows_with_each_rows_alerts_marked(
    run_copy: Callable[[str], Path],
) -> None:
    """The three rows of deploy/grafana's dashboard, under the users' own plots; an alert of the
    vllm layer is marked on the vLLM row and the users' row, not on Ray's."""
    run_dir = run_copy("failed_kv_flood")
    marks = read_json(run_dir / "verdict.json")["phases"]
    injected = marks["injected"]
    with (run_dir / "timeline.csv").open("a", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        for k in range(30):
            t = injected - 5 + k
            firing = 5 <= k < 20
            if firing:
                writer.writerow(
                    [
                        t,
                        "alerts.firing",
                        "alertname=InferchaosKVCacheFull;layer=vllm;replica=replica-0",
                        1.0,
                        "",
                    ]
                )
            writer.writerow([t, "alerts.firing_count", "", 1.0 if firing else 0.0, ""])
    render_run(run_dir)
    html = (run_dir / "report.html").read_text()
    rows = re.findall(r'<div id="row-(\w+)" class="plot-row"><h3>([^<]+)</h3>', html)
    assert rows == [
        ("users", "Users: the canary requests"),
        ("vllm", "vLLM"),
        ("ray", "Ray"),
        ("k8s", "Kubernetes, nodes and device"),
    ]
    for plot_id in ("plot-availability", "plot-kv-cache", "plot-requests"):
        assert f'id="{plot_id}-alert-InferchaosKVCacheFull"' in section(html, plot_id), plot_id
    for plot_id in ("plot-actors-alive", "plot-nodes-alive"):
        assert "alert-Inferchaos" not in section(html, plot_id), plot_id
