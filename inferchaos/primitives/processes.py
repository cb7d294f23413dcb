"""Starting and ending the processes of the local environment, by pid and process group.

Every process the environment starts carries ``INFERCHAOS_ENV_ID`` in its environment and
Ray and vLLM pass their environment on to their children, so even a process that escaped
its parent (an orphaned vLLM worker, a Ray worker in its own process group) can be found
and ended by its own pid.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from inferchaos.errors import EnvironmentStartError, FaultError

logger = logging.getLogger(__name__)

ENV_MARKER = "INFERCHAOS_ENV_ID"


def spawn_process_group(
    argv: Sequence[str], env: Mapping[str, str], log_path: Path, cwd: Path | None = None
) -> int:
    """Start ``argv`` as the leader of a new session and process group; return its pid.

    Output goes to ``log_path``. The process outlives the caller, which is what lets
    ``inferchaos env up`` return while the environment keeps running.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            list(argv),
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=str(cwd) if cwd else None,
            start_new_session=True,
        )
    # The Popen object is dropped on purpose: nobody waits on it here, and a later
    # process (env down, a fault) ends it by pid. Mark it returned so Python does not warn.
    proc.returncode = 0
    return proc.pid


def spawn_server(argv: Sequence[str], env: Mapping[str, str], log_path: Path) -> tuple[int, float]:
    """Start a server as its own process group; its pid and start time.

    The start time is what `env down` checks before it ends the pid again later (a server that
    retitles itself cannot be found by its environment marker, and a pid is reused).
    EnvironmentStartError when it exited at once.
    """
    pid = spawn_process_group(argv, env, log_path)
    try:
        return pid, psutil.Process(pid).create_time()
    except psutil.NoSuchProcess as e:
        raise EnvironmentStartError(f"{Path(argv[0]).name} exited at once; see {log_path}") from e


@dataclass
class ProcessLaunch:
    """How a process was started, read from /proc: enough to start the same command again.

    ``withheld``: names of environment variables left out of ``environ`` because they hold
    secrets (a launch is written to the ledger); whoever starts it again supplies them.
    """

    argv: list[str]
    cwd: str
    environ: dict[str, str]
    withheld: list[str] = field(default_factory=list)


def read_launch(proc: psutil.Process, withhold: Iterable[str] = ()) -> ProcessLaunch:
    """The command line, working folder and environment of ``proc``, leaving out ``withhold``.

    Raises psutil.NoSuchProcess or psutil.AccessDenied as psutil does.
    """
    environ = proc.environ()
    secret = [name for name in withhold if name in environ]
    return ProcessLaunch(
        argv=proc.cmdline(),
        cwd=proc.cwd(),
        environ={k: v for k, v in environ.items() if k not in secret},
        withheld=secret,
    )


def relaunch(launch: ProcessLaunch, secrets: Mapping[str, str], log_path: Path) -> int:
    """Start ``launch`` again, detached in a session of its own (it outlives the caller); its pid.

    ``secrets`` must hold every name the launch withheld.
    """
    missing = [name for name in launch.withheld if name not in secrets]
    if missing:
        raise FaultError(f"cannot start {launch.argv[0]} again without its withheld variables {missing}")
    env = {**launch.environ, **{name: secrets[name] for name in launch.withheld}}
    return spawn_process_group(launch.argv, env, log_path, cwd=Path(launch.cwd))


def descendants(pid: int) -> list[psutil.Process]:
    """The process ``pid`` and everything below it, or [] when it is gone."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def process_group(pgid: int) -> list[psutil.Process]:
    """Every live process of process group ``pgid`` (a group spawn_process_group made: its
    leader's pid), the leader gone or not. Finds what daemonized away from its parent, as
    `ray start` without --block leaves the head's agents, and retitled itself over its
    environment, where the marker cannot be read."""
    found: list[psutil.Process] = []
    for pid in psutil.pids():
        try:
            if os.getpgid(pid) == pgid:
                found.append(psutil.Process(pid))
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue
    return found


def processes_with_marker(env_id: str) -> list[psutil.Process]:
    """Every live process whose environment carries this environment's marker."""
    needle = f"{ENV_MARKER}={env_id}".encode()
    found: list[psutil.Process] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue  # exited meanwhile, or not ours to read
        if needle in environ.split(b"\0"):
            try:
                found.append(psutil.Process(int(entry.name)))
            except psutil.NoSuchProcess:
                continue
    return found


def signal_processes(procs: Iterable[psutil.Process], sig: signal.Signals) -> int:
    """Send ``sig`` to each process that still lives; return how many were signalled."""
    sent = 0
    for proc in procs:
        try:
            proc.send_signal(sig)
            sent += 1
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return sent


def kill_tree_now(pid: int) -> list[int]:
    """SIGKILL ``pid`` and every descendant at once: an instant machine loss.

    The tree is read first and then killed in one sweep, so no child can be reparented
    (and escape) between the kills. Returns the pids that were killed.
    """
    tree = descendants(pid)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    signal_processes(tree, signal.SIGKILL)
    return [p.pid for p in tree]


def end_processes(procs: Sequence[psutil.Process], grace_s: float = 5.0) -> list[int]:
    """SIGTERM, wait up to ``grace_s``, then SIGKILL whatever is left. Returns pids ended."""
    signal_processes(procs, signal.SIGTERM)
    _, alive = psutil.wait_procs(list(procs), timeout=grace_s)
    if alive:
        logger.info("%d process(es) ignored SIGTERM; sending SIGKILL", len(alive))
        signal_processes(alive, signal.SIGKILL)
        psutil.wait_procs(alive, timeout=5.0)
    return [p.pid for p in procs]


def pid_alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# A start time is boot time plus ticks since boot, and psutil reads the boot time from the
# wall clock each time: a clock step between the record and the check (NTP, a VM resumed)
# moves it by whole seconds. A reused pid needs pid_max (32768 here) more processes first,
# which no host starts within this window.
CREATE_TIME_TOLERANCE_S = 2.0


def same_process(pid: int, create_time: float) -> psutil.Process | None:
    """The live process ``pid`` if it is still the one that started at ``create_time``; None when it
    exited, is a zombie, or its pid now belongs to another process."""
    try:
        proc = psutil.Process(pid)
        if abs(proc.create_time() - create_time) > CREATE_TIME_TOLERANCE_S:
            return None
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
    except psutil.NoSuchProcess:
        return None
    return proc


def same_server(pid: int, create_time: float, port: int, program: str) -> psutil.Process | None:
    """The server recorded as ``pid``/``create_time``, or the process ``pid`` if it is ``program``
    listening on TCP ``port`` (its start time read differently since, after a larger clock step);
    None when neither holds."""
    proc = same_process(pid, create_time)
    if proc is not None:
        return proc
    try:
        proc = psutil.Process(pid)
        if not proc.name().startswith(program):
            return None
        listening = [c for c in proc.net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN]
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
    return proc if any(c.laddr and c.laddr.port == port for c in listening) else None


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS says is free right now on ``host``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """True if nothing listens on ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def wait_for_port(port: int, timeout_s: float, host: str = "127.0.0.1") -> bool:
    """Poll until something accepts connections on ``host:port``, or the timeout passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return True
        except OSError:
            time.sleep(0.2)
    return False
