"""What an environment can do, as small Protocols that faults and probes are typed against.

Faults and probes sit beside the environments, not above them (README "Architecture"): they
never import an environment class, only these Protocols, which every environment that has
the capability satisfies structurally.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from inferchaos.primitives.env_status import EnvStatus, NetworkStatus, NodeStatus
from inferchaos.primitives.gcs_state import GcsStorage
from inferchaos.primitives.ray_nodes import RayNodeRecord
from inferchaos.primitives.replica_slots import ReplicaRecord

if TYPE_CHECKING:
    # Only named in annotations: the kubernetes client costs seconds to import, and a local
    # run never touches it.
    from inferchaos.primitives.kube.client import K8sTarget


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

    @property
    def logs_dir(self) -> Path: ...


# --- What faults act through ---
# Faults take the environment as ``Any`` at their public edge (the runner, `inferchaos cleanup`
# and the Chaos Toolkit adapter hand them whatever environment they opened) and narrow it to
# one of these with ``isinstance`` before acting, so a fault on the wrong environment is
# refused with one ConfigError line instead of an AttributeError halfway through.


@runtime_checkable
class NamedEnvironment(Protocol):
    """Every environment: its name is recorded in each ledger entry."""

    name: str


@runtime_checkable
class RayProcessEnvironment(Protocol):
    """What Ray-layer faults (and the engine kill) need: the embedded environment's process records."""

    name: str

    def load_state(self) -> RecordedLocalState: ...
    def connect_ray(self) -> None: ...
    def ray_nodes(self) -> list[NodeStatus]: ...
    def replica_records(self) -> list[ReplicaRecord]: ...
    def add_worker(self) -> RayNodeRecord: ...
    def mark_node_lost(self, name: str) -> None: ...


@runtime_checkable
class NetworkEnvironment(RayProcessEnvironment, Protocol):
    """What network faults need: the node records (each worker's namespace and address) and how
    the nodes are networked; on loopback there is no link to act on."""

    def network(self) -> NetworkStatus: ...


@runtime_checkable
class StatusEnvironment(Protocol):
    """What the vLLM flood needs: the front door, the replicas' endpoints and the served model."""

    name: str

    def status(self) -> EnvStatus: ...


@runtime_checkable
class ServeProcessEnvironment(RayProcessEnvironment, StatusEnvironment, Protocol):
    """What the Serve controller kill needs: the embedded environment (the controller's worker
    process runs on this host) and its status (the front door, and the dashboard that answers
    Ray's state API)."""


@runtime_checkable
class HealthCheckEnvironment(Protocol):
    """What blinding the replicas' health check needs: the check in force, and a way to override it."""

    name: str

    def health_check_in_force(self) -> str: ...

    def override_health_check(self, mode: str | None) -> None: ...


@runtime_checkable
class GcsEnvironment(ServeProcessEnvironment, Protocol):
    """What the GCS kill needs: the Serve environment above (the GCS runs on this host, the front
    door and the state API are read), where its GCS keeps its state, and the token a GCS started
    again must carry."""

    def gcs_storage(self) -> GcsStorage | None:
        """The GCS's external storage; None when the GCS keeps its state in memory (no --gcs-ft)."""
        ...

    def ray_auth_token(self) -> str: ...


class ReplicaSlotConfig(Protocol):
    """The part of a local environment's configuration that sizes its replica slots."""

    @property
    def workers(self) -> int: ...

    @property
    def replica_memory_mib(self) -> int: ...


class SlotBudgetState(RecordedLocalState, Protocol):
    """A recorded local state, with where it lives and how its replica budgets were sized."""

    @property
    def state_dir(self) -> str: ...

    @property
    def config(self) -> ReplicaSlotConfig: ...


@runtime_checkable
class BudgetEnvironment(Protocol):
    """What the squat of a replica's memory budget (``host:<slot>``) needs: the recorded state."""

    name: str

    def load_state(self) -> SlotBudgetState: ...


@runtime_checkable
class KubeEnvironment(Protocol):
    """What Kubernetes faults need: a cluster fenced by its allow-list."""

    name: str
    k8s: K8sTarget


# --- What probes and the runner read ---


@runtime_checkable
class ReplicaBudgetEnvironment(Protocol):
    """An environment whose replicas each run in a memory budget of their own, the local stand-in
    for a GPU's memory: the device probe reads those budgets as devices."""

    def budget_state(self) -> RecordedLocalState:
        """The recorded state naming the budgets; EnvironmentNotUp when the environment is not up."""
        ...


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


@dataclass(frozen=True)
class SaneBaseline:
    """The worst a healthy platform on an environment reads at rest, before any fault.

    A run's relative bounds scale with its own baseline; a baseline read from a sick platform or
    an overloaded machine would scale them out of reach, and the run would judge nothing. A
    baseline outside this range ends the run as an error naming it, with nothing injected
    (steady_state/baseline_gate.py).
    """

    # The canary's time to first token, p95 over the whole baseline (failed requests counted at
    # the canary's timeout).
    ttft_p95_max_s: float


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

    @property
    def sane_baseline(self) -> SaneBaseline:
        """What a healthy baseline reads at worst here: a run whose baseline reads worse is an error."""
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
