"""Stable replica names over Serve's random replica ids.

Serve replaces a lost replica with a new actor under a new id; users and faults want to say
"replica-1" and mean the same thing afterwards. A replica claims the lowest free slot by
holding an exclusive lock on ``slot-<k>.lock`` for its whole life; the kernel releases the
lock when the process dies, however it dies, so a replacement takes the slot over.
"""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from inferchaos.errors import EnvironmentStartError
from inferchaos.primitives import http


@dataclass
class ReplicaRecord:
    """What a replica publishes about itself under the environment's state folder."""

    name: str
    slot: int
    url: str
    metrics_url: str
    port: int
    vllm_pid: int
    actor_pid: int
    node_id: str
    state: str
    started_at: float
    ready_at: float | None
    log_path: str
    memory_budget: str = ""
    failure: str = ""
    failed_at: float | None = None

    def save(self, replicas_dir: Path) -> None:
        path = replicas_dir / f"{self.name}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        os.replace(tmp, path)


def claim_slot(replicas_dir: Path, max_slots: int) -> tuple[int, int]:
    """Lock the lowest free slot; return (slot, fd). Keep the fd open for the replica's life."""
    replicas_dir.mkdir(parents=True, exist_ok=True)
    for slot in range(max_slots):
        fd = os.open(replicas_dir / f"slot-{slot}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return slot, fd
    raise EnvironmentStartError(f"all {max_slots} replica slots under {replicas_dir} are taken")


def read_records(replicas_dir: Path) -> list[ReplicaRecord]:
    """Every replica record on disk, by slot (records of dead replicas included)."""
    records = []
    for path in sorted(replicas_dir.glob("replica-*.json")):
        try:
            records.append(ReplicaRecord(**json.loads(path.read_text())))
        except (OSError, json.JSONDecodeError, TypeError):
            continue  # being rewritten this instant; the next read sees it whole
    return sorted(records, key=lambda r: r.slot)


def mark_health_check(replicas_dir: Path, name: str, passed: bool) -> None:
    """Stamp now as when Serve's health check of ``name`` last passed, or last failed (the
    mtime of ``<name>.check-passed`` or ``<name>.check-failed``)."""
    (replicas_dir / f"{name}.check-{'passed' if passed else 'failed'}").touch()


def last_health_check_passed(replicas_dir: Path, name: str) -> bool:
    """Whether the latest of Serve's health checks of ``name`` to finish passed."""

    def stamped(outcome: str) -> float | None:
        try:
            return (replicas_dir / f"{name}.check-{outcome}").stat().st_mtime
        except FileNotFoundError:
            return None

    passed, failed = stamped("passed"), stamped("failed")
    return passed is not None and (failed is None or passed > failed)


def replica_healthy(record: ReplicaRecord, timeout_s: float = 2.0) -> bool:
    """True when the replica's own vLLM answers /health with 200."""
    try:
        return http.get(f"{record.url}/health", timeout=timeout_s).status_code == 200
    except httpx.HTTPError:
        return False
