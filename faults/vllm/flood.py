"""KV-cache flood: concurrent long-context streaming requests that fill vLLM's KV cache.

Prompts are sized from the served ``max_model_len`` (read from /v1/models) to sit close to the
context limit, outputs are long (``ignore_eos``), and the default concurrency comes from the
replicas' KV capacity (``vllm:cache_config_info``), so the flood saturates the cache without
tuning. The flood runs in a background thread of the injecting process, so the canary and the
sampler keep going; revert closes every flood connection, which makes vLLM abort the requests.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import threading
import time
from dataclasses import asdict, dataclass, field

import httpx

from inferchaos.errors import ConfigError, FaultError, ProbeError
from inferchaos.faults.base import Evidence, FaultHandle, JsonObject, Planned, TypedFault, env_name, set_times
from inferchaos.faults.ledger import Ledger
from inferchaos.faults.registry import register
from inferchaos.faults.vllm.targets import FRONT_DOOR, VllmTarget, resolve_target, served_max_model_len
from inferchaos.layers import Layer
from inferchaos.primitives import http
from inferchaos.primitives.capabilities import StatusEnvironment
from inferchaos.primitives.openai_stream import stream_completion
from inferchaos.primitives.vllm_metrics import VllmSnapshot, parse_metrics

logger = logging.getLogger(__name__)

NAME = "vllm.flood_kv_cache"
WORDS = (
    "alpha",
    "beta",
    "gamma",
    "delta",
    "omega",
    "serve",
    "token",
    "cache",
    "block",
    "queue",
    "node",
    "ray",
)
DEFAULT_MAX_CONCURRENCY = 64
# The cache counts as saturated from here. A replica whose context is half its cache holds two
# maximal sequences at once, which fill 0.92 of it at their longest (measured on the local
# environment: 0.90-1.00 over front-door floods); vLLM leaves a request waiting only when its
# prompt does not fit in what is left, which the bite also asks for.
KV_SATURATED = 0.85


@dataclass
class FloodParams:
    """Where the flood goes, how hard (default concurrency: sized from the KV capacity) and for how long."""

    target: str = FRONT_DOOR
    concurrency: int | None = None
    # Prompts per replica beyond those whose prompts fit in its cache (default concurrency only).
    overfill: int = 2
    rate_per_s: float = 0.0
    duration_s: float | None = None
    prompt_fraction: float = 0.7
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY
    # How long inject waits for the KV cache to saturate before it returns.
    saturate_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        if not 0.1 <= self.prompt_fraction <= 0.9:
            raise ConfigError(
                f"{NAME}: prompt_fraction must be between 0.1 and 0.9, got {self.prompt_fraction}"
            )
        if self.rate_per_s < 0 or (self.duration_s is not None and self.duration_s <= 0):
            raise ConfigError(f"{NAME}: rate_per_s must be >= 0 and duration_s positive")
        if self.overfill < 0:
            raise ConfigError(f"{NAME}: overfill must be >= 0, got {self.overfill}")
        if self.concurrency is not None:
            self.check_concurrency(self.concurrency)

    def check_concurrency(self, concurrency: int) -> None:
        """The blast-radius fence on the number of open streams."""
        if not 1 <= concurrency <= self.max_concurrency:
            raise ConfigError(
                f"{NAME}: concurrency {concurrency} must be between 1 and max_concurrency {self.max_concurrency}"
            )


@dataclass
class FloodSettings:
    """Everything the flood thread needs, resolved before anything is sent."""

    url: str
    model: str
    metrics_urls: dict[str, str]
    max_model_len: int
    prompt_tokens: int
    max_tokens: int
    words_per_prompt: int
    concurrency: int
    rate_per_s: float
    duration_s: float | None
    kv_capacity_tokens: int


@dataclass
class FloodObservations:
    """What the flood's own monitor saw on the targets' /metrics (ground truth for evidence)."""

    started_at: float = 0.0
    sent: int = 0
    completed: int = 0
    failed: int = 0
    max_kv_usage: float = 0.0
    max_waiting: float = 0.0
    preemptions_at_start: float = 0.0
    preemptions_max: float = 0.0
    saturated_at: float | None = None
    errors: list[str] = field(default_factory=list)


def _prompt(words: int, seed: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(words))


def _count_tokens(url: str, model: str, text: str) -> int:
    try:
        response = http.post_json(f"{url}/tokenize", {"model": model, "prompt": text}, timeout=10)
        response.raise_for_status()
        return int(response.json()["count"])
    except (httpx.HTTPError, KeyError, ValueError) as e:
        raise FaultError(f"could not size flood prompts with {url}/tokenize: {e}") from e


def _read_snapshot(url: str) -> VllmSnapshot:
    return parse_metrics(http.get(url, timeout=5).text)


class _FloodThread(threading.Thread):
    """Owns an asyncio loop that keeps ``concurrency`` long streams open until stopped."""

    def __init__(self, settings: FloodSettings, handle_id: str) -> None:
        super().__init__(name=f"flood-{handle_id}", daemon=True)
        self.settings = settings
        self.obs = FloodObservations()
        self._seed = int(handle_id, 16) % 10_000_000
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None
        self._ready = threading.Event()

    def run(self) -> None:
        self._loop = asyncio.new_event_loop()
        try:
            self._loop.run_until_complete(self._main())
        finally:
            self._loop.close()

    def stop(self, timeout_s: float = 15.0) -> None:
        """Close every flood connection and wait for the thread to end."""
        self._ready.wait(timeout=5)
        if self._loop is not None and self._stop_event is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stop_event.set)
        self.join(timeout=timeout_s)

    async def _main(self) -> None:
        s = self.settings
        self._stop_event = asyncio.Event()
        self._ready.set()
        self.obs.started_at = time.time()
        limits = httpx.Limits(max_connections=s.concurrency + 4, max_keepalive_connections=0)
        async with http.async_client(timeout=httpx.Timeout(None, connect=5.0), limits=limits) as client:
            gate = asyncio.Semaphore(s.concurrency)
            monitor = asyncio.create_task(self._monitor(client))
            launcher = asyncio.create_task(self._launch(client, gate))
            stop_wait: asyncio.Task[object] = asyncio.create_task(self._stop_event.wait())
            waits = {stop_wait}
            if s.duration_s:
                waits.add(asyncio.create_task(asyncio.sleep(s.duration_s)))
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for task in (launcher, monitor, *waits):
                task.cancel()
            await asyncio.gather(launcher, monitor, *waits, return_exceptions=True)

    async def _launch(self, client: httpx.AsyncClient, gate: asyncio.Semaphore) -> None:
        s = self.settings
        interval = 1.0 / s.rate_per_s if s.rate_per_s > 0 else 0.0
        in_flight: set[asyncio.Task[None]] = set()
        n = 0
        try:
            while True:
                await gate.acquire()
                task = asyncio.create_task(self._one(client, n, gate))
                in_flight.add(task)
                task.add_done_callback(in_flight.discard)
                n += 1
                if interval:
                    await asyncio.sleep(interval)
        finally:
            # Cancelling a stream closes its connection: vLLM sees the client go and aborts.
            for task in in_flight:
                task.cancel()
            await asyncio.gather(*in_flight, return_exceptions=True)

    async def _one(self, client: httpx.AsyncClient, n: int, gate: asyncio.Semaphore) -> None:
        s = self.settings
        body = {
            "model": s.model,
            "prompt": _prompt(s.words_per_prompt, self._seed + n),
            "max_tokens": s.max_tokens,
            "ignore_eos": True,
            "stream": True,
        }
        self.obs.sent += 1
        try:
            async with client.stream("POST", f"{s.url}/v1/completions", json=body) as response:
                if response.status_code != 200:
                    self.obs.failed += 1
                    if len(self.obs.errors) < 5:
                        self.obs.errors.append(
                            f"HTTP {response.status_code}: {(await response.aread())[:200]!r}"
                        )
                    return
                async for _ in response.aiter_lines():
                    pass
            self.obs.completed += 1
        except httpx.HTTPError as e:
            self.obs.failed += 1
            if len(self.obs.errors) < 5:
                self.obs.errors.append(f"{type(e).__name__}: {e}")
        finally:
            gate.release()

    async def _monitor(self, client: httpx.AsyncClient) -> None:
        first = True
        while True:
            for url in self.settings.metrics_urls.values():
                try:
                    snap = parse_metrics((await client.get(url, timeout=5)).text)
                except (httpx.HTTPError, ProbeError):
                    continue
                if first:
                    self.obs.preemptions_at_start += snap.preemptions_total
                self.obs.max_kv_usage = max(self.obs.max_kv_usage, snap.kv_cache_usage)
                self.obs.max_waiting = max(self.obs.max_waiting, snap.waiting)
                self.obs.preemptions_max = max(self.obs.preemptions_max, snap.preemptions_total)
                if snap.kv_cache_usage >= KV_SATURATED and self.obs.saturated_at is None:
                    self.obs.saturated_at = time.time()
            first = False
            await asyncio.sleep(0.5)


@register
class FloodKvCache(TypedFault[FloodParams, StatusEnvironment]):
    """Fill vLLM's KV cache with long-context streaming requests."""

    name = NAME
    aliases = ("flood_kv_cache",)
    layer = Layer.VLLM
    params_type = FloodParams

    def __init__(self) -> None:
        self._threads: dict[str, _FloodThread] = {}

    def _open(self, env: object) -> StatusEnvironment:
        if not isinstance(env, StatusEnvironment):
            raise ConfigError(f"{self.name}: environment {env_name(env)!r} reports no status to find vLLM in")
        return env

    def settings(self, env: StatusEnvironment, params: FloodParams) -> tuple[VllmTarget, FloodSettings]:
        """Resolve the target and size the flood; touches nothing."""
        target = resolve_target(env, params.target)
        max_len = served_max_model_len(target.url, target.model)
        capacity = 0
        for url in target.metrics_urls.values():
            try:
                capacity += _read_snapshot(url).kv_capacity_tokens or 0
            except (httpx.HTTPError, ProbeError) as e:
                raise FaultError(f"{self.name}: could not read KV capacity from {url}: {e}") from e
        if capacity <= 0:
            raise FaultError(
                f"{self.name}: the replicas do not report their KV capacity (vllm:cache_config_info)"
            )
        prompt_tokens = int(max_len * params.prompt_fraction)
        sample = _prompt(200, 0)
        tokens_per_word = _count_tokens(target.url, target.model, sample) / 200
        words = max(1, int(prompt_tokens / tokens_per_word * 0.95))
        # Room for tokenization to vary between prompts, so none exceeds the context limit.
        max_tokens = max(16, max_len - int(prompt_tokens * 1.1) - 16)
        concurrency = params.concurrency
        if concurrency is None:
            # Enough prompts to overfill every replica's cache at prefill, plus ``overfill`` queued ones.
            per_replica = math.ceil(capacity / len(target.metrics_urls) / prompt_tokens) + params.overfill
            concurrency = per_replica * len(target.metrics_urls)
        params.check_concurrency(concurrency)
        return target, FloodSettings(
            url=target.url,
            model=target.model,
            metrics_urls=target.metrics_urls,
            max_model_len=max_len,
            prompt_tokens=prompt_tokens,
            max_tokens=max_tokens,
            words_per_prompt=words,
            concurrency=concurrency,
            rate_per_s=params.rate_per_s,
            duration_s=params.duration_s,
            kv_capacity_tokens=capacity,
        )

    def _plan(self, env: StatusEnvironment, params: FloodParams) -> Planned:
        target, s = self.settings(env, params)
        description = (
            f"keep {s.concurrency} streaming completions of ~{s.prompt_tokens} prompt tokens and "
            f"{s.max_tokens} output tokens (ignore_eos) open against {target.name} ({s.url}); "
            f"KV capacity {s.kv_capacity_tokens} tokens; revert closes every connection"
        )
        state: JsonObject = {"settings": asdict(s), "target": target.name}
        recorded = {**asdict(params), "concurrency": s.concurrency}
        return Planned(description, [f"vllm:{name}" for name in s.metrics_urls], state, recorded)

    def _act(self, env: StatusEnvironment, params: FloodParams, handle: FaultHandle, ledger: Ledger) -> None:
        s = FloodSettings(**handle.state["settings"])
        baseline = [stream_completion(s.url, s.model, "ping", max_tokens=4, timeout_s=30) for _ in range(3)]
        handle.state["probe_ttft_before_s"] = _median([r.ttft_s for r in baseline if r.ok])
        ledger.record(handle)
        thread = _FloodThread(s, handle.id)
        handle.injected_at = time.time()
        thread.start()
        self._threads[handle.id] = thread
        deadline = time.monotonic() + params.saturate_timeout_s
        while time.monotonic() < deadline and thread.obs.saturated_at is None and thread.is_alive():
            time.sleep(0.2)
        during = [stream_completion(s.url, s.model, "ping", max_tokens=4, timeout_s=60) for _ in range(3)]
        handle.state["probe_ttft_during_s"] = _median([r.ttft_s for r in during if r.ok])
        handle.state["observations"] = asdict(thread.obs)

    def _undo(self, env: StatusEnvironment, params: FloodParams, handle: FaultHandle, ledger: Ledger) -> None:
        thread = self._threads.pop(handle.id, None)
        if thread is not None:
            thread.stop()
            handle.reverted_at = time.time()
            handle.state["observations"] = asdict(thread.obs)
            urls = list(handle.state["settings"]["metrics_urls"].values())
            handle.state["drained_at"] = _wait_drained(urls, timeout_s=30.0)
            ledger.record(handle)
        # A flood from a process that died ended with it: its connections closed with the process.

    def _evidence(self, env: StatusEnvironment, params: FloodParams, handle: FaultHandle) -> Evidence:
        thread = self._threads.get(handle.id)
        obs = asdict(thread.obs) if thread is not None else handle.state.get("observations", {})
        preempted = obs.get("preemptions_max", 0) - obs.get("preemptions_at_start", 0)
        saturated = obs.get("max_kv_usage", 0.0) >= KV_SATURATED
        queued = obs.get("max_waiting", 0) > 0 or preempted > 0
        before, during = handle.state.get("probe_ttft_before_s"), handle.state.get("probe_ttft_during_s")
        bit = saturated and queued
        injected = handle.injected_at or 0.0
        timestamps = set_times(
            {
                "injected_at": handle.injected_at,
                "kv_saturated_at": obs.get("saturated_at"),
                "reverted_at": handle.reverted_at,
                "queue_drained_at": handle.state.get("drained_at"),
            }
        )
        symptoms = {
            "target": handle.state["target"],
            "concurrency": handle.state["settings"]["concurrency"],
            "prompt_tokens": handle.state["settings"]["prompt_tokens"],
            "max_kv_cache_usage": round(obs.get("max_kv_usage", 0.0), 3),
            "saturated_after_s": round(obs["saturated_at"] - injected, 2)
            if obs.get("saturated_at")
            else None,
            "max_waiting": obs.get("max_waiting", 0),
            "preemptions": preempted,
            "probe_ttft_before_s": before,
            "probe_ttft_during_s": during,
            "flood_requests_sent": obs.get("sent", 0),
            "flood_requests_failed": obs.get("failed", 0),
            "flood_errors": obs.get("errors", []),
        }
        if handle.state.get("drained_at") and handle.reverted_at:
            symptoms["queue_drained_after_s"] = round(handle.state["drained_at"] - handle.reverted_at, 2)
        reason = (
            f"KV cache reached {obs.get('max_kv_usage', 0):.2f}, {obs.get('max_waiting', 0):g} requests waited, "
            f"{preempted:g} preemptions"
            if bit
            else f"KV cache peaked at {obs.get('max_kv_usage', 0):.2f} with no queue or preemption"
        )
        return Evidence(bit=bit, reason=reason, symptoms=symptoms, timestamps=timestamps)


def _median(values: list[float | None]) -> float | None:
    present = sorted(v for v in values if v is not None)
    return present[len(present) // 2] if present else None


def _wait_drained(metrics_urls: list[str], timeout_s: float) -> float | None:
    """The time every target shows no running or waiting request, or None."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            snaps = [_read_snapshot(url) for url in metrics_urls]
        except (httpx.HTTPError, ProbeError):
            snaps = []
        if snaps and all(s.running == 0 and s.waiting == 0 for s in snaps):
            return time.time()
        time.sleep(0.25)
    return None
