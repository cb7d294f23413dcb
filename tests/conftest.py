"""Shared pytest setup: every test run keeps its state out of the developer's .inferchaos/."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

# The shared fakes' fixtures (tests/fakes); every other fake is imported from tests.fakes.
# tests.skips: under INFERCHAOS_STRICT_SKIPS (.ci/run) a skip fails, unless declared allowed.
pytest_plugins = ["tests.fakes.k8s_fixtures", "tests.fakes.gpu_fixtures", "tests.skips"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--cpu-hog",
        type=int,
        default=int(os.environ.get("INFERCHAOS_TEST_CPU_HOG", "0")),
        metavar="N",
        help="keep N busy-looping processes running for the whole session, so the scenarios are "
        "judged on a machine with that many cores taken (env: INFERCHAOS_TEST_CPU_HOG)",
    )


@pytest.fixture
def inferchaos_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private INFERCHAOS_HOME for one test, so nothing touches a running environment."""
    home = tmp_path / "inferchaos-home"
    monkeypatch.setenv("INFERCHAOS_HOME", str(home))
    yield home
