"""Load a repository script (scripts/, deploy/) as a module, for tests of what it generates."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).parents[1]


def load_script(relative: str) -> ModuleType:
    """The script at ``relative`` (to the repository root), imported under its own name."""
    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(f"inferchaos_script_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Its dataclasses look their module up by name.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
