"""Shared pytest setup: every test run keeps its state out of the developer's .inferchaos/."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

# The shared fakes' fixtures (tests/fakes); every other fake is imported from tests.fakes.
pytest_plugins = ["tests.fakes.k8s_fixtures", "tests.fakes.gpu_fixtures"]


@pytest.fixture
def inferchaos_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private INFERCHAOS_HOME for one test, so nothing touches a running environment."""
    home = tmp_path / "inferchaos-home"
    monkeypatch.setenv("INFERCHAOS_HOME", str(home))
    yield home
