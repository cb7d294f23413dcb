"""No two modules of the project share a file name, so a name says which module it is."""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Names Python or pytest give a fixed meaning to in every package.
PER_PACKAGE = {"__init__.py", "__main__.py", "conftest.py"}


def _modules() -> dict[str, list[str]]:
    by_name: dict[str, list[str]] = defaultdict(list)
    # The package's layer folders are symlinks into the repository: walked once, at their source.
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [
            d
            for d in dirs
            if not d.startswith(".") and not d.endswith(".egg-info") and d not in {"build", "dist", "runs"}
        ]
        for name in files:
            if name.endswith(".py") and name not in PER_PACKAGE:
                by_name[name].append(str(Path(folder, name).relative_to(ROOT)))
    return by_name


def test_no_two_modules_share_a_basename() -> None:
    clashes = {name: sorted(paths) for name, paths in _modules().items() if len(paths) > 1}
    assert clashes == {}


def test_the_walk_finds_every_layer() -> None:
    found = {path.split(os.sep)[0] for paths in _modules().values() for path in paths}
    assert {"inferchaos", "faults", "steady_state", "environments", "reports", "bench", "tests"} <= found
