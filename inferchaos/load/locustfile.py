"""Locust users that stream completions through an OpenAI-compatible front door.

Run it on its own (Locust monkey-patches the process with gevent on import, so it never shares
a process with the runner, Ray or asyncio code)::

    locust -f inferchaos/load/locustfile.py --headless --host http://127.0.0.1:8000 \\
        --load-profile ramp -u 8 -t 120s --csv runs/load --csv-full-history

Every completion is ``POST /v1/completions`` with ``stream: true``. Besides Locust's own row
for the HTTP request (time to response headers), each request fires three custom metrics of
request type ``LLM``: ``ttft`` (to the first SSE ``data:`` chunk that carries a choice),
``itl`` (mean gap between later chunks) and ``e2e`` (to the end of the stream, with the
output tokens as its response length). A failed request fires ``e2e`` with the exception.

Load shapes: ``--load-profile steady|ramp|spike`` picks one of the shape classes below (see
:func:`_select_profile` for why it is an argument). They read ``-u``, ``-r`` and ``-t``.

Chaos from a plain Locust run: ``--chaos kv_flood --chaos-at 60`` starts
``python -m inferchaos.cli.main run <packaged kv_flood.yaml> --out <--chaos-out>`` as a
child process, in Locust's working directory, 60 s into the test, and sends it SIGINT when the
test stops (end of ``-t``, Ctrl-C); the runner then reverts the fault and writes its verdict,
whose path is printed.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import math
import os
import random
import shlex
import signal
import subprocess
import sys
import time
from abc import abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gevent
import locust.stats
import psutil
from locust import FastHttpUser, LoadTestShape, between, constant, events, task
from locust.contrib.fasthttp import FAILURE_EXCEPTIONS
from locust.env import Environment
from locust.runners import Runner, WorkerRunner

from inferchaos.errors import ConfigError, InferchaosError
from inferchaos.primitives.openai_stream import parse_sse_line

logger = logging.getLogger(__name__)

REQUEST_TYPE = "LLM"
PROFILES = ("steady", "ramp", "spike")
EXPERIMENTS_DIR = (Path(__file__).resolve().parents[1] / "experiments").resolve()

# The load probe reads the stats history while it grows; Locust's default flush (every 5 s)
# would hand it five rows at once, so every row is flushed as it is written.
locust.stats.CSV_STATS_FLUSH_INTERVAL_SEC = 0
# Percentile columns of the history cover this sliding window. Locust's 10 s would delay a
# visible TTFT recovery by 10 s; 5 s still holds enough requests at a few per second.
locust.stats.CURRENT_RESPONSE_TIME_PERCENTILE_WINDOW = 5

CHAT_PROMPTS = (
    "Explain in one sentence why the sky is blue.",
    "Write a haiku about a cache that is always full.",
    "What is the capital of France?",
    "Give me three names for a grey cat.",
    "Summarise the plot of a heist film in two lines.",
)
LONG_WORDS = (
    "the service answers requests while the cluster keeps every replica busy with work and "
    "each node schedules tasks from a queue that grows whenever the cache of keys and values fills"
).split()


class StreamFailed(InferchaosError):
    """A streamed completion failed; its message is what Locust groups failures by."""


@dataclass
class StreamTiming:
    """What one streamed completion measured, in seconds from the request."""

    chunk_times_s: list[float] = field(default_factory=list)
    usage_tokens: int | None = None

    @property
    def ttft_s(self) -> float | None:
        return self.chunk_times_s[0] if self.chunk_times_s else None

    @property
    def itl_s(self) -> float | None:
        """Mean gap between token chunks after the first; None with fewer than two."""
        times = self.chunk_times_s
        return (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else None

    @property
    def output_tokens(self) -> int:
        return self.usage_tokens if self.usage_tokens is not None else len(self.chunk_times_s)


@dataclass
class Settings:
    """The custom command-line arguments, read once at init."""

    model: str = ""
    request_timeout_s: float = 60.0
    chat_max_tokens: int = 16
    long_max_tokens: int = 32
    long_prompt_words: int = 120
    ignore_eos: bool = False
    max_tokens_range_ratio: float = 0.0

    def max_tokens(self, mean: int) -> int:
        """One request's max_tokens: ``mean``, or uniform in mean x [1 - r, 1 + r] with a range ratio."""
        r = self.max_tokens_range_ratio
        if not r:
            return mean
        return random.randint(max(1, math.floor(mean * (1 - r))), max(1, math.ceil(mean * (1 + r))))


SETTINGS = Settings()


@events.init_command_line_parser.add_listener
def _add_arguments(parser: Any) -> None:
    # Added to the parser itself: Locust's argument groups do not accept include_in_web_ui.
    add = parser.add_argument
    add(
        "--load-profile",
        choices=PROFILES,
        default="steady",
        help="Load shape: steady (-u users), ramp (1 to -u users over --ramp-seconds), spike "
        "(-u users, --spike-users during the spike).",
    )
    add("--model", default="", help="Model to request; default: the first of GET /v1/models.")
    add("--request-timeout", type=float, default=60.0, help="Seconds a streamed completion may take.")
    add("--chat-max-tokens", type=int, default=16, help="max_tokens of the chat user.")
    add("--long-max-tokens", type=int, default=32, help="max_tokens of the long-context user.")
    add(
        "--long-prompt-words",
        type=int,
        default=120,
        help="Words in the long-context prompt (about 5 tokens each for the tiny local model).",
    )
    add(
        "--ignore-eos",
        action="store_true",
        help="Ask vLLM to generate exactly max_tokens (its ignore_eos), as `vllm bench serve --ignore-eos`.",
    )
    add(
        "--max-tokens-range-ratio",
        type=float,
        default=0.0,
        help="Draw each request's max_tokens uniformly from max-tokens x [1 - r, 1 + r] (0 <= r < 1), as "
        "`vllm bench serve --random-range-ratio` does: with equal lengths and no think time, streams "
        "finish together and their prompts arrive in lockstep.",
    )
    add(
        "--no-think-time",
        action="store_true",
        help="Users send their next request at once: a closed loop of -u requests, like --max-concurrency.",
    )
    add("--ramp-seconds", type=float, default=60.0, help="ramp: seconds to reach -u users.")
    add("--spike-at", type=float, default=30.0, help="spike: second the spike starts.")
    add("--spike-seconds", type=float, default=15.0, help="spike: how long it lasts.")
    add("--spike-users", type=int, default=0, help="spike: users during the spike (default 3 x -u).")
    add(
        "--chaos",
        default="",
        include_in_web_ui=False,
        help="Scenario to inject during the test: a name in experiments/ (kv_flood) or a YAML path.",
    )
    add(
        "--chaos-at",
        type=float,
        default=0.0,
        include_in_web_ui=False,
        help="Second of the test at which the chaos run starts (it samples its own baseline first).",
    )
    add(
        "--chaos-out",
        default="runs",
        include_in_web_ui=False,
        help="Where the chaos run writes its run folder (verdict.json, report.html).",
    )
    add(
        "--chaos-command",
        default="",
        include_in_web_ui=False,
        help="Command that replaces `python -m inferchaos.cli.main` (tests point it at a fake).",
    )
    add(
        "--chaos-stop-timeout",
        type=float,
        default=120.0,
        include_in_web_ui=False,
        help="Seconds the chaos run is given to revert and write its verdict after SIGINT.",
    )
    add(
        "--stop-with-pid",
        type=int,
        default=0,
        include_in_web_ui=False,
        help="End the test once this process is gone (LocustLoad passes the runner's pid).",
    )


# -- the users -----------------------------------------------------------------------------


def _fire(
    user: FastHttpUser, name: str, seconds: float, length: int = 0, exception: Exception | None = None
) -> None:
    user.environment.events.request.fire(
        request_type=REQUEST_TYPE,
        name=name,
        response_time=seconds * 1000.0,
        response_length=length,
        exception=exception,
        context={},
    )


def _read_stream(response: Any, started: float, timing: StreamTiming) -> None:
    """Time every SSE ``data:`` line of a streamed completion as it arrives.

    The geventhttpclient response is read line by line with ``\\n`` as separator: its public
    ``readline`` splits on ``\\r\\n`` and ``iter_content`` waits for 1 KiB, both of which
    would hold small SSE events back and distort TTFT and ITL. ``timing`` is filled as the
    chunks come, so a stream that breaks half way still has its TTFT.
    """
    raw = response._response
    while line := raw.readline(b"\n"):
        # Read on past [DONE] to the end of the message, so the connection goes back to the pool.
        event = parse_sse_line(line)
        if event is None:
            continue
        now = time.perf_counter() - started
        if event.error:
            raise StreamFailed(f"error event: {event.error[:100]}")
        if event.has_choices:
            timing.chunk_times_s.append(now)
        if event.completion_tokens is not None:
            timing.usage_tokens = event.completion_tokens


def stream_completion(user: FastHttpUser, prompt: str, max_tokens: int) -> None:
    """Send one streaming completion and fire its ``ttft``, ``itl`` and ``e2e`` metrics."""
    # Compression would buffer the event stream and hide per-chunk timing.
    headers = {"Accept-Encoding": "identity", "Accept": "text/event-stream"}
    started = time.perf_counter()
    timing = StreamTiming()
    try:
        body = {
            "model": _served_model(user),
            "prompt": prompt,
            "max_tokens": max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if SETTINGS.ignore_eos:
            body["ignore_eos"] = True
        response = user.client.post("/v1/completions", json=body, headers=headers, stream=True)
        if response.status_code != 200:
            raise StreamFailed(
                f"HTTP {response.status_code}"
                if response.status_code
                # A connection that failed has no status; Locust hangs what failed on the response
                # without declaring the attribute (it reads it with getattr too).
                else f"no response: {getattr(response, 'error', None)}"
            )
        _read_stream(response, started, timing)
        if timing.ttft_s is None:
            raise StreamFailed("stream ended without a data chunk")
    except (StreamFailed, ValueError, *FAILURE_EXCEPTIONS) as e:
        if timing.ttft_s is not None:
            _fire(user, "ttft", timing.ttft_s)
        error = e if isinstance(e, StreamFailed) else StreamFailed(f"{type(e).__name__}: {e}")
        _fire(user, "e2e", time.perf_counter() - started, timing.output_tokens, error)
        return
    _fire(user, "ttft", timing.ttft_s)
    if timing.itl_s is not None:
        _fire(user, "itl", timing.itl_s)
    _fire(user, "e2e", time.perf_counter() - started, timing.output_tokens)


def _served_model(user: FastHttpUser) -> str:
    """The first model of ``GET /v1/models``, asked once per process."""
    if SETTINGS.model:
        return SETTINGS.model
    response = user.client.get("/v1/models", name="/v1/models")
    try:
        SETTINGS.model = str(response.json()["data"][0]["id"])
    except (ValueError, KeyError, IndexError, TypeError) as e:
        raise StreamFailed(f"GET /v1/models gave no model (HTTP {response.status_code}); pass --model") from e
    logger.info("load: requesting model %s (from /v1/models)", SETTINGS.model)
    return SETTINGS.model


class ChatUser(FastHttpUser):
    """Short prompts and short answers, like a chat front end; the common user."""

    weight = 3
    wait_time = between(0.5, 1.5)

    @task
    def chat(self) -> None:
        stream_completion(self, random.choice(CHAT_PROMPTS), SETTINGS.max_tokens(SETTINGS.chat_max_tokens))


class LongContextUser(FastHttpUser):
    """Long prompts (documents, RAG context) that take a large share of the KV cache."""

    weight = 1
    wait_time = between(1.0, 3.0)

    @task
    def summarise(self) -> None:
        start = random.randrange(len(LONG_WORDS))
        words = itertools.islice(itertools.cycle(LONG_WORDS), start, start + SETTINGS.long_prompt_words)
        stream_completion(
            self, "Summarise: " + " ".join(words), SETTINGS.max_tokens(SETTINGS.long_max_tokens)
        )


# -- load shapes ---------------------------------------------------------------------------


class _Profile(LoadTestShape):
    """A shape that reads -u (users), -r (spawn rate) and -t (run time)."""

    abstract = True
    use_common_options = True

    def _options(self) -> Any:
        assert self.runner is not None
        return self.runner.environment.parsed_options

    def _users(self) -> int:
        return max(1, int(self._options().num_users or 1))

    def _rate(self) -> float:
        return float(self._options().spawn_rate or self._users())

    def tick(self) -> tuple[int, float] | None:
        elapsed = self.get_run_time()
        run_time = self._options().run_time
        # Locust only starts its own --run-time timer after a shape ends: the shape must stop.
        if run_time and elapsed >= run_time:
            return None
        return self.users_at(elapsed)

    @abstractmethod
    def users_at(self, elapsed: float) -> tuple[int, float]:
        """(users, spawn rate) ``elapsed`` seconds into the test."""


# Lower-case class names: Locust lists shapes by class name, and the name is the profile.
class steady(_Profile):
    """-u users throughout."""

    def users_at(self, elapsed: float) -> tuple[int, float]:
        return self._users(), self._rate()


class ramp(_Profile):
    """From one user to -u users, linearly over --ramp-seconds, then hold."""

    def users_at(self, elapsed: float) -> tuple[int, float]:
        span = max(1e-6, float(self._options().ramp_seconds))
        users = max(1, math.ceil(self._users() * min(1.0, elapsed / span)))
        return users, max(1.0, self._rate())


class spike(_Profile):
    """-u users, with --spike-users (default 3 x -u) from --spike-at for --spike-seconds."""

    def users_at(self, elapsed: float) -> tuple[int, float]:
        options = self._options()
        peak = options.spike_users or 3 * self._users()
        if options.spike_at <= elapsed < options.spike_at + options.spike_seconds:
            # A spike arrives at once: spawn the extra users within a second.
            return peak, float(max(peak, self._rate()))
        return self._users(), float(max(peak, self._rate()))


def _select_profile(environment: Environment, runner: Runner, name: str) -> None:
    """Make ``--load-profile`` the test's shape.

    Locust 2.47 has no option that names a shape: a headless run takes the first shape class
    of the locustfile, and only the web UI's class picker (``--class-picker``) chooses among
    them, by class name. So the profile is set here, before the test starts, the same way the
    class picker sets it.
    """
    shapes = environment.available_shape_classes or {}
    if name not in shapes:
        raise ConfigError(f"--load-profile {name}: no such shape; the locustfile has {sorted(shapes)}")
    shape = shapes[name]
    shape.runner = runner
    environment.shape_class = shape


# -- chaos from a Locust run ---------------------------------------------------------------


@dataclass(frozen=True)
class ChaosPlan:
    """Which scenario to inject, when, and how to start and stop its run."""

    experiment: Path
    at_s: float
    out_dir: Path
    command: tuple[str, ...]
    stop_timeout_s: float

    @classmethod
    def from_options(cls, options: Any) -> ChaosPlan | None:
        """The plan of ``--chaos``, or None without it; raises ConfigError on a bad value."""
        if not options.chaos:
            return None
        experiment = Path(options.chaos)
        if experiment.suffix not in (".yaml", ".yml"):
            experiment = EXPERIMENTS_DIR / f"{options.chaos}.yaml"
        if not experiment.is_file():
            known = sorted(p.stem for p in EXPERIMENTS_DIR.glob("*.yaml"))
            raise ConfigError(
                f"--chaos {options.chaos}: no experiment {experiment}; known: {', '.join(known)}"
            )
        if options.chaos_at < 0 or options.chaos_stop_timeout <= 0:
            raise ConfigError("--chaos-at must be >= 0 and --chaos-stop-timeout > 0")
        command = tuple(shlex.split(options.chaos_command)) or (
            sys.executable,
            "-m",
            "inferchaos.cli.main",
        )
        return cls(
            experiment.resolve(),
            options.chaos_at,
            Path(options.chaos_out).resolve(),
            command,
            options.chaos_stop_timeout,
        )

    def argv(self) -> list[str]:
        return [*self.command, "run", str(self.experiment), "--out", str(self.out_dir)]


class ChaosRun:
    """One chaos run beside a Locust test: started at ``plan.at_s``, interrupted at test stop.

    The run is a child process in its own session: a Ctrl-C in the terminal reaches Locust
    only, and Locust hands the run exactly one SIGINT, so the runner reverts once.
    """

    def __init__(self, plan: ChaosPlan) -> None:
        self.plan = plan
        self._timer: gevent.Greenlet | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._started_wall = 0.0
        self._log_path: Path | None = None
        self._reported = False

    def schedule(self) -> None:
        """Start the run ``plan.at_s`` seconds from now."""
        logger.info("chaos: %s starts in %g s", self.plan.experiment.stem, self.plan.at_s)
        self._timer = gevent.spawn_later(self.plan.at_s, self._start)

    def _start(self) -> None:
        self.plan.out_dir.mkdir(parents=True, exist_ok=True)
        log_path = (
            self.plan.out_dir / f"chaos-{self.plan.experiment.stem}-{time.strftime('%Y%m%d-%H%M%S')}.log"
        )
        self._started_wall = time.time()
        with open(log_path, "ab") as log:
            # In Locust's own directory, not the package's: the run's state (.inferchaos/, unless
            # INFERCHAOS_HOME says otherwise) is the one of the directory Locust was started in.
            self._proc = subprocess.Popen(
                self.plan.argv(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        logger.info(
            "chaos: started %s (pid %d); its output: %s", " ".join(self.plan.argv()), self._proc.pid, log_path
        )
        self._log_path = log_path
        gevent.spawn(self._watch)

    def _watch(self) -> None:
        assert self._proc is not None
        self._proc.wait()
        self._report()

    def stop(self) -> None:
        """Cancel a run not yet started; interrupt a running one and wait for its verdict (bounded)."""
        if self._timer is not None:
            if self._proc is None:
                logger.info(
                    "chaos: the test ended before %s was due; nothing injected", self.plan.experiment.stem
                )
            self._timer.kill(block=False)
            self._timer = None
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        logger.info("chaos: test stopping; interrupting the run (pid %d) so it reverts", proc.pid)
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=self.plan.stop_timeout_s)
        except subprocess.TimeoutExpired:
            logger.warning("chaos: run %d still busy after %g s; SIGTERM", proc.pid, self.plan.stop_timeout_s)
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10.0)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10.0)
                logger.error("chaos: run killed before it reverted; run `inferchaos cleanup`")
        self._report()

    def _report(self) -> None:
        if self._reported or self._proc is None or self._proc.returncode is None:
            return
        self._reported = True
        verdict = _newest_verdict(self.plan.out_dir, since=self._started_wall)
        name = self.plan.experiment.stem
        if verdict is None:
            print(
                f"chaos: {name} ended (exit {self._proc.returncode}) without a verdict; see {self._log_path}",
                flush=True,
            )
            return
        try:
            status = json.loads(verdict.read_text()).get("status", "?")
        except (OSError, ValueError) as e:
            status = f"unreadable ({e})"
        print(
            f"chaos: {name} {str(status).upper()} (exit {self._proc.returncode}); verdict: {verdict}; "
            f"report: {verdict.parent / 'report.html'}",
            flush=True,
        )


def _newest_verdict(out_dir: Path, since: float) -> Path | None:
    """The verdict.json written last under ``out_dir`` by a run that began at ``since`` or later."""
    found = [p for p in out_dir.glob("*/verdict.json") if p.stat().st_mtime >= since - 1.0]
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


_chaos: ChaosRun | None = None


@events.test_start.add_listener
def _on_test_start(environment: Environment, **_kwargs: Any) -> None:
    global _chaos
    if isinstance(environment.runner, WorkerRunner) or environment.parsed_options is None:
        return  # only the process that runs the test schedules chaos, once
    plan = ChaosPlan.from_options(environment.parsed_options)
    if plan is not None:
        _chaos = ChaosRun(plan)
        _chaos.schedule()


def _stop_chaos() -> None:
    global _chaos
    if _chaos is not None:
        chaos, _chaos = _chaos, None
        chaos.stop()


@events.test_stop.add_listener
def _on_test_stop(environment: Environment, **_kwargs: Any) -> None:
    _stop_chaos()


@events.quit.add_listener
def _on_quit(exit_code: int, **_kwargs: Any) -> None:
    # test_stop normally came first; this covers a quit without a stopped test.
    _stop_chaos()


# -- setup -----------------------------------------------------------------------------------


def _watch_pid(pid: int) -> None:
    """End the test (as Ctrl-C would) once ``pid`` is gone, so a crashed owner leaves no load."""
    while True:
        try:
            alive = psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            alive = False
        if not alive:
            logger.warning("load: process %d is gone; stopping the test", pid)
            os.kill(os.getpid(), signal.SIGINT)
            return
        gevent.sleep(1.0)


def _sigterm_as_interrupt(_signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt


@events.init.add_listener
def _on_init(environment: Environment, runner: Runner, **_kwargs: Any) -> None:
    options = environment.parsed_options
    if options is None:
        return  # used as a library, without Locust's command line
    SETTINGS.model = options.model
    SETTINGS.request_timeout_s = options.request_timeout
    SETTINGS.chat_max_tokens = options.chat_max_tokens
    SETTINGS.long_max_tokens = options.long_max_tokens
    SETTINGS.long_prompt_words = options.long_prompt_words
    SETTINGS.ignore_eos = options.ignore_eos
    SETTINGS.max_tokens_range_ratio = options.max_tokens_range_ratio
    for user_class in (ChatUser, LongContextUser):
        user_class.network_timeout = options.request_timeout
        if options.no_think_time:
            user_class.wait_time = constant(0)
    if isinstance(runner, WorkerRunner):
        return
    try:
        if not 0.0 <= options.max_tokens_range_ratio < 1.0:
            raise ConfigError(
                f"--max-tokens-range-ratio must be in [0, 1), got {options.max_tokens_range_ratio:g}"
            )
        _select_profile(environment, runner, options.load_profile)
        ChaosPlan.from_options(options)  # fail before any load is sent
    except ConfigError as e:
        logger.error("%s", e)
        sys.exit(2)
    # In a headless shape run Locust installs its SIGTERM handler only after the shape ends;
    # until then SIGTERM would kill it without test_stop, and a chaos run without its SIGINT.
    signal.signal(signal.SIGTERM, _sigterm_as_interrupt)
    # A process started in the background by a shell inherits SIGINT ignored; SIGINT is how
    # LocustLoad and --stop-with-pid stop the test, so it must interrupt.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if options.stop_with_pid:
        gevent.spawn(_watch_pid, options.stop_with_pid)
