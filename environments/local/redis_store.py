"""The Redis server behind GCS fault tolerance (``env up --gcs-ft``), as KubeRay runs one beside a RayCluster.

The head's GCS writes its tables to this Redis (``RAY_REDIS_ADDRESS``) under the environment's
own namespace (``RAY_external_storage_namespace``), so a GCS started again after a crash reads
the cluster back: its nodes, actors and jobs, Serve's application among them. The server is the
distribution's ``redis-server``: real Redis, not a stand-in. It keeps its data in memory only
(no RDB, no AOF): it outlives the GCS, which is the failure under test, and a new environment
starts a new, empty server.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

from inferchaos.errors import ConfigError, EnvironmentStartError
from inferchaos.primitives.processes import spawn_server, wait_for_port

logger = logging.getLogger(__name__)

REDIS_SERVER = "redis-server"
REDIS_HOST = "127.0.0.1"
# KubeRay gives worker Pods this reconnect budget when GCS fault tolerance is on (Ray's default
# is 60 s): a raylet that cannot reach the GCS for longer exits and its node is lost. The head
# gets it too here, because its raylet (and Serve's proxy, the front door) stays up while only
# its GCS is restarted.
GCS_RECONNECT_TIMEOUT_S = 600
INSTALL_HINT = (
    "--gcs-ft needs the redis-server program for the GCS's external storage; install the "
    "distribution's package (apt-get install redis-server) or put redis-server on PATH"
)


@dataclass
class RedisRecord:
    """The Redis server of a --gcs-ft environment: what `env down` ends and `ray.kill_gcs` checks."""

    pid: int
    port: int
    log_path: str
    # Redis retitles itself over its environment, so the environment's marker cannot find it:
    # `env down` ends it by this pid, once its start time shows the pid is still Redis's.
    create_time: float = 0.0

    @property
    def address(self) -> str:
        return f"{REDIS_HOST}:{self.port}"


def redis_server_path() -> str:
    """The redis-server to run; ConfigError, in one line naming what to install, when there is none."""
    path = shutil.which(REDIS_SERVER)
    if path is None:
        raise ConfigError(INSTALL_HINT)
    return path


def redis_argv(server: str, port: int, data_dir: Path) -> list[str]:
    """The command line of the environment's Redis: loopback only, memory only."""
    return [
        server,
        "--port",
        str(port),
        "--bind",
        REDIS_HOST,
        # Memory only: persistence would only write files the next environment never reads.
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(data_dir),
    ]


def start_redis(
    port: int, env: dict[str, str], logs_dir: Path, data_dir: Path, timeout_s: float = 15.0
) -> RedisRecord:
    """Start Redis as its own process group and wait until it accepts connections."""
    server = redis_server_path()
    data_dir.mkdir(parents=True, exist_ok=True)
    log_path = logs_dir / "redis.log"
    pid, created = spawn_server(redis_argv(server, port, data_dir), env, log_path)
    logger.info("started redis-server on %s:%d (pid %d)", REDIS_HOST, port, pid)
    record = RedisRecord(pid=pid, port=port, log_path=str(log_path), create_time=created)
    if not wait_for_port(port, timeout_s, REDIS_HOST):
        raise EnvironmentStartError(
            f"redis-server did not listen on {record.address} within {timeout_s:.0f} s; see {log_path}"
        )
    return record


def gcs_ft_env(redis: RedisRecord | None, env_id: str) -> dict[str, str]:
    """What a node's processes add for GCS fault tolerance: every node the reconnect budget, the head
    (``redis`` given) the storage and its namespace."""
    env = {"RAY_gcs_rpc_server_reconnect_timeout_s": str(GCS_RECONNECT_TIMEOUT_S)}
    if redis is not None:
        env["RAY_REDIS_ADDRESS"] = redis.address
        # KubeRay sets the namespace to the RayCluster's uid: one cluster's tables per namespace.
        env["RAY_external_storage_namespace"] = env_id
    return env
