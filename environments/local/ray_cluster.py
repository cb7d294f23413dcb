"""A real multi-node Ray cluster on one machine: one `ray start --block` per node.

Each node is the leader of its own process group (and session), so "node loss" can end
everything that node runs. Ports are chosen up front for every node because several
raylets on one host otherwise race for the same defaults (measured: `bind: Address
already in use` aborts the second raylet).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from inferchaos.environments.local.network import (
    LOOPBACK_NODE_IP,
    SERVICE_HOST_VAR,
    NodeNetwork,
    make_worker_host,
    node_network,
)
from inferchaos.environments.local.prometheus_server import (
    HEALTH_JOB,
    RAY_JOB,
    VLLM_JOB,
    Target,
    replica_targets,
    write_targets,
)
from inferchaos.environments.local.redis_store import gcs_ft_env
from inferchaos.environments.local.state import LocalEnvState
from inferchaos.environments.local.vllm_launcher import LAUNCHER_VAR, launcher_name, with_launcher
from inferchaos.errors import EnvironmentStartError
from inferchaos.primitives.netns import in_namespace_argv
from inferchaos.primitives.processes import (
    ENV_MARKER,
    port_is_free,
    spawn_process_group,
    wait_for_port,
)
from inferchaos.primitives.ray_nodes import NodePorts, RayNodeRecord

logger = logging.getLogger(__name__)

# A dead node is marked DEAD after about period x threshold (measured 2.9 s with these).
HEALTH_CHECK_ENV = {
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
    "RAY_health_check_timeout_ms": "1000",
    "RAY_health_check_initial_delay_ms": "1000",
}
# Where Prometheus reads Ray's metrics, they are reported this often, not every 10 s (Ray's
# default): a placement group stalled for a 12 s fault would otherwise show, and alert, after it.
METRICS_REPORT_INTERVAL_MS = 2000
NODE_RESOURCE_PREFIX = "inferchaos_node_"
STATE_DIR_VAR = "INFERCHAOS_STATE_DIR"
# Worker-process ports sit below the kernel's ephemeral range (32768+) and service ports
# above it (61000+): Ray's own processes bind port 0 and draw from that range, so a port
# picked from it beforehand can be taken in between. A `port_slot` shifts every port, so
# two environments (a developer's and the tests') can run side by side.
WORKER_PORT_BASE = 10000
WORKER_PORT_SPAN = 800
WORKER_PORTS_PER_SLOT = 11000
SERVICE_PORT_BASE = 61000
SERVICE_PORTS_PER_NODE = 10
SERVICE_PORTS_PER_SLOT = 200
MAX_NODE_INDEX = 12
# Above the blocks of nodes 0..MAX_NODE_INDEX (offsets 0..129), within the slot's 200 ports.
REDIS_PORT_OFFSET = 190
PROMETHEUS_PORT_OFFSET = 191
MAX_PORT_SLOT = 1


@dataclass(frozen=True)
class NodeSpec:
    """What one node declares to Ray."""

    name: str
    index: int
    is_head: bool
    num_cpus: int
    num_gpus: int
    object_store_bytes: int


def node_resource(name: str) -> str:
    """The custom resource that names a node, so work (and a fault) can be pinned to it."""
    return f"{NODE_RESOURCE_PREFIX}{name}"


def ray_process_env(
    env_id: str, token: str, state_dir: Path, gcs_ft: bool = False, prometheus: bool = False
) -> dict[str, str]:
    """Environment for every Ray process: auth on, fast health checks, our marker; with ``gcs_ft``,
    the GCS-reconnect budget of a fault-tolerant cluster (the head adds its storage itself); with
    ``prometheus``, Ray's metrics reported every METRICS_REPORT_INTERVAL_MS."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "CUDA_VISIBLE_DEVICES")}
    env.update(HEALTH_CHECK_ENV)
    env.update(
        {
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": token,
            "RAY_USAGE_STATS_ENABLED": "0",
            # Workers print little; keep Ray's own log dedup out of the way of our logs.
            "RAY_DEDUP_LOGS": "0",
            ENV_MARKER: env_id,
            STATE_DIR_VAR: str(state_dir),
        }
    )
    if gcs_ft:
        env.update(gcs_ft_env(None, env_id))
    if prometheus:
        env["RAY_metrics_report_interval_ms"] = str(METRICS_REPORT_INTERVAL_MS)
    return env


def allocate_ports(index: int, is_head: bool, port_slot: int = 0) -> NodePorts:
    """Ports for node ``index``: a block of service ports and a disjoint worker-port range."""
    if not 0 <= index <= MAX_NODE_INDEX:
        raise EnvironmentStartError(
            f"node index {index} is out of range; at most {MAX_NODE_INDEX} workers over time"
        )
    base = SERVICE_PORT_BASE + port_slot * SERVICE_PORTS_PER_SLOT + index * SERVICE_PORTS_PER_NODE
    block = list(range(base, base + SERVICE_PORTS_PER_NODE))
    taken = [p for p in block if not port_is_free(p)]
    if taken:
        raise EnvironmentStartError(
            f"ports {taken} for Ray node {index} are already in use on 127.0.0.1 "
            "(another environment with the same port_slot?)"
        )
    min_worker = WORKER_PORT_BASE + port_slot * WORKER_PORTS_PER_SLOT + index * WORKER_PORT_SPAN
    ports = NodePorts(
        node_manager=block[0],
        object_manager=block[1],
        metrics_export=block[2],
        dashboard_agent_listen=block[3],
        dashboard_agent_grpc=block[4],
        runtime_env_agent=block[5],
        min_worker=min_worker,
        max_worker=min_worker + WORKER_PORT_SPAN - 1,
    )
    if is_head:
        ports.gcs, ports.dashboard, ports.ray_client_server = block[6], block[7], block[8]
    return ports


def prometheus_port(port_slot: int = 0) -> int:
    """The environment's Prometheus port (``--prometheus``), beside the Redis port."""
    return SERVICE_PORT_BASE + port_slot * SERVICE_PORTS_PER_SLOT + PROMETHEUS_PORT_OFFSET


def redis_port(port_slot: int = 0) -> int:
    """The GCS storage's Redis port (``--gcs-ft``): past every node's block of the slot's service ports."""
    return SERVICE_PORT_BASE + port_slot * SERVICE_PORTS_PER_SLOT + REDIS_PORT_OFFSET


def ray_start_argv(
    spec: NodeSpec,
    ports: NodePorts,
    gcs_address: str,
    temp_dir: str,
    block: bool = True,
    node_ip: str = LOOPBACK_NODE_IP,
) -> list[str]:
    """The `ray start` command line for one node (``--block`` unless ``block`` is False)."""
    ray_cli = str(Path(sys.executable).with_name("ray"))
    argv = [
        ray_cli,
        "start",
        *(["--block"] if block else []),
        "--disable-usage-stats",
        # The log monitor ships every worker's log lines to drivers through the GCS; the only
        # driver (connect_driver) turns log_to_driver off, so on every node it would only cost CPU
        # beside the replicas. The log files themselves are unchanged.
        "--include-log-monitor",
        "false",
        "--node-ip-address",
        node_ip,
        "--num-cpus",
        str(spec.num_cpus),
        "--num-gpus",
        str(spec.num_gpus),
        "--object-store-memory",
        str(spec.object_store_bytes),
        "--resources",
        json.dumps({node_resource(spec.name): 1}),
        "--node-manager-port",
        str(ports.node_manager),
        "--object-manager-port",
        str(ports.object_manager),
        "--metrics-export-port",
        str(ports.metrics_export),
        "--dashboard-agent-listen-port",
        str(ports.dashboard_agent_listen),
        "--dashboard-agent-grpc-port",
        str(ports.dashboard_agent_grpc),
        "--runtime-env-agent-port",
        str(ports.runtime_env_agent),
        "--min-worker-port",
        str(ports.min_worker),
        "--max-worker-port",
        str(ports.max_worker),
    ]
    if spec.is_head:
        argv += [
            "--head",
            "--port",
            str(ports.gcs),
            "--include-dashboard",
            "true",
            "--dashboard-host",
            "127.0.0.1",
            "--dashboard-port",
            str(ports.dashboard),
            "--ray-client-server-port",
            str(ports.ray_client_server),
            "--temp-dir",
            temp_dir,
        ]
    else:
        argv += ["--address", gcs_address]
    return argv


def unwatched_argv(argv: list[str]) -> list[str]:
    """``argv`` (a `ray start` without ``--block``) followed by a ``sleep`` that stands for the node.

    `ray start --block` watches the processes it started and, when one dies by a signal, kills
    the rest and exits (measured: a SIGKILL to the head's gcs_server took its raylet, dashboard
    and Serve's proxy down with it). A head whose GCS is restarted on its own must not be
    watched that way: `ray start` returns once the head is up, and the ``sleep`` keeps the
    node's process group and its recorded pid, which `env down` and the head's status read.
    """
    return ["/bin/sh", "-c", '"$@" && exec sleep infinity', "ray-head", *argv]


# `ray start`'s words when its raylet did not register with the GCS in its fixed 30 s: on two
# busy cores, two replacement workers started at once can both miss it.
STARTUP_TIMED_OUT = "timed out during startup"
STARTUP_ATTEMPTS = 3
# The script below retries only that failure: ``$1`` is the node's log, the rest its `ray start`.
# What a failed start left of the node (everything in the shell's process group but the shell
# and the node's vLLM launcher) is killed first, so that the next try finds its ports free and
# a raylet left by the last try cannot register later, unwatched. Any other exit (a node ended
# by a kill, or one Ray declared dead after a partition) ends the shell with `ray start`'s code,
# as an exec'd `ray start` would have.
_RETRY_SCRIPT = f"""log=$1; shift; attempt=1
while :; do
  from=$(($(wc -c < "$log") + 1)); "$@"; rc=$?
  tail -c +"$from" "$log" | grep -q '{STARTUP_TIMED_OUT}' || exit $rc
  for pid in $(pgrep -g $$); do
    [ "$pid" = $$ ] && continue
    case "$(tr '\\0' ' ' < /proc/$pid/cmdline 2>/dev/null)" in *vllm_launcher*) continue;; esac
    kill -9 "$pid" 2>/dev/null
  done
  [ $attempt -ge {STARTUP_ATTEMPTS} ] && exit $rc
  attempt=$((attempt + 1)); echo "inferchaos: ray start timed out during startup; try $attempt of {STARTUP_ATTEMPTS}"
done"""


def retrying_startup(argv: list[str], log_path: Path) -> list[str]:
    """``argv`` (a worker's `ray start --block`) started again where its raylet never registered.

    A replacement node whose start timed out would otherwise leave its replica unplaced until
    the environment is started again; a node that registered and later ended is never restarted.
    """
    return ["/bin/sh", "-c", _RETRY_SCRIPT, "ray-node", str(log_path), *argv]


def start_node(
    spec: NodeSpec,
    gcs_address: str,
    temp_dir: str,
    env: dict[str, str],
    logs_dir: Path,
    port_slot: int = 0,
    watched: bool = True,
    network: NodeNetwork | None = None,
) -> RayNodeRecord:
    """Start one node as its own process group and return its record (not yet waited on).

    ``watched``: run it under `ray start --block`, which ends the whole node when one of its
    processes dies; False for a head whose GCS may die and be started again (``--gcs-ft``).
    ``network``: where the node lives; inside a namespace, nsenter execs `ray start` there
    (without forking), so the recorded pid is still the node's process group leader. A worker's
    start that timed out before its raylet registered is tried again (:func:`retrying_startup`).
    """
    place = network or NodeNetwork(node_ip=LOOPBACK_NODE_IP, service_host="127.0.0.1")
    ports = allocate_ports(spec.index, spec.is_head, port_slot)
    if spec.is_head:
        gcs_address = f"{place.node_ip}:{ports.gcs}"
    log_path = logs_dir / f"ray-{spec.name}.log"
    argv = ray_start_argv(spec, ports, gcs_address, temp_dir, block=watched, node_ip=place.node_ip)
    argv = argv if watched else unwatched_argv(argv)
    if not spec.is_head:
        argv = retrying_startup(argv, log_path)
    # Ray's worker processes inherit the raylet's environment: a replica reads there where
    # its vLLM server must listen to be reached from the head, and its node's launcher.
    node_env = {**env, SERVICE_HOST_VAR: place.service_host}
    if spec.num_gpus > 0:
        name = launcher_name(env[ENV_MARKER], spec.name)
        argv = with_launcher(argv, name, env[STATE_DIR_VAR], logs_dir / f"vllm-launcher-{spec.name}.log")
        node_env[LAUNCHER_VAR] = name
    if place.namespace:
        argv = in_namespace_argv(place.namespace, argv)
    pid = spawn_process_group(argv, node_env, log_path)
    logger.info("started ray node %s (pid %d) at %s", spec.name, pid, place.node_ip)
    return RayNodeRecord(
        name=spec.name,
        pid=pid,
        is_head=spec.is_head,
        num_cpus=spec.num_cpus,
        num_gpus=spec.num_gpus,
        ports=ports,
        log_path=str(log_path),
        address=place.node_ip,
        namespace=place.namespace,
    )


def wait_for_head(record: RayNodeRecord, timeout_s: float) -> None:
    """Block until the head's GCS and dashboard accept connections."""
    for what, port in (("GCS", record.ports.gcs), ("dashboard", record.ports.dashboard)):
        if not wait_for_port(port, timeout_s):
            raise EnvironmentStartError(
                f"the Ray head's {what} did not listen on port {port} within {timeout_s:.0f} s; "
                f"see {record.log_path}"
            )


def next_worker_index(state: LocalEnvState) -> int:
    """Index for a new worker node: one past every index used so far (ports stay disjoint)."""
    used = [int(n.name.rsplit("-", 1)[1]) for n in state.nodes if not n.is_head]
    return max(used, default=0) + 1


def worker_spec(state: LocalEnvState, index: int) -> NodeSpec:
    """A worker node with the resources the environment's config declares."""
    cfg = state.config
    return NodeSpec(
        name=f"worker-{index}",
        index=index,
        is_head=False,
        num_cpus=cfg.cpus_per_worker,
        num_gpus=cfg.gpus_per_worker,
        object_store_bytes=cfg.object_store_mib * 1024 * 1024,
    )


def refresh_scrape_targets(state: LocalEnvState) -> None:
    """Point the environment's Prometheus (``--prometheus``) at every replica slot and live Ray node."""
    if state.prometheus is None:
        return
    targets_dir = Path(state.prometheus.targets_dir)
    replicas = {f"replica-{slot}": state.config.replica_base_port + slot for slot in state.replica_slots}
    live = [n for n in state.nodes if not n.lost]
    # A replica may be placed on any worker: in namespaces each slot is listed at every live
    # worker's address, and only the one it runs on answers (the rest read as down).
    hosts = sorted({n.address for n in live if n.namespace}) or ["127.0.0.1"]
    write_targets(targets_dir, VLLM_JOB, replica_targets(replicas, hosts))
    write_targets(targets_dir, HEALTH_JOB, replica_targets(replicas, hosts))
    nodes = [
        Target(f"{n.address or LOOPBACK_NODE_IP}:{n.ports.metrics_export}", {"node": n.name}) for n in live
    ]
    write_targets(targets_dir, RAY_JOB, nodes)


def add_worker_node(state: LocalEnvState, token: str) -> RayNodeRecord:
    """Start a replacement (or extra) worker node, as an autoscaler would, and record it."""
    index = next_worker_index(state)
    env = ray_process_env(
        state.env_id, token, Path(state.state_dir), state.config.gcs_ft, state.config.prometheus
    )
    make_worker_host(state.env_id, state.network, index)
    record = start_node(
        worker_spec(state, index),
        state.ray_address,
        state.ray_temp_dir,
        env,
        state.logs_dir,
        state.config.port_slot,
        network=node_network(state.env_id, state.network, index, is_head=False),
    )
    state.nodes.append(record)
    state.save()
    refresh_scrape_targets(state)
    return record
