"""Locust load during a chaos run: Locust in its own process group, read back as ``load.*`` probes.

Locust patches its process with gevent on import, so it never runs inside the runner: the
runner starts ``python -m locust -f inferchaos/load/locustfile.py`` as a separate process group
(:class:`LocustLoad`), and :class:`LoadProbe` reads the stats history CSV that Locust appends
to every second. :func:`load_probe_factory` plugs both into ``Runner(probe_factory=...)``.
"""

from __future__ import annotations

import asyncio
import csv
import io
import logging
import math
import os
import signal
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol, runtime_checkable

import psutil

from inferchaos.errors import ConfigError, EnvironmentError_, ProbeError
from inferchaos.layers import Layer
from inferchaos.paths import state_root
from inferchaos.primitives.capabilities import Environment
from inferchaos.primitives.processes import spawn_process_group
from inferchaos.run.probe_set import ProbeFactory, build_probes
from inferchaos.steady_state.canary import CanaryPace
from inferchaos.steady_state.probe_base import Canary, Probe, Sample

logger = logging.getLogger(__name__)

# Must match PROFILES in inferchaos/load/locustfile.py (a test checks Locust's own list of them);
# that file cannot be imported here, because importing Locust patches the process with gevent.
LOAD_PROFILES: tuple[str, ...] = ("steady", "ramp", "spike")
# The installed locustfile (package data's neighbour), wherever the runner was started from.
LOCUSTFILE = Path(__file__).resolve().with_name("locustfile.py")
HISTORY_SUFFIX = "_stats_history.csv"
REQUEST_TYPE = "LLM"


class LoadError(EnvironmentError_):
    """Locust could not be started; nothing was injected."""


@dataclass(frozen=True)
class LoadOptions:
    """How Locust is run beside an experiment."""

    profile: str = "steady"
    users: int = 4
    spawn_rate: float = 4.0
    # A cap, not the planned duration: the runner stops Locust itself. The cap ends the load
    # even if nobody does (the locustfile also stops once the runner's pid is gone).
    run_time_s: float = 3600.0
    model: str = ""
    locustfile: Path = LOCUSTFILE
    extra_args: tuple[str, ...] = ()
    start_timeout_s: float = 30.0
    stop_grace_s: float = 10.0

    def __post_init__(self) -> None:
        if self.profile not in LOAD_PROFILES:
            raise ConfigError(f"load profile {self.profile!r}: must be one of {', '.join(LOAD_PROFILES)}")
        if self.users < 1 or not self.spawn_rate > 0 or not self.run_time_s >= 1:
            raise ConfigError(
                f"load: users >= 1, spawn_rate > 0 and run_time_s >= 1 needed, got {self.users}, "
                f"{self.spawn_rate}, {self.run_time_s}"
            )


# -- the stats history CSV ----------------------------------------------------------------------


@dataclass
class HistoryReader:
    """Reads the rows Locust appended to ``<prefix>_stats_history.csv`` since the last call.

    Only complete lines are consumed: Locust may be half way through writing one.
    """

    path: Path
    columns: list[str] = field(default_factory=list, init=False)
    _offset: int = field(default=0, init=False)
    _partial: bytes = field(default=b"", init=False)

    def new_rows(self) -> list[dict[str, str]]:
        """Rows added since the previous call, oldest first ([] while the file does not exist)."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return []
        except OSError as e:
            raise ProbeError(f"cannot read Locust's stats history {self.path}: {e}") from e
        self._offset += len(data)
        data = self._partial + data
        complete, _, self._partial = data.rpartition(b"\n")
        if not complete:
            return []
        lines = complete.decode("utf-8", errors="replace").splitlines()
        if not self.columns:
            self.columns = next(csv.reader([lines.pop(0)]))
        return [
            dict(zip(self.columns, row, strict=False)) for row in csv.reader(io.StringIO("\n".join(lines)))
        ]


def _number(row: dict[str, str], column: str) -> float | None:
    """A numeric cell; None for Locust's ``N/A`` (no request in the window) or a missing column."""
    try:
        value = float(row[column])
    except (KeyError, ValueError):
        return None
    return value if math.isfinite(value) else None


def history_samples(rows: list[dict[str, str]]) -> list[Sample]:
    """The ``load.*`` Samples of the newest row per statistic among ``rows``.

    ``load.rps`` and ``load.failures`` count finished streams (the ``e2e`` metric), not the
    three custom metrics each request fires; they are Locust's "current" rates, averaged over
    the 10 s that end 2 s before the newest request. Percentiles, in seconds, cover Locust's
    sliding window (5 s, set in the locustfile). A row with ``N/A`` (no finished request in
    the window) yields no percentile.
    """
    newest: dict[tuple[str, str], dict[str, str]] = {}
    for row in rows:
        newest[(row.get("Type", ""), row.get("Name", ""))] = row
    aggregated = newest.get(("", "Aggregated"))
    if aggregated is None:
        return []
    samples: list[Sample] = []
    users = _number(aggregated, "User Count")
    if users is not None:
        samples.append(Sample("load.users", users))
    e2e = newest.get((REQUEST_TYPE, "e2e"))
    # No e2e row at all means no stream has finished yet: nothing per second.
    samples.append(Sample("load.rps", (_number(e2e, "Requests/s") or 0.0) if e2e else 0.0))
    samples.append(Sample("load.failures", (_number(e2e, "Failures/s") or 0.0) if e2e else 0.0))
    for metric, column, probe in (
        ("ttft", "50%", "load.ttft_p50_s"),
        ("ttft", "95%", "load.ttft_p95_s"),
        ("itl", "95%", "load.itl_p95_s"),
        ("e2e", "95%", "load.e2e_p95_s"),
    ):
        stat = newest.get((REQUEST_TYPE, metric))
        value = _number(stat, column) if stat else None
        if value is not None:
            samples.append(Sample(probe, value / 1000.0))
    return samples


# -- the Locust process -----------------------------------------------------------------------


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _wait_leader(pid: int, timeout_s: float) -> int | None:
    """Wait for ``pid`` to exit (reaping it when it is our child); its exit code, if known."""
    try:
        return psutil.Process(pid).wait(timeout=timeout_s)
    except psutil.NoSuchProcess:
        return None


def stop_process_group(pid: int, grace_s: float = 10.0) -> int | None:
    """End the process group led by ``pid``: SIGINT, then SIGTERM, then SIGKILL, each bounded.

    SIGINT first because it is the signal Locust (and a chaos run started by the locustfile)
    shut down cleanly on. Returns the leader's exit code when it could be read.
    """
    code: int | None = None
    for sig, wait_s in ((signal.SIGINT, grace_s), (signal.SIGTERM, grace_s / 2), (signal.SIGKILL, 5.0)):
        if not _group_alive(pid):
            break
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            break
        try:
            code = _wait_leader(pid, wait_s)
        except psutil.TimeoutExpired:
            logger.info("load: process group %d ignored %s for %g s", pid, sig.name, wait_s)
            continue
        deadline = time.monotonic() + wait_s
        while _group_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)  # the leader is gone; its group (e.g. --processes workers) follows
    if _group_alive(pid):
        logger.error("load: process group %d survived SIGKILL", pid)
    return code


class LocustLoad:
    """One headless Locust run against ``host``, its CSVs under ``csv_prefix``."""

    def __init__(self, host: str, csv_prefix: Path, options: LoadOptions | None = None) -> None:
        self.host = host.rstrip("/")
        # Absolute: Locust runs in another directory (workdir) than the runner that reads the CSVs.
        self.csv_prefix = csv_prefix.absolute()
        self.options = options or LoadOptions()
        self.pid: int | None = None
        self.exit_code: int | None = None

    @property
    def history_path(self) -> Path:
        """The stats history CSV (``--csv-full-history``) that :class:`LoadProbe` reads."""
        return Path(f"{self.csv_prefix}{HISTORY_SUFFIX}")

    @property
    def log_path(self) -> Path:
        return Path(f"{self.csv_prefix}_locust.log")

    @property
    def workdir(self) -> Path:
        """Locust's working directory: the folder of its CSVs (the run folder's ``load/``)."""
        return self.csv_prefix.parent

    def argv(self) -> list[str]:
        """The Locust command line."""
        o = self.options
        argv = [
            sys.executable,
            "-m",
            "locust",
            "-f",
            str(o.locustfile.absolute()),
            "--headless",
            "--only-summary",
            "--host",
            self.host,
            "--csv",
            str(self.csv_prefix),
            "--csv-full-history",
            "--load-profile",
            o.profile,
            "-u",
            str(o.users),
            "-r",
            f"{o.spawn_rate:g}",
            "--run-time",
            f"{math.ceil(o.run_time_s)}s",
            "--stop-with-pid",
            str(os.getpid()),
        ]
        if o.model:
            argv += ["--model", o.model]
        return argv + list(o.extra_args)

    @property
    def running(self) -> bool:
        """True while Locust's process is alive (not a zombie)."""
        if self.pid is None:
            return False
        try:
            return psutil.Process(self.pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    def start(self) -> None:
        """Start Locust and return once its first finished request is in the history.

        Raises LoadError (and leaves nothing running) if that takes longer than
        ``options.start_timeout_s`` or Locust exits.
        """
        if self.pid is not None:
            return
        self.csv_prefix.parent.mkdir(parents=True, exist_ok=True)
        # Locust runs in the folder of its CSVs, so that whatever it writes beside them lands in
        # the run folder, never in the installed package. Its state root is pinned to the
        # runner's: anything it starts (--chaos) attaches to the same environment.
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "INFERCHAOS_HOME": str(state_root())}
        self.pid = spawn_process_group(self.argv(), env, self.log_path, cwd=self.workdir)
        logger.info(
            "load: Locust %s profile started (pid %d); log %s", self.options.profile, self.pid, self.log_path
        )
        reader = HistoryReader(self.history_path)
        deadline = time.monotonic() + self.options.start_timeout_s
        while time.monotonic() < deadline:
            if any(r.get("Name") == "e2e" for r in reader.new_rows()):
                return
            if not self.running:
                break
            time.sleep(0.2)
        self.stop()
        why = f"exited with code {self.exit_code}" if self.exit_code is not None else "finished no request"
        raise LoadError(
            f"Locust {why} within {self.options.start_timeout_s:g} s against {self.host}; "
            f"its log {self.log_path} ends with:\n{self._log_tail()}"
        )

    def stop(self) -> int | None:
        """Stop Locust and its process group (bounded); returns its exit code when known."""
        if self.pid is None:
            return self.exit_code
        code = stop_process_group(self.pid, self.options.stop_grace_s)
        self.exit_code = code if code is not None else self.exit_code
        logger.info("load: Locust (pid %d) stopped, exit code %s", self.pid, self.exit_code)
        return self.exit_code

    def _log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError as e:
            return f"(no log: {e})"


class LoadProbe:
    """``load.*`` readings from the stats history of a running :class:`LocustLoad`.

    Each read yields the newest row per statistic that Locust wrote since the last read, or
    nothing when it wrote none. Samples: ``load.rps``, ``load.failures`` (failed streams per
    second), ``load.ttft_p50_s``, ``load.ttft_p95_s``, ``load.itl_p95_s``, ``load.e2e_p95_s``,
    ``load.users``.
    """

    name = "load"
    layer = Layer.LOAD

    def __init__(self, history_path: Path, load: LocustLoad | None = None) -> None:
        self._reader = HistoryReader(history_path)
        self._load = load

    async def read(self) -> list[Sample]:
        """The newest load statistics; raises ProbeError once the Locust process has died."""
        samples = history_samples(self._reader.new_rows())
        if not samples and self._load is not None and self._load.pid is not None and not self._load.running:
            raise ProbeError(f"Locust (pid {self._load.pid}) is not running; see {self._load.log_path}")
        return samples


class LoadedCanary:
    """What the runner starts and stops as "the canary" when load runs: the canary and Locust.

    The runner awaits ``start()`` just before the baseline and ``stop()`` after the recovery
    window (or on abort, interrupt and error), on the second element a probe factory
    returns. Locust's stop is shielded: a second Ctrl-C must not leave load running.
    """

    def __init__(self, canary: Canary, load: LocustLoad) -> None:
        self.canary = canary
        self.load = load

    async def start(self, phase_s: float = 0.0) -> None:
        """Start Locust, then the canary (``phase_s`` is the canary's, see CanaryProbe.start).

        Locust first: its start-up takes a while, and the canary's phase is counted from the
        moment sampling starts, which is right after this returns.
        """
        await asyncio.to_thread(self.load.start)
        try:
            await self.canary.start(phase_s)
        except BaseException:
            await asyncio.shield(asyncio.to_thread(self.load.stop))
            raise

    async def stop(self) -> None:
        """Stop Locust (bounded), then the canary."""
        try:
            await asyncio.shield(asyncio.to_thread(self.load.stop))
        finally:
            await self.canary.stop()


def _default_csv_dir() -> Path:
    return state_root() / "load" / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"


class _FrontDoorTarget(Protocol):
    @property
    def base_url(self) -> str: ...

    @property
    def model(self) -> str: ...


@runtime_checkable
class _AimedCanary(Protocol):
    """A canary that says where it sends its requests (CanaryProbe does)."""

    @property
    def config(self) -> _FrontDoorTarget: ...


def _front_door(env: Environment, canary: Canary) -> tuple[str, str]:
    """Front-door URL and model: the canary's own, else the environment's status."""
    if isinstance(canary, _AimedCanary):
        return str(canary.config.base_url), str(canary.config.model)
    status = env.status()
    return status.front_door.url, status.model.name


def load_probe_factory(
    profile: str,
    csv_dir: Path | None = None,
    options: LoadOptions | None = None,
    base: ProbeFactory = build_probes,
) -> ProbeFactory:
    """A runner probe factory: ``base``'s probes plus a :class:`LoadProbe`, with Locust load.

    The returned factory's second element is a :class:`LoadedCanary`, so the runner's own
    ``canary.start()`` / ``canary.stop()`` start Locust before the baseline and stop it after
    the recovery window. Locust's CSVs and log go to ``csv_dir`` (default: a new folder under
    ``.inferchaos/load/``) with the prefix ``locust``.
    """
    settings = replace(options or LoadOptions(), profile=profile)

    def factory(env: Environment, pace: CanaryPace, named: frozenset[str]) -> tuple[list[Probe], Canary]:
        probes, canary = base(env, pace, named)
        host, model = _front_door(env, canary)
        folder = csv_dir or _default_csv_dir()
        load = LocustLoad(host, folder / "locust", replace(settings, model=settings.model or model))
        return [*probes, LoadProbe(load.history_path, load)], LoadedCanary(canary, load)

    return factory
