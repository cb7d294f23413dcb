"""The embedded local environment: real Ray nodes and real vLLM replicas on one machine."""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import httpx

from inferchaos.environments.local.config import LocalEnvConfig
from inferchaos.environments.local.dashboard_cpu import cap_dashboard, remove_dashboard_group
from inferchaos.environments.local.extra import require_local_extra
from inferchaos.environments.local.model import ensure_model
from inferchaos.environments.local.network import (
    NETNS,
    choose_network,
    make_bridge,
    make_worker_host,
    network_status,
    node_network,
    remove_network,
)
from inferchaos.environments.local.progress_check import OVERRIDE_FILE, HealthCheck, health_check_in_force
from inferchaos.environments.local.prometheus_server import PROMETHEUS, prometheus_path, start_prometheus
from inferchaos.environments.local.ray_cluster import (
    NODE_RESOURCE_PREFIX,
    NodeSpec,
    add_worker_node,
    prometheus_port,
    ray_process_env,
    redis_port,
    refresh_scrape_targets,
    start_node,
    wait_for_head,
    worker_spec,
)
from inferchaos.environments.local.redis_store import (
    GCS_RECONNECT_TIMEOUT_S,
    REDIS_SERVER,
    gcs_ft_env,
    redis_server_path,
    start_redis,
)
from inferchaos.environments.local.state import STATE_FILE, LocalEnvState, write_token
from inferchaos.errors import ConfigError, EnvironmentNotUp, EnvironmentStartError, InferchaosError
from inferchaos.paths import local_env_dir, short_scratch_dir
from inferchaos.primitives import http
from inferchaos.primitives.capabilities import RayEndpoints, SaneBaseline
from inferchaos.primitives.cpu_quota import remove_empty_slow_groups
from inferchaos.primitives.env_status import (
    EnvStatus,
    FrontDoorStatus,
    ModelStatus,
    NetworkStatus,
    NodeStatus,
    RayStatus,
    ReplicaStatus,
    VllmStatus,
)
from inferchaos.primitives.gcs_state import GcsStorage
from inferchaos.primitives.memory_budget import remove_budgets
from inferchaos.primitives.processes import (
    ENV_MARKER,
    descendants,
    end_processes,
    pid_alive,
    port_is_free,
    process_group,
    processes_with_marker,
    same_server,
    wait_for_port,
)
from inferchaos.primitives.ray_nodes import RayNodeRecord
from inferchaos.primitives.replica_slots import (
    ReplicaRecord,
    last_health_check_passed,
    read_records,
    replica_healthy,
)

logger = logging.getLogger(__name__)

SERVED_MODEL_NAME = "tiny-llama"
# The environment this process is a Ray driver of: two environments can reuse one address
# (the same port slot, one after the other), so the address alone does not tell them apart.
_driver_env_id: str | None = None
ProgressFn = Callable[[str], None]


def _no_progress(message: str) -> None:
    logger.info("%s", message)


def use_ray_auth(state: RayEndpoints) -> None:
    """Let this process talk to the environment's Ray cluster (token auth stays on).

    Ray reads RAY_AUTH_MODE into its config, and caches the token, once per process; a
    process that imported Ray earlier (pytest, a second environment) must refresh both,
    the way Ray's own test utilities do, or its requests go out without the token.
    """
    token = state.read_token()
    if os.environ.get("RAY_AUTH_MODE") == "token" and os.environ.get("RAY_AUTH_TOKEN") == token:
        return
    # The token must not change under a live driver connection to another cluster: Ray's
    # error listener would fail on it with InvalidAuthToken.
    if "ray" in sys.modules:
        import ray

        if ray.is_initialized() and _driver_env_id != state.env_id:
            ray.shutdown()
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_AUTH_TOKEN"] = token
    os.environ.pop("RAY_AUTH_TOKEN_PATH", None)
    # ray's _raylet.pyi stub leaves out these two Cython classes; the extension module has them.
    from ray._raylet import AuthenticationTokenLoader, Config  # type: ignore[attr-defined]

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


def list_ray_nodes(state: RayEndpoints, timeout_s: float = 10.0) -> list[NodeStatus]:
    """Nodes as Ray's state API reports them, DEAD ones included."""
    use_ray_auth(state)
    from ray.exceptions import AuthenticationError
    from ray.util.state import list_nodes
    from ray.util.state.exception import RayStateApiException

    try:
        nodes = list_nodes(
            address=state.dashboard_url, timeout=int(max(1, timeout_s)), raise_on_missing_output=False
        )
    except (RayStateApiException, AuthenticationError, ConnectionError, OSError) as e:
        raise EnvironmentNotUp(f"Ray's state API at {state.dashboard_url} did not answer: {e}") from e
    result = []
    for node in nodes:
        resources = node.resources_total or {}
        names = [k[len(NODE_RESOURCE_PREFIX) :] for k in resources if k.startswith(NODE_RESOURCE_PREFIX)]
        result.append(
            NodeStatus(
                node_id=node.node_id,
                alive=node.state == "ALIVE",
                is_head=bool(node.is_head_node),
                gpus=float(resources.get("GPU", 0.0)),
                cpus=float(resources.get("CPU", 0.0)),
                name=names[0] if names else "",
                address=node.node_ip or "",
            )
        )
    return sorted(result, key=lambda n: (not n.is_head, n.name))


def connect_driver(state: RayEndpoints) -> None:
    """Make this process a driver of the environment's cluster, leaving any other cluster first.

    A process is the driver of one cluster at a time, and the auth token must not change under
    a live connection: Ray's error listener would then fail with InvalidAuthToken.
    """
    import ray

    global _driver_env_id
    if ray.is_initialized():
        if _driver_env_id == state.env_id:
            return
        ray.shutdown()
    use_ray_auth(state)
    ray.init(
        address=state.ray_address, namespace="inferchaos", log_to_driver=False, logging_level=logging.WARNING
    )
    _driver_env_id = state.env_id


def _leave_any_driver() -> None:
    global _driver_env_id
    if "ray" in sys.modules:
        import ray

        if ray.is_initialized():
            ray.shutdown()
    _driver_env_id = None


def _disconnect_driver(state: RayEndpoints) -> None:
    """Stop being a driver of this cluster before it goes: a driver whose GCS is gone ends its
    whole process after Ray's reconnect timeout (60 s), silently, with exit code 1.

    The driver is known by the GCS it is connected to, not only by who connected it: another
    environment object of the same cluster (a kind or cluster config pointing at this Ray)
    connects it under its own name.
    """
    import sys

    if "ray" not in sys.modules:
        return
    import ray

    if not ray.is_initialized():
        return
    if _driver_env_id == state.env_id or _connected_gcs(ray) in (state.ray_address, None):
        ray.shutdown()


def _connected_gcs(ray: ModuleType) -> str | None:
    """The GCS address this process's driver is connected to; None when Ray cannot say."""
    from ray.exceptions import RaySystemError

    try:
        return str(ray.get_runtime_context().gcs_address)
    except (AttributeError, RuntimeError, RaySystemError) as e:
        logger.debug("the driver's GCS address is unknown: %s", e)
        return None


class LocalEnvironment:
    """`up()`, `down()` and `status()` for the embedded local environment."""

    name = "local"
    # Its replicas run on this host: the device probe reads its GPUs or memory budgets here.
    local_devices = True
    # About three times the slowest healthy baseline the scenarios' data record (their comments
    # in experiments/*.yaml, a busy CI machine's included): slower than that at rest, the
    # platform or the machine is sick, and a bound scaled from it would judge nothing.
    sane_baseline = SaneBaseline(ttft_p95_max_s=2.0)

    def __init__(
        self,
        config: LocalEnvConfig | None = None,
        state_dir: Path | None = None,
        progress: ProgressFn | None = None,
    ) -> None:
        self.config = config or LocalEnvConfig()
        self.state_dir = (state_dir or local_env_dir()).resolve()
        self._progress = progress or _no_progress
        # The id of the environment this object last started: lets a caller check, after a
        # failed start, that nothing carrying it survived.
        self.env_id: str | None = None

    # -- attach -----------------------------------------------------------------------------
    def is_recorded(self) -> bool:
        return (self.state_dir / STATE_FILE).is_file()

    def load_state(self) -> LocalEnvState:
        return LocalEnvState.load(self.state_dir)

    def budget_state(self) -> LocalEnvState:
        """The state naming each replica's memory budget (ReplicaBudgetEnvironment)."""
        return self.load_state()

    # -- up ---------------------------------------------------------------------------------
    def up(self) -> EnvStatus:
        """Start head, workers and replicas; return once every replica and the front door answer.

        On any failure everything started so far is torn down before the error propagates.
        Without the `local` extra nothing starts: EnvironmentError_ says what to install.
        """
        cfg = self.config
        cfg.validate()
        if cfg.gcs_ft:
            redis_server_path()  # one line naming what to install, before anything starts
        if cfg.prometheus:
            prometheus_path()
        if self.is_recorded():
            state = self.load_state()
            if state.ready and pid_alive(state.nodes[0].pid):
                if cfg.gcs_ft and not state.config.gcs_ft:
                    raise ConfigError(
                        "the local environment is already up without --gcs-ft; "
                        "take it down (`inferchaos env down`) and start it with --gcs-ft"
                    )
                if cfg.prometheus and state.prometheus is None:
                    raise ConfigError(
                        "the local environment is already up without --prometheus; "
                        "take it down (`inferchaos env down`) and start it with --prometheus"
                    )
                self._progress("local environment is already up")
                return self.status()
            self._progress("found a stale local environment; ending it first")
            self.down()
        # From here on this interpreter's processes run vLLM, Ray Serve and the model's libraries;
        # one already up (above) needed them only where it was started.
        require_local_extra()
        self._check_ports_free()
        env_id = uuid.uuid4().hex[:12]
        # Decided (and a colliding subnet refused) before anything is made.
        network = choose_network(cfg.network, cfg.subnet, cfg.port_slot, env_id)
        if network.mode != NETNS and cfg.network != "loopback":
            self._progress(f"network: loopback ({network.reason}); the network scenarios will be skipped")
        # A driver left connected to an earlier environment on these ports would reach the new
        # GCS with the old token; leave it before anything new listens there.
        _leave_any_driver()

        self._progress("generating the tiny model (cached after the first run)")
        model_path = ensure_model(cfg.model)

        self.state_dir.mkdir(parents=True, exist_ok=True)
        token = secrets.token_hex(32)
        write_token(self.state_dir, token)
        shutil.rmtree(self.state_dir / "replicas", ignore_errors=True)
        (self.state_dir / OVERRIDE_FILE).unlink(missing_ok=True)
        state = LocalEnvState(
            env_id=env_id,
            created_at=time.time(),
            config=cfg,
            state_dir=str(self.state_dir),
            ray_temp_dir=str(short_scratch_dir("ray")),
            ray_address="",
            dashboard_url="",
            front_door_url=f"http://127.0.0.1:{cfg.front_door_port}",
            model_dir=str(model_path),
            served_model_name=SERVED_MODEL_NAME,
            network=network,
        )
        self.env_id = state.env_id
        # Recorded before the first process starts, so `env down` can always find them.
        state.save()
        started = time.monotonic()
        try:
            self._start_ray(state, token)
            if cfg.prometheus:
                self._start_prometheus(state)
            self._deploy_replicas(state, started)
            self._progress(cap_dashboard(state.env_id, state.nodes[0].pid))
        except BaseException as e:
            # Whatever went wrong (Ctrl-C included), nothing started may outlive the attempt.
            self._progress("start-up failed; tearing down what was started")
            self.down()
            if isinstance(e, InferchaosError | KeyboardInterrupt | SystemExit):
                raise
            raise EnvironmentStartError(f"local environment failed to start: {e}") from e
        state.ready = True
        state.save()
        self._progress(f"local environment ready in {time.monotonic() - started:.0f} s")
        return self.status()

    def _check_ports_free(self) -> None:
        cfg = self.config
        if not port_is_free(cfg.front_door_port):
            raise EnvironmentStartError(
                f"front door port {cfg.front_door_port} is already in use; free it or set front_door_port"
            )
        if cfg.gcs_ft and not port_is_free(redis_port(cfg.port_slot)):
            raise EnvironmentStartError(
                f"port {redis_port(cfg.port_slot)} for the GCS's Redis is already in use "
                "(another --gcs-ft environment with the same port_slot?)"
            )
        if cfg.prometheus and not port_is_free(prometheus_port(cfg.port_slot)):
            raise EnvironmentStartError(
                f"port {prometheus_port(cfg.port_slot)} for the environment's Prometheus is already in use "
                "(another --prometheus environment with the same port_slot?)"
            )
        for slot in range(cfg.workers):
            port = cfg.replica_base_port + slot
            if not port_is_free(port):
                raise EnvironmentStartError(
                    f"replica port {port} is already in use; free it or set replica_base_port"
                )

    def _start_ray(self, state: LocalEnvState, token: str) -> None:
        cfg = state.config
        env = ray_process_env(state.env_id, token, self.state_dir, cfg.gcs_ft, cfg.prometheus)
        head_env = env
        if cfg.gcs_ft:
            self._progress("starting redis-server for the GCS's fault tolerance")
            state.redis = start_redis(
                redis_port(cfg.port_slot), env, state.logs_dir, Path(state.ray_temp_dir) / "redis"
            )
            state.save()
            head_env = {**env, **gcs_ft_env(state.redis, state.env_id)}
        head_spec = NodeSpec(
            name="head",
            index=0,
            is_head=True,
            num_cpus=1,
            num_gpus=0,
            object_store_bytes=cfg.object_store_mib * 1024 * 1024,
        )
        network = state.network
        if network is not None and network.mode == NETNS:
            self._progress(f"making a network namespace per worker on {network.subnet}")
            make_bridge(state.env_id, network)
        self._progress("starting the Ray head node")
        # A fault-tolerant head must outlive its GCS: nothing may end the node when gcs_server dies.
        head = start_node(
            head_spec,
            "",
            state.ray_temp_dir,
            head_env,
            state.logs_dir,
            cfg.port_slot,
            watched=not cfg.gcs_ft,
            network=node_network(state.env_id, network, 0, is_head=True),
        )
        state.nodes.append(head)
        state.ray_address = f"{head.address}:{head.ports.gcs}"
        state.dashboard_url = f"http://127.0.0.1:{head.ports.dashboard}"
        state.save()
        wait_for_head(head, timeout_s=60)
        # One at a time: nodes on one host share a session folder, and two raylets starting
        # together pick the same Unix socket name (measured: the second aborts on bind).
        for index in range(1, cfg.workers + 1):
            self._progress(f"starting Ray worker node {index}/{cfg.workers}")
            make_worker_host(state.env_id, network, index)
            node = start_node(
                worker_spec(state, index),
                state.ray_address,
                state.ray_temp_dir,
                env,
                state.logs_dir,
                cfg.port_slot,
                network=node_network(state.env_id, network, index, is_head=False),
            )
            state.nodes.append(node)
            state.save()
            self.wait_for_alive_nodes(state, index + 1, timeout_s=60)

    def _start_prometheus(self, state: LocalEnvState) -> None:
        self._progress("starting prometheus to scrape the replicas and Ray")
        state.prometheus = start_prometheus(
            prometheus_port(state.config.port_slot),
            Path(state.ray_temp_dir) / "prometheus",
            {**os.environ, ENV_MARKER: state.env_id},
            state.logs_dir,
        )
        state.save()
        refresh_scrape_targets(state)

    def wait_for_alive_nodes(self, state: LocalEnvState, count: int, timeout_s: float) -> list[NodeStatus]:
        """Poll Ray until ``count`` nodes are ALIVE, showing progress."""
        deadline = time.monotonic() + timeout_s
        alive: list[NodeStatus] = []
        while time.monotonic() < deadline:
            try:
                alive = [n for n in list_ray_nodes(state, timeout_s=5) if n.alive]
            except EnvironmentNotUp:
                alive = []
            if len(alive) >= count:
                return alive
            self._progress(f"waiting for Ray nodes: {len(alive)}/{count} alive")
            time.sleep(1.0)
        raise EnvironmentStartError(
            f"only {len(alive)} of {count} Ray nodes became ALIVE within {timeout_s:.0f} s; "
            f"see the logs in {state.logs_dir}"
        )

    def _deploy_replicas(self, state: LocalEnvState, started: float) -> None:
        cfg = state.config
        log_path = state.logs_dir / "deploy.log"
        with open(log_path, "ab") as log:
            deployer = subprocess.Popen(
                [sys.executable, "-m", "inferchaos.environments.local.deploy", str(self.state_dir)],
                env={**os.environ, ENV_MARKER: state.env_id},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            self._wait_for_replicas(state, deployer, log_path, started)
            if not wait_for_port(cfg.front_door_port, timeout_s=30):
                raise EnvironmentStartError(f"the front door did not listen on port {cfg.front_door_port}")
            self._wait_front_door(state)
        finally:
            if deployer.poll() is None:
                deployer.terminate()
                deployer.wait(timeout=30)

    def _wait_for_replicas(
        self, state: LocalEnvState, deployer: subprocess.Popen[bytes], log_path: Path, started: float
    ) -> None:
        cfg = state.config
        deadline = time.monotonic() + cfg.ready_timeout_s
        while time.monotonic() < deadline:
            code = deployer.poll()
            if code not in (None, 0):
                last = [line for line in log_path.read_text(errors="replace").splitlines() if line.strip()]
                raise EnvironmentStartError(
                    last[-1] if last else f"deploying the vLLM replicas failed (exit {code})"
                )
            records = [r for r in read_records(state.replicas_dir) if r.state != "stopped"]
            failed = [r for r in records if r.state == "failed"]
            if failed:
                raise EnvironmentStartError(
                    f"{failed[0].name} failed to start: vLLM {failed[0].failure}; its log is {failed[0].log_path}"
                )
            healthy = [r for r in records if r.state == "healthy"]
            if len(healthy) >= cfg.replicas and code == 0:
                return
            states = ", ".join(f"{r.name} {r.state}" for r in records) or "none placed yet"
            self._progress(
                f"waiting for {cfg.replicas} vLLM replica(s) to become healthy "
                f"[{states}] {time.monotonic() - started:.0f} s"
            )
            time.sleep(1.0)
        raise EnvironmentStartError(
            f"the vLLM replicas were not healthy within {cfg.ready_timeout_s:.0f} s; see {state.logs_dir}"
        )

    def _wait_front_door(self, state: LocalEnvState, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        last = ""
        while time.monotonic() < deadline:
            try:
                response = http.get(f"{state.front_door_url}/v1/models", timeout=5.0)
                if response.status_code == 200:
                    return
                last = f"HTTP {response.status_code}"
            except httpx.HTTPError as e:
                last = str(e)
            self._progress(f"waiting for the front door at {state.front_door_url} ({last})")
            time.sleep(1.0)
        raise EnvironmentStartError(f"the front door {state.front_door_url} did not answer: {last}")

    # -- clients ----------------------------------------------------------------------------
    def connect_ray(self) -> None:
        """Make this process a driver of the environment's cluster (once per process)."""
        state = self.load_state()
        if state.config.gcs_ft:
            # A driver, like a raylet, exits when it cannot reach the GCS for this long (Ray's
            # default 60 s): the runner must outlive an outage it injected, held ones included.
            os.environ.setdefault("RAY_gcs_rpc_server_reconnect_timeout_s", str(GCS_RECONNECT_TIMEOUT_S))
        connect_driver(state)

    def ray_nodes(self) -> list[NodeStatus]:
        """Ray's view of the nodes, DEAD ones included."""
        return list_ray_nodes(self.load_state())

    def replica_records(self) -> list[ReplicaRecord]:
        """What each replica published about itself (stopped ones left out)."""
        return [r for r in read_records(self.load_state().replicas_dir) if r.state != "stopped"]

    def wait_for_passing_health_checks(self, names: set[str], deadline: float) -> set[str]:
        """The replicas among ``names`` whose latest Serve health check passed, waiting for the
        others until the monotonic ``deadline`` at most.

        A replica that answers /health again (a frozen engine resumed) may still owe Serve
        failed checks in a row, and be replaced a moment later. Serve forgets them once a
        check passes: a run started then finds the replicas it was planned on.
        """
        replicas_dir = self.load_state().replicas_dir
        while True:
            passing = {n for n in names if last_health_check_passed(replicas_dir, n)}
            if passing == names or time.monotonic() >= deadline:
                return passing
            time.sleep(0.25)

    def health_check_in_force(self) -> str:
        """The health check the replicas answer Serve with now (environments/local/progress_check.py)."""
        return health_check_in_force(self.state_dir, self.load_state().config.health_check)

    def override_health_check(self, mode: str | None) -> None:
        """Make every replica answer with ``mode`` from its next check on; None restores its own."""
        path = self.state_dir / OVERRIDE_FILE
        if mode is None:
            path.unlink(missing_ok=True)
            return
        tmp = path.with_suffix(".tmp")
        tmp.write_text(str(HealthCheck(mode)))
        os.replace(tmp, path)

    def add_worker(self) -> RayNodeRecord:
        """Start a replacement worker node with the configured resources, as an autoscaler would."""
        state = self.load_state()
        return add_worker_node(state, state.read_token())

    def gcs_storage(self) -> GcsStorage | None:
        """Where the head's GCS keeps its state outside itself; None without --gcs-ft (GcsEnvironment)."""
        state = self.load_state()
        if not state.config.gcs_ft or state.redis is None:
            return None
        head = state.nodes[0]
        return GcsStorage(
            env_id=state.env_id,
            gcs_address=state.ray_address,
            gcs_port=head.ports.gcs,
            redis_address=state.redis.address,
            redis_pid=state.redis.pid,
            reconnect_timeout_s=GCS_RECONNECT_TIMEOUT_S,
            logs_dir=str(state.logs_dir),
        )

    def network(self) -> NetworkStatus:
        """How the nodes are networked (NetworkEnvironment); each node's namespace is in its record."""
        state = self.load_state()
        return network_status(state.env_id, state.network)

    def ray_auth_token(self) -> str:
        """The cluster's token, for a Ray process started again (never written to the ledger)."""
        return self.load_state().read_token()

    def mark_node_lost(self, name: str) -> None:
        """Record that a node was killed, so it is never targeted (or waited for) again."""
        state = self.load_state()
        for node in state.nodes:
            if node.name == name:
                node.lost = True
        state.save()

    # -- down -------------------------------------------------------------------------------
    def down(self) -> list[int]:
        """End every process of the environment by pid and remove its state; idempotent."""
        if not self.is_recorded():
            return []
        state = self.load_state()
        _disconnect_driver(state)
        procs = {p.pid: p for node in state.nodes for p in descendants(node.pid)}
        # Each node is a process group of its own; what left its parent stays in it.
        procs.update({p.pid: p for node in state.nodes for p in process_group(node.pid)})
        procs.update({p.pid: p for p in processes_with_marker(state.env_id)})
        redis = (
            same_server(state.redis.pid, state.redis.create_time, state.redis.port, REDIS_SERVER)
            if state.redis
            else None
        )
        if redis is not None:
            procs[redis.pid] = redis
        prometheus = (
            same_server(state.prometheus.pid, state.prometheus.create_time, state.prometheus.port, PROMETHEUS)
            if state.prometheus
            else None
        )
        if prometheus is not None:
            procs[prometheus.pid] = prometheus
        self._progress(f"stopping {len(procs)} process(es) of the local environment")
        ended = end_processes(list(procs.values()), grace_s=5.0)
        # Anything that escaped its parent meanwhile (an orphaned vLLM worker) is found by marker.
        stragglers = processes_with_marker(state.env_id)
        if stragglers:
            ended += end_processes(stragglers, grace_s=2.0)
        # After the processes (nothing holds a namespace then), before the record naming it goes.
        removed = remove_network(state.env_id, state.network)
        if removed:
            self._progress(f"removed {len(removed)} namespace(s) and link(s) of the environment")
        for name in (STATE_FILE, "ray_auth_token"):
            (self.state_dir / name).unlink(missing_ok=True)
        shutil.rmtree(self.state_dir / "replicas", ignore_errors=True)
        (self.state_dir / OVERRIDE_FILE).unlink(missing_ok=True)
        shutil.rmtree(state.ray_temp_dir, ignore_errors=True)
        remove_budgets(state.env_id)
        remove_dashboard_group(state.env_id)
        # A slowed replica's cgroup outlives its processes when cleanup could not run.
        remove_empty_slow_groups(self.name)
        return sorted(set(ended))

    # -- status -----------------------------------------------------------------------------
    def status(self) -> EnvStatus:
        """Live status of every layer, read from Ray's state API and each replica's /health."""
        state = self.load_state()
        namespaces = {n.name: n.namespace for n in state.nodes}
        nodes = [replace(n, namespace=namespaces.get(n.name, "")) for n in list_ray_nodes(state)]
        replicas = [
            ReplicaStatus(
                name=r.name,
                url=r.url,
                metrics_url=r.metrics_url,
                node_id=r.node_id,
                healthy=r.state == "healthy" and replica_healthy(r),
                state=r.state,
                pid=r.vllm_pid,
            )
            for r in read_records(state.replicas_dir)
            if r.state != "stopped"
        ]
        try:
            fd_ok = http.get(f"{state.front_door_url}/v1/models", timeout=5.0).status_code == 200
        except httpx.HTTPError:
            fd_ok = False
        return EnvStatus(
            env=self.name,
            up=state.ready and any(n.alive for n in nodes),
            ray=RayStatus(address=state.ray_address, dashboard_url=state.dashboard_url, nodes=nodes),
            vllm=VllmStatus(replicas=replicas, health_check=self.health_check_in_force()),
            front_door=FrontDoorStatus(url=state.front_door_url, healthy=fd_ok),
            model=ModelStatus(
                name=state.served_model_name,
                max_model_len=state.config.model.max_model_len,
                path=state.model_dir,
            ),
            prometheus=state.prometheus.status() if state.prometheus else None,
            network=network_status(state.env_id, state.network),
        )
