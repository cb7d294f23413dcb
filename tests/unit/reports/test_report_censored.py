"""summary.md and report.html say how many failed requests count in TTFT at the timeout, per phase."""

from __future__ import annotations

import csv
import html
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from inferchaos.reports.load import load_run
from inferchaos.reports.plots import PLOTS, render_plot
from inferchaos.reports.render import render_run
from inferchaos.reports.summary import render_summary

TIMEOUT_S = 10.0
# Seconds after the injection of passed_kv_flood where replica-0 fails four requests.
FAILED_AT = (2.0, 3.0, 4.0, 5.0)


def marks(run_dir: Path) -> dict[str, float]:
    with (run_dir / "timeline.csv").open(newline="") as f:
        return {
            row["probe"][len("phase.") :]: float(row["t"])
            for row in csv.DictReader(f)
            if row["probe"].startswith("phase.")
        }


def requests_per_phase(run_dir: Path) -> Counter[str]:
    """canary.success readings per phase, counted from the CSV and its marks alone."""
    m = marks(run_dir)
    counts: Counter[str] = Counter()
    with (run_dir / "timeline.csv").open(newline="") as f:
        for row in csv.DictReader(f):
            if row["probe"] != "canary.success":
                continue
            t = float(row["t"])
            if m["baseline_start"] <= t < m["injected"]:
                counts["baseline"] += 1
            elif m["injected"] <= t < m["reverted"]:
                counts["during"] += 1
            elif m["reverted"] <= t <= m["end"]:
                counts["recovery"] += 1
    return counts


def add_failures(run_dir: Path) -> None:
    """Append the rows the canary writes for requests that timed out on replica-0 during the fault."""
    injected = marks(run_dir)["injected"]
    censored = "censored=1;replica=replica-0"
    with (run_dir / "timeline.csv").open("a", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        for offset in FAILED_AT:
            t = repr(injected + offset)
            writer.writerows(
                [
                    (t, "canary.success", "replica=replica-0", "0.0", ""),
                    (t, "canary.ttft_s", censored, repr(TIMEOUT_S), ""),
                    (t, "canary.e2e_s", censored, repr(TIMEOUT_S), ""),
                ]
            )


def censored_line(summary: str) -> str:
    (line,) = [line for line in summary.splitlines() if line.startswith("- Censored TTFT:")]
    return line


def test_the_summary_counts_censored_requests_per_phase(run_copy: Callable[[str], Path]) -> None:
    run_dir = run_copy("passed_kv_flood")
    add_failures(run_dir)
    n = requests_per_phase(run_dir)
    assert n["during"] > len(FAILED_AT) and n["baseline"] and n["recovery"]
    text = render_summary(load_run(run_dir), ["summary.md"])
    assert censored_line(text) == (
        f"- Censored TTFT: baseline 0 of {n['baseline']}, during {len(FAILED_AT)} of {n['during']}, "
        f"recovery 0 of {n['recovery']} requests failed or timed out and count at the 10 s timeout"
    )


def test_the_report_shows_the_same_count_beside_the_slos_and_marks_failures_in_the_plot(
    run_copy: Callable[[str], Path],
) -> None:
    run_dir = run_copy("passed_kv_flood")
    add_failures(run_dir)
    render_run(run_dir)
    page = (run_dir / "report.html").read_text()
    found = re.search(r'<p id="censored">(.*?)</p>', page, re.S)
    assert found is not None
    text = html.unescape(re.sub(r"<[^>]+>", "", found[1]))
    summary_text = censored_line((run_dir / "summary.md").read_text())
    assert text == summary_text.removeprefix("- ")
    assert page.index('id="censored"') < page.index('id="slos-baseline"')
    # The latency plot draws the failures apart from the measured TTFT, at the timeout.
    (latency,) = [spec for spec in PLOTS if spec.id == "plot-canary-latency"]
    plot = render_plot(latency, load_run(run_dir))
    assert "failed, counted at the timeout" in plot.lines
    lines = {line.label: line.points for line in latency.lines(load_run(run_dir).timeline)}
    assert [v for _, v in lines["failed, counted at the timeout"]] == [TIMEOUT_S] * len(FAILED_AT)
    assert TIMEOUT_S not in [v for _, v in lines["TTFT"]]


def test_a_run_without_censored_samples_says_none_were_counted(run_copy: Callable[[str], Path]) -> None:
    # Recorded before failures were counted at the timeout: "0 failed" would not be true of it.
    run_dir = run_copy("passed_kv_flood")
    n = requests_per_phase(run_dir)
    assert censored_line(render_summary(load_run(run_dir), [])) == (
        f"- Censored TTFT: none (baseline {n['baseline']}, during {n['during']}, recovery {n['recovery']} requests)"
    )


def test_an_aborted_run_counts_its_baseline_alone(run_copy: Callable[[str], Path]) -> None:
    run_dir = run_copy("aborted_pg_stall")
    line = censored_line(render_summary(load_run(run_dir), []))
    assert re.fullmatch(r"- Censored TTFT: none \(baseline \d+ requests\)", line), line
