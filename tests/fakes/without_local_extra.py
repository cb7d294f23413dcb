"""Run inferchaos as a base install (no `local` extra) would: ``python -m tests.fakes.without_local_extra``.

``... cli ARGS`` runs the `inferchaos` command line with ARGS; ``... import MODULE...`` imports
the modules (and loads every built-in fault). Before either, a finder placed first on
``sys.meta_path`` refuses the extra's modules as if they were not installed, and every name it
was asked for is written to the JSON file named by $WITHOUT_EXTRA_RECORD on the way out: a test
can then tell a command that never looked for them from one that looked and was refused. The
calls that would start the environment's first process or build its model are tripwires that
exit 99, so a check that let a command through fails the test and starts nothing.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

RECORD_ENV = "WITHOUT_EXTRA_RECORD"
TRIPWIRE_EXIT = 99
# The `local` extra's modules, and the part of Ray that needs its `serve` extra.
BLOCKED = (
    "vllm",
    "torch",
    "transformers",
    "tokenizers",
    "safetensors",
    "fastapi",
    "starlette",
    "uvicorn",
    "ray.serve",
)


class RefuseLocalExtra(importlib.abc.MetaPathFinder):
    """Answers every lookup of a BLOCKED module (or a submodule of one) with ModuleNotFoundError."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if any(fullname == name or fullname.startswith(f"{name}.") for name in BLOCKED):
            self.asked.append(fullname)
            raise ModuleNotFoundError(f"No module named {fullname!r} (no 'local' extra)", name=fullname)
        return None


def _tripwire(*_args: Any, **_kwargs: Any) -> NoReturn:
    print("tripwire: the local environment got past its extra check", file=sys.stderr)
    raise SystemExit(TRIPWIRE_EXIT)


def _arm_tripwires() -> None:
    # The names as env.py and the CLI call them: the model build and the first node's start.
    env = importlib.import_module("inferchaos.environments.local.env")
    env.ensure_model = _tripwire
    env.start_node = _tripwire
    env.start_redis = _tripwire


def _import(modules: list[str]) -> None:
    for module in modules:
        importlib.import_module(module)
    from inferchaos.faults.registry import fault_names

    fault_names()


def main() -> None:
    refuse = RefuseLocalExtra()
    # Modules a parent left imported would bypass the finder; this process starts clean.
    leaked = [name for name in sys.modules if any(name == b or name.startswith(f"{b}.") for b in BLOCKED)]
    if leaked:
        sys.exit(f"already imported before the finder was placed: {leaked}")
    sys.meta_path.insert(0, refuse)
    mode, args = sys.argv[1], sys.argv[2:]
    try:
        if mode == "import":
            _import(args)
        else:
            _arm_tripwires()
            from inferchaos.cli.main import main as cli_main

            sys.argv = ["inferchaos", *args]
            cli_main()
    finally:
        Path(os.environ[RECORD_ENV]).write_text(json.dumps({"asked": refuse.asked}))


if __name__ == "__main__":
    main()
