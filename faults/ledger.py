"""The on-disk ledger of live injections.

Each injection is written here before it acts, and removed by its revert, so
`inferchaos cleanup` can revert whatever is still listed, even after the runner was killed.
One JSON file per entry, replaced atomically, so a crash mid-write never corrupts another.
An entry that cannot be read (hand-edited, truncated by a full disk, written by another
version) is reported and left on disk: it must neither be lost nor keep the others from
being reverted.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from inferchaos.errors import FaultError
from inferchaos.faults.base import FaultHandle
from inferchaos.layers import Layer
from inferchaos.paths import state_root

logger = logging.getLogger(__name__)

_REQUIRED_KEYS = ("fault", "layer", "params", "env", "id")
_KNOWN_KEYS = frozenset(f.name for f in fields(FaultHandle))


@dataclass(frozen=True)
class UnreadableEntry:
    """A ledger file that is not a fault handle, and why; it stays on disk."""

    path: Path
    why: str

    def __str__(self) -> str:
        return f"ledger entry {self.path} is unreadable: {self.why}"


@dataclass
class LedgerScan:
    """Everything in the ledger folder: the live handles (oldest first) and the files that are not."""

    handles: list[FaultHandle] = field(default_factory=list)
    unreadable: list[UnreadableEntry] = field(default_factory=list)


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

    def holds(self, handle_id: str) -> bool:
        """Whether the entry of ``handle_id`` is still on disk: it is until its revert completes, in any process."""
        return self._path(handle_id).is_file()

    def scan(self) -> LedgerScan:
        """Read every entry; one that cannot be read is listed with its reason, never raised or removed."""
        scan = LedgerScan()
        if not self.folder.is_dir():
            return scan
        for path in sorted(self.folder.glob("*.json")):
            try:
                scan.handles.append(_read_entry(path))
            except _Unreadable as e:
                scan.unreadable.append(UnreadableEntry(path, str(e)))
        scan.handles.sort(key=lambda h: h.created_at)
        return scan

    def entries(self) -> list[FaultHandle]:
        """Every readable live entry, oldest first; each unreadable one is logged on one line and skipped."""
        scan = self.scan()
        for entry in scan.unreadable:
            logger.warning("%s; left in place", entry)
        return scan.handles

    def is_empty(self) -> bool:
        """No entry on disk, readable or not."""
        scan = self.scan()
        return not scan.handles and not scan.unreadable


class _Unreadable(FaultError):
    """Why one ledger file is not a fault handle; becomes an UnreadableEntry, never escapes."""


def _read_entry(path: Path) -> FaultHandle:
    try:
        data: object = json.loads(path.read_text())
    except OSError as e:
        raise _Unreadable(f"cannot be read: {e.strerror or e}") from e
    except ValueError as e:  # JSONDecodeError and UnicodeDecodeError
        raise _Unreadable(f"not JSON: {e}") from e
    if not isinstance(data, dict):
        raise _Unreadable(f"not a JSON object but {type(data).__name__}")
    missing = [key for key in _REQUIRED_KEYS if key not in data]
    if missing:
        raise _Unreadable(f"missing keys: {', '.join(missing)}")
    if data["id"] != path.stem:
        # revert removes `<id>.json`: under another name the entry would outlive its revert.
        raise _Unreadable(f"its id {data['id']!r} does not match its file name")
    unknown = sorted(set(data) - _KNOWN_KEYS)
    if unknown:
        raise _Unreadable(f"unknown keys: {', '.join(unknown)}")
    try:
        data["layer"] = Layer(data["layer"])
    except ValueError as e:
        known = ", ".join(layer.value for layer in Layer)
        raise _Unreadable(f"unknown layer {data['layer']!r} (known: {known})") from e
    return FaultHandle(**data)
