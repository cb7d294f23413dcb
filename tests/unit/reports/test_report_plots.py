"""Plot data: where the fault sits on the time axis, availability smoothing, gaps, unique SVG ids."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from inferchaos.reports.load import load_run
from inferchaos.reports.plots import PLOTS, markers, render_plots, rolling_mean, with_gaps


def test_markers_put_injection_revert_and_recovery_relative_to_the_baseline_start(
    run_copy: Callable[[str], Path],
) -> None:
    run = load_run(run_copy("failed_kv_flood"))
    marks = run.timeline.marks
    ttr = run.verdict.timing.time_to_recover_s
    assert ttr is not None
    m = markers(run)
    assert m.origin == marks["baseline_start"]
    assert m.injected == pytest.approx(marks["injected"] - marks["baseline_start"])
    assert m.reverted == pytest.approx(marks["reverted"] - marks["baseline_start"])
    assert m.recovered == pytest.approx(marks["reverted"] + ttr - marks["baseline_start"])


def test_markers_of_a_run_that_injected_nothing_are_empty(run_copy: Callable[[str], Path]) -> None:
    m = markers(load_run(run_copy("aborted_pg_stall")))
    assert (m.injected, m.reverted, m.recovered) == (None, None, None)


def test_rolling_mean_averages_the_trailing_window() -> None:
    points = [(0.0, 1.0), (1.0, 0.0), (2.0, 0.0), (3.0, 1.0), (13.5, 1.0)]
    assert rolling_mean(points, 2.0) == [(0.0, 1.0), (1.0, 0.5), (2.0, 0.0), (3.0, 0.5), (13.5, 1.0)]


def test_a_pause_in_readings_becomes_a_gap_in_the_line() -> None:
    points = [(0.0, 1.0), (1.0, 1.0), (2.0, 1.0), (9.0, 2.0), (10.0, 2.0)]
    gapped = with_gaps(points)
    assert len(gapped) == len(points) + 1
    assert math.isnan(gapped[3][1]) and 2.0 < gapped[3][0] < 9.0
    assert with_gaps(points[:3]) == points[:3]


def test_each_plot_scopes_its_svg_ids_under_its_own_id(run_copy: Callable[[str], Path]) -> None:
    plots = render_plots(load_run(run_copy("passed_kv_flood")))
    assert [p.id for p in plots] == [spec.id for spec in PLOTS]
    # The recording predates the network probe and had no Kubernetes.
    unrecorded = {"plot-k8s-pods", "plot-node-links"}
    assert {p.id for p in plots if p.svg is None} == unrecorded
    for plot in plots:
        if plot.svg is None:
            continue
        assert plot.svg.startswith("<svg")
        for element_id in re.findall(r'\bid="([^"]+)"', plot.svg):
            assert element_id.startswith(f"{plot.id}-")


def test_per_replica_plots_have_a_line_per_replica(run_copy: Callable[[str], Path]) -> None:
    plots = {p.id: p for p in render_plots(load_run(run_copy("failed_kv_flood")))}
    assert plots["plot-kv-cache"].lines == ("replica-0", "replica-1")
    assert set(plots["plot-requests"].lines) == {
        "replica-0 waiting",
        "replica-1 waiting",
        "replica-0 running",
        "replica-1 running",
    }
