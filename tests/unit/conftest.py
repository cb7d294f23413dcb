"""Unit-phase scheduling: the files that take tens of seconds on their own start first.

``make test`` hands whole files to xdist workers in collection order
(``--dist loadfile --no-loadscope-reorder``). Left to xdist's own order, by number of tests,
the one-test game-day files started last and the phase waited on them alone.
"""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Move the ``long_running`` files to the front, keeping every other order as collected."""
    items.sort(key=lambda item: item.get_closest_marker("long_running") is None)
