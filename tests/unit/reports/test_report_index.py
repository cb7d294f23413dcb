"""index.html: the latest verdict per scenario, the history newest first, the TTR trend."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from inferchaos.reports.index import find_runs, sparkline
from inferchaos.reports.render import ReportError, render_index
from tests.fakes.report_runs import RUN_NAMES, copy_run, read_json


def table_rows(html: str, table_id: str) -> list[str]:
    start = html.index(f'id="{table_id}"')
    body = html[start : html.index("</table>", start)]
    return re.findall(r"<tr>(.*?)</tr>", body)[1:]  # without the header row


def test_index_over_all_runs_shows_the_latest_verdict_per_scenario(rendered: Path) -> None:
    html = (rendered / "index.html").read_text()
    verdicts = {name: read_json(rendered / name / "verdict.json") for name in RUN_NAMES}
    latest: dict[str, str] = {}
    for name, v in sorted(verdicts.items(), key=lambda item: item[1]["started_at"]):
        latest[v["experiment"]] = name
    rows = table_rows(html, "latest-table")
    assert len(rows) == len(latest)
    for experiment, name in latest.items():
        (row,) = [r for r in rows if r.startswith(f"<td>{experiment}</td>")]
        assert f'href="{name}/report.html"' in row
        assert f">{verdicts[name]['status']}<" in row
    # the recordings hold two kv_flood runs: the failed one is the newer
    assert latest["kv_flood"] == "failed_kv_flood"


def test_every_run_is_listed_newest_first_with_its_status(rendered: Path) -> None:
    html = (rendered / "index.html").read_text()
    rows = table_rows(html, "runs-table")
    names = [re.search(r'href="([^/"]+)/report.html"', row).group(1) for row in rows]
    started = [read_json(rendered / n / "verdict.json")["started_at"] for n in names]
    assert sorted(names) == sorted(RUN_NAMES)
    assert started == sorted(started, reverse=True)


def test_history_shows_pass_fail_per_run_and_a_ttr_sparkline(rendered: Path) -> None:
    html = (rendered / "index.html").read_text()
    (kv_flood,) = [r for r in table_rows(html, "history-table") if r.startswith("<td>kv_flood</td>")]
    assert re.findall(r">([PFAE])</span>", kv_flood) == ["F", "P"]  # newest first
    assert "<svg" in kv_flood and "<polyline" in kv_flood
    assert "1 of 2" in kv_flood


def test_index_is_self_contained(rendered: Path) -> None:
    html = (rendered / "index.html").read_text()
    assert "<script" not in html and "<link" not in html
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", html)


def test_runs_are_found_recursively_and_an_unreadable_one_is_listed(tmp_path: Path) -> None:
    copy_run("passed_kv_flood", tmp_path / "2026-01-01")
    copy_run("failed_kv_flood", tmp_path / "2026-01-08")
    broken = copy_run("aborted_pg_stall", tmp_path / "2026-01-08")
    (broken / "verdict.json").write_text("{}")
    runs, unreadable = find_runs(tmp_path)
    assert [r.folder for r in runs] == ["2026-01-08/failed_kv_flood", "2026-01-01/passed_kv_flood"]
    assert [u.folder for u in unreadable] == ["2026-01-08/aborted_pg_stall"]
    html = render_index(tmp_path).read_text()
    assert "2026-01-08/aborted_pg_stall" in html and "verdict.json" in html
    assert 'id="unreadable"' in html


def test_an_empty_reports_folder_gives_a_page_that_says_so(tmp_path: Path) -> None:
    html = render_index(tmp_path).read_text()
    assert "No run folder" in html


def test_a_missing_reports_folder_is_a_report_error(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="no such directory"):
        render_index(tmp_path / "absent")


def test_sparkline_leaves_gaps_for_runs_that_did_not_recover() -> None:
    svg = sparkline([10.0, None, 12.0, 8.0])
    assert svg.count("<circle") == 3
    assert svg.count("<polyline") == 1  # 12.0 -> 8.0; 10.0 stands alone
    assert 'stroke="#b91c1c"' in svg
    assert "no time to recover" in sparkline([None, None])


def test_rendered_run_links_only_to_reports_that_exist(tmp_path: Path) -> None:
    run = copy_run("passed_kv_flood", tmp_path)
    html = render_index(tmp_path).read_text()
    assert "href=" not in html  # not rendered yet: no dead link
    (run / "report.html").write_text("<!DOCTYPE html><title>report</title>")
    assert 'href="passed_kv_flood/report.html"' in render_index(tmp_path).read_text()
