"""The on-disk ledger of live injections.

Each injection is written here before it acts, and removed by its revert, so
`inferchaos cleanup` can revert whatever is still listed, even after the runner was killed.
One JSON file per entry, replaced atomically, so a crash mid-write never corrupts another.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict
from pathlib import Path

from inferchaos.errors import FaultError
from inferchaos.faults.base import FaultHandle
from inferchaos.layers import Layer
from inferchaos.paths import state_root

logger = logging.getLogger(__name__)


class Ledger:
    """A folder of live fault handles."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder or state_root() / "ledger"

    def _path(self, handle_id: str) -> Path:
        return self.folder / f"{handle_id}.json"

    def record(self, handle: FaultHandle) -> None:
        """Write (or rewrite) the entry for ``handle``; call before acting and as state grows."""
        path = self._path(handle.id)
        tmp = path.with_suffix(".tmp")
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(asdict(handle), indent=2, default=str))
            os.replace(tmp, path)
        except OSError as e:
            raise FaultError(f"could not write ledger entry {path}: {e}") from e

    def remove(self, handle_id: str) -> None:
        """Drop the entry once its revert has completed; idempotent."""
        self._path(handle_id).unlink(missing_ok=True)

    def entries(self) -> list[FaultHandle]:
        """Every live entry, oldest first."""
        if not self.folder.is_dir():
            return []
        handles = []
        for path in self.folder.glob("*.json"):
            try:
                data = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError) as e:
                raise FaultError(f"ledger entry {path} is unreadable: {e}") from e
            data["layer"] = Layer(data["layer"])
            handles.append(FaultHandle(**data))
        return sorted(handles, key=lambda h: h.created_at)

    def is_empty(self) -> bool:
        return not self.entries()
