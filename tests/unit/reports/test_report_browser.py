"""report.html in a real browser: headless Chromium with no network loads it without a console
error, and its screenshot is a page with content, not a blank one.

Skipped where Debian's ``chromium`` is not installed (CI's .ci/run installs it).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.image import imread

from inferchaos.reports.htmlkit import STATUS_COLOURS
from inferchaos.reports.render import render_run
from inferchaos.reports.verdict_schema import Status
from tests.skips import needs_package

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
pytestmark = needs_package("chromium", CHROMIUM, "Chromium (at /usr/bin/chromium or on PATH)")
WIDTH, HEIGHT = 1280, 2000


@dataclass(frozen=True)
class Visit:
    """What headless Chromium did with one page."""

    console: list[str]  # console messages and uncaught errors from Chromium's log
    screenshot: Path


def visit(page: Path, work: Path) -> Visit:
    """Load ``page`` from disk with every network path closed, logging the console to stderr."""
    shot = work / "shot.png"
    command = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={work / 'profile'}",
        "--proxy-server=127.0.0.1:9",
        "--enable-logging=stderr",
        "--v=0",
        f"--screenshot={shot}",
        f"--window-size={WIDTH},{HEIGHT}",
        page.resolve().as_uri(),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    # Chromium logs every console message (errors, CSP refusals, failed loads) as ":CONSOLE".
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]
    return Visit(console, shot)


def pixels(png: Path) -> np.ndarray:
    image = imread(png)
    assert image.shape[:2] == (HEIGHT, WIDTH)
    return np.round(image[:, :, :3] * 255).astype(np.uint8)


def test_console_check_catches_a_page_error(tmp_path: Path) -> None:
    """The console check below can fail: a page with a script error is caught."""
    page = tmp_path / "broken.html"
    page.write_text("<!DOCTYPE html><html><body><p>x</p><script>noSuchFunction();</script></body></html>")
    assert any("noSuchFunction" in line for line in visit(page, tmp_path).console)


def test_report_loads_offline_without_console_errors_and_is_not_blank(
    run_copy: Callable[[str], Path], tmp_path: Path
) -> None:
    run_dir = run_copy("failed_kv_flood")
    render_run(run_dir)
    result = visit(run_dir / "report.html", tmp_path)
    assert result.console == []
    image = pixels(result.screenshot)
    flat = image.reshape(-1, 3)
    not_white = np.any(flat < 245, axis=1).mean()
    colours = len(np.unique(flat, axis=0))
    assert not_white > 0.05, f"only {not_white:.1%} of the page is not white"
    assert colours > 100, f"only {colours} distinct colours"
    # The verdict banner sits at the top in the failed status colour.
    red = tuple(int(STATUS_COLOURS[Status.FAILED][i : i + 2], 16) for i in (1, 3, 5))
    top = image[:200].reshape(-1, 3)
    assert np.all(top == red, axis=1).mean() > 0.05
