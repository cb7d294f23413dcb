"""The on-disk record of a running local environment, so any process can attach to it."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from inferchaos.environments.local.config import LocalEnvConfig
from inferchaos.environments.local.model import TinyModelSpec
from inferchaos.environments.local.network import NetworkRecord
from inferchaos.environments.local.prometheus_server import PrometheusRecord
from inferchaos.environments.local.redis_store import RedisRecord
from inferchaos.errors import EnvironmentNotUp
from inferchaos.paths import local_env_dir
from inferchaos.primitives.ray_nodes import RayNodeRecord

STATE_FILE = "state.json"
TOKEN_FILE = "ray_auth_token"
REPLICAS_DIR = "replicas"


@dataclass
class LocalEnvState:
    """Everything another process needs to reach and end the environment."""

    env_id: str
    created_at: float
    config: LocalEnvConfig
    state_dir: str
    ray_temp_dir: str
    ray_address: str
    dashboard_url: str
    front_door_url: str
    model_dir: str
    served_model_name: str
    nodes: list[RayNodeRecord] = field(default_factory=list)
    ready: bool = False
    # The GCS's external storage, with --gcs-ft only.
    redis: RedisRecord | None = None
    # The Prometheus that scrapes it, with --prometheus only.
    prometheus: PrometheusRecord | None = None
    # Loopback, or a namespace per worker; None in a record written before networks were chosen.
    network: NetworkRecord | None = None

    @property
    def token_path(self) -> Path:
        return Path(self.state_dir) / TOKEN_FILE

    @property
    def replicas_dir(self) -> Path:
        return Path(self.state_dir) / REPLICAS_DIR

    @property
    def replica_slots(self) -> range:
        """One replica slot (and memory budget) per worker node."""
        return range(self.config.workers)

    @property
    def logs_dir(self) -> Path:
        return Path(self.state_dir) / "logs"

    def read_token(self) -> str:
        """The Ray auth token; kept in its own 0600 file, never in state or status output."""
        return self.token_path.read_text().strip()

    def save(self) -> None:
        """Write atomically, so a reader never sees half a state file."""
        path = Path(self.state_dir) / STATE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        os.replace(tmp, path)

    @classmethod
    def load(cls, state_dir: Path | None = None) -> LocalEnvState:
        """Attach to the environment recorded under ``state_dir`` (default .inferchaos/env/local)."""
        folder = state_dir or local_env_dir()
        path = folder / STATE_FILE
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError as e:
            raise EnvironmentNotUp(
                f"no local environment is recorded at {path}; start one with `inferchaos env up`"
            ) from e
        except json.JSONDecodeError as e:
            raise EnvironmentNotUp(
                f"the state file {path} is corrupt ({e}); run `inferchaos env down`"
            ) from e
        cfg = data["config"]
        data["config"] = LocalEnvConfig(
            **{
                **cfg,
                "model": TinyModelSpec(**cfg["model"]),
                "vllm_extra_args": tuple(cfg.get("vllm_extra_args", ())),
            }
        )
        data["nodes"] = [RayNodeRecord.from_dict(n) for n in data["nodes"]]
        data["redis"] = RedisRecord(**data["redis"]) if data.get("redis") else None
        data["prometheus"] = PrometheusRecord(**data["prometheus"]) if data.get("prometheus") else None
        data["network"] = NetworkRecord(**data["network"]) if data.get("network") else None
        return cls(**data)


def write_token(state_dir: Path, token: str) -> Path:
    """Store the Ray auth token readable by its owner only."""
    path = state_dir / TOKEN_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token)
    return path
