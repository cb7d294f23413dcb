"""Shared fixtures of the report tests: copies of the recorded run folders under
tests/fixtures/runs (never rendered in place), rendered once per session."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from inferchaos.reports.render import render_index, render_run
from tests.fakes.report_runs import RUN_NAMES, copy_run


@pytest.fixture
def run_copy(tmp_path: Path) -> Callable[[str], Path]:
    """Copy a recorded run folder into this test's tmp_path."""
    return lambda name: copy_run(name, tmp_path)


@pytest.fixture(scope="session")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A reports folder holding copies of all four recorded runs, each rendered, plus index.html.

    Rendering draws every plot with matplotlib, so it is done once for the whole session.
    """
    root = tmp_path_factory.mktemp("reports")
    for name in RUN_NAMES:
        render_run(copy_run(name, root))
    render_index(root)
    return root
