"""What an environment can do, as small Protocols that faults and probes are typed against.

Faults and probes sit beside the environments, not above them (README "Architecture"): they
never import an environment class, only these Protocols, which every environment that has
the capability satisfies structurally.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from inferchaos.primitives.env_status import EnvStatus
from inferchaos.primitives.ray_nodes import RayNodeRecord


class RecordedLocalState(Protocol):
    """What faults and probes read from the state record of an embedded local environment."""

    @property
    def env_id(self) -> str: ...

    @property
    def nodes(self) -> list[RayNodeRecord]: ...

    @property
    def replicas_dir(self) -> Path: ...

    @property
    def replica_slots(self) -> range: ...


# --- What probes and the runner read ---


class RayEndpoints(Protocol):
    """Where an environment's Ray cluster answers, and its token: a local state record or a Kubernetes one."""

    @property
    def env_id(self) -> str: ...

    @property
    def ray_address(self) -> str: ...

    @property
    def dashboard_url(self) -> str: ...

    def read_token(self) -> str:
        """The Ray auth token; never printed (run folders redact it)."""
        ...


class Environment(Protocol):
    """The contract every environment (local, kind, cluster) fulfils; the CLI and the runner use it.

    Every environment serves vLLM on a Ray cluster, so every one names its Ray endpoints and
    can make this process a driver of that cluster.
    """

    @property
    def name(self) -> str: ...

    @property
    def local_devices(self) -> bool:
        """Whether the devices its replicas use are this host's: a device probe here reads them."""
        ...

    def up(self) -> EnvStatus:
        """Bring the environment up and return its status once every replica is healthy."""
        ...

    def down(self) -> list[int]:
        """Stop every process the environment started; return the pids that were ended."""
        ...

    def status(self) -> EnvStatus:
        """Read the live status of every layer."""
        ...

    def load_state(self) -> RayEndpoints:
        """The running environment's Ray endpoints; EnvironmentNotUp when there is none."""
        ...

    def connect_ray(self) -> None:
        """Make this process a driver of the environment's Ray cluster (once per process)."""
        ...
