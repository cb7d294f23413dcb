"""What an environment says about its GCS when the GCS is fault tolerant (its state kept in Redis)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath

# Ray's GCS binary: the first word of its command line ends so (ray/_private/services.py).
GCS_SERVER_EXECUTABLE = "gcs_server"


@dataclass(frozen=True)
class GcsStorage:
    """A GCS whose tables live in an external Redis, and where to find both.

    ``reconnect_timeout_s``: how long the cluster's raylets wait for a lost GCS before they exit
    (``RAY_gcs_rpc_server_reconnect_timeout_s``); an outage must end well inside it.
    """

    env_id: str
    gcs_address: str
    gcs_port: int
    redis_address: str
    redis_pid: int
    reconnect_timeout_s: float
    logs_dir: str


def is_gcs_server(cmdline: list[str], port: int) -> bool:
    """Whether a process's command line is Ray's gcs_server serving on ``port``."""
    if not cmdline or PurePath(cmdline[0]).name != GCS_SERVER_EXECUTABLE:
        return False
    return f"--gcs_server_port={port}" in cmdline
