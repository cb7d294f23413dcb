"""One sampling tick of the vLLM probes at 2 to 1,000 replicas: direct scraping beside Prometheus.

Prints, measured side by side in one run, the median and max time of one tick of every
replica's vLLM probe (what the sampler does once per interval):
- direct: each replica's ``/metrics`` fetched and parsed (steady_state/vllm.py);
- through Prometheus: the fixed set of PromQL queries of steady_state/prometheus_vllm.py, sent
  to a real Prometheus (the distribution's) that scrapes the same replicas, configured as the
  local environment's (environments/local/prometheus_server.py): the latency quantiles and the
  preemption rate read from its recording rules, and only the series the probes read kept at
  ingestion;
- computed: the same Prometheus asked to compute those quantiles at each tick
  (``histogram_quantile`` over ``rate`` of every bucket series), as a Prometheus without the
  rules is asked; the curve the rules replace;
- focused: through the same Prometheus, the tick of a fleet read in focus (``Focus``: what the
  runs do above ``EVERY_REPLICA_UP_TO`` replicas): two replicas named by SLOs read each, and of
  every other replica the ``OUTLIERS`` highest and lowest of each reading, as the outlier rules
  (``topk``/``bottomk``, evaluated by Prometheus once per interval) keep them.

The replicas are stand-ins: one threaded HTTP server publishing a recorded vLLM ``/metrics``
(tests/fixtures/metrics/vllm_flooded.txt, about 600 series) on ``/r/<n>/metrics`` and an empty
200 on ``/r/<n>/health``, each path a target of its own for Prometheus (``__metrics_path__``).
Prometheus scrapes every ``--scrape-interval`` seconds (5 by default: what is measured is the
query side, and 1,000 targets each second would measure the scraping of a 2-core machine).
``--published kept`` has the stand-ins publish only the series the probes read (what the keep-list
keeps, as an exporter filtered at the source would): on 2 cores, 1,000 stand-ins of the whole
text keep Prometheus busy parsing 600,000 lines per scrape, and its answers then measure that.

``--backfill`` measures the query side alone, for replica counts a 2-core machine cannot have
Prometheus scrape (at 1,000 stand-ins its rule group alone took 6.4-6.6 s at 190 % CPU): the
series Prometheus holds for one scraped and recorded stand-in (``up``, the health job's ``up``,
the kept series, the recorded quantiles) are copied for every replica, relabelled, into an
OpenMetrics file that ``promtool tsdb create-blocks-from openmetrics`` writes into the TSDB of a
second Prometheus that scrapes nothing; the tick's queries then read what a cluster's Prometheus
(on machines of its own) would answer for that many replicas. The recorded quantiles carry a
finite value (a static stand-in's windows hold no observations, NaN), so each one becomes a
sample as in a flood. The computed curve needs every bucket series over time and is not
measured there ("-"); direct scraping still reads the live stand-ins.

Target: through Prometheus a tick stays <= 250 ms at 1,000 replicas, and does not grow with the
replica count (the focused curve; reading every replica, a tick's answer grows with the fleet). Before a count is measured, every stand-in is scraped and the rules have
recorded it (backfilled: Prometheus answers for every replica).

Run: .venv/bin/python bench/probe_scale.py [--counts 2,50,200,1000] [--ticks 5] [--backfill]
Needs `prometheus` (and for --backfill `promtool`) on PATH (apt-get install prometheus); starts
and ends everything itself.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import math
import multiprocessing
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

from inferchaos.environments.local.prometheus_server import (
    HEALTH_JOB,
    VLLM_JOB,
    Target,
    start_prometheus,
    vllm_selector,
    write_targets,
)
from inferchaos.faults.base import wait_until
from inferchaos.primitives.processes import free_port
from inferchaos.primitives.prometheus_api import PromSeries, vector_of
from inferchaos.primitives.vllm_promql import CACHE_CONFIG, KEPT_METRICS, OUTLIERS, SERIES_PROBES, Focus
from inferchaos.steady_state.probe_base import Probe
from inferchaos.steady_state.prometheus_vllm import (
    EVERY_REPLICA_UP_TO,
    PrometheusVllmOutliersProbe,
    PrometheusVllmProbe,
    PrometheusVllmSource,
    PromVllmSelector,
)
from inferchaos.steady_state.vllm import VllmProbe

RECORDED = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "metrics" / "vllm_flooded.txt"


class _Server(ThreadingHTTPServer):
    # A thousand scrapes can arrive at once: with the default backlog of 5, Linux drops the
    # handshake's last ACK and the client waits on a connection the server never accepted.
    request_queue_size = 4096
    daemon_threads = True


def _serve(text: bytes, port: int) -> None:
    class Replica(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as vLLM's server

        def do_GET(self) -> None:
            body = text if self.path.endswith("/metrics") else b""
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return

    _Server(("127.0.0.1", port), Replica).serve_forever()


def _stand_in(text: bytes) -> tuple[multiprocessing.process.BaseProcess, int]:
    """The stand-in replicas in a process of their own, so their serving is not this process's cost."""
    port = free_port()
    server = multiprocessing.get_context("fork").Process(target=_serve, args=(text, port), daemon=True)
    server.start()
    if wait_until(lambda: _answers(port), 10.0) is None:
        raise SystemExit("the stand-in replicas did not start")
    return server, port


def _kept(text: bytes) -> bytes:
    """``text`` with only the samples of :data:`KEPT_METRICS`, as a filtered exporter publishes it."""
    kept = set(KEPT_METRICS)
    lines = [
        line
        for line in text.decode().splitlines()
        if line and not line.startswith("#") and re.split(r"[{ ]", line, maxsplit=1)[0] in kept
    ]
    return ("\n".join(lines) + "\n").encode()


def _answers(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/r/0/health", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def _targets(port: int, count: int, path: str) -> list[Target]:
    return [
        Target(f"127.0.0.1:{port}", {"replica": f"replica-{n}", "__metrics_path__": f"/r/{n}/{path}"})
        for n in range(count)
    ]


def _count(url: str, query: str) -> int:
    """The value of a ``count(...)`` query; 0 while Prometheus is too busy to answer."""
    try:
        answer = httpx.get(f"{url}/api/v1/query", params={"query": query}, timeout=10.0).json()
    except httpx.HTTPError:
        return 0  # busy ingesting: ask again
    result = answer.get("data", {}).get("result", [])
    return int(float(result[0]["value"][1])) if result else 0


def _wait_scraped(url: str, count: int, budget_s: float, selector: PromVllmSelector) -> None:
    """Wait until every stand-in was scraped and recorded, saying how far it is every 10 s."""
    scraped = f'count(up{{job="{VLLM_JOB}"}} == 1)'
    # The last quantile rule: a replica it recorded, every quantile rule recorded too.
    recorded = f"count({selector.recording_rules()[-1].record})"
    # The group's last rule, which ranks that one's series: the focused tick reads it.
    ranked = f"count({selector.outlier_rules()[-1].record})"
    deadline = time.monotonic() + budget_s
    said = 0.0
    while True:
        up, done = _count(url, scraped), _count(url, recorded)
        if up >= count and done >= count and _count(url, ranked) >= min(count, OUTLIERS):
            return
        if time.monotonic() > deadline:
            raise SystemExit(
                f"Prometheus scraped {up} and recorded {done} of {count} stand-ins within {budget_s:.0f} s"
            )
        if time.monotonic() - said >= 10.0:
            print(
                f"  waiting for Prometheus to scrape and record {count} stand-ins: {up} up, {done} recorded",
                flush=True,
            )
            said = time.monotonic()
        time.sleep(1.0)


# What a tick reading the recorded quantiles selects of one replica (see PromVllmSelector.queries).
_TICK_NAMES = {"up", CACHE_CONFIG, *SERIES_PROBES}
# The value a backfilled quantile holds: a static stand-in's windows have no observations (NaN),
# which the probe leaves out; a flooded replica's have one, and each becomes a sample.
_BACKFILLED_QUANTILE_S = 0.25


def _template(url: str, selector: PromVllmSelector) -> list[PromSeries]:
    """Every series a recorded-quantile tick reads of ``replica-0``, as the live Prometheus holds
    it: the outlier rules' too, which with one replica rank it alone."""
    names = _TICK_NAMES | {r.record for r in (*selector.recording_rules(), *selector.outlier_rules())}
    query = '{replica="replica-0"}'
    answer = httpx.get(f"{url}/api/v1/query", params={"query": query}, timeout=30.0).json()
    series = [s for s in vector_of(answer, query) if s.labels.get("__name__") in names]
    jobs = {s.labels.get("job") for s in series if s.labels.get("__name__") == "up"}
    if len(jobs) < 2:
        raise SystemExit(f"the live Prometheus holds no up of both jobs for replica-0 (jobs {jobs})")
    return series


def _label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _write_openmetrics(
    path: Path, template: list[PromSeries], count: int, times: list[float], ranked: set[str]
) -> int:
    """``template``'s series for replicas 0..count-1 at ``times``, as OpenMetrics; the line count.
    Those of the ``ranked`` names (the outlier rules') for the first :data:`OUTLIERS` replicas
    alone, as those rules keep them among replicas whose values are all alike.

    A family's samples stay together and each series' timestamps rise, as promtool requires.
    """
    families: dict[str, list[PromSeries]] = {}
    for s in template:
        families.setdefault(s.labels["__name__"], []).append(s)
    lines = 0
    with path.open("w") as out:
        for name, members in families.items():
            out.write(f"# TYPE {name} unknown\n")
            for n in range(min(count, OUTLIERS) if name in ranked else count):
                for s in members:
                    labels = {k: v for k, v in s.labels.items() if k != "__name__"}
                    labels["replica"] = f"replica-{n}"
                    text = ",".join(f'{k}="{_label_value(v)}"' for k, v in sorted(labels.items()))
                    value = s.value if math.isfinite(s.value) else _BACKFILLED_QUANTILE_S
                    out.writelines(f"{name}{{{text}}} {value!r} {t:.3f}\n" for t in times)
                    lines += len(times)
        out.write("# EOF\n")
    return lines


def _backfilled_prometheus(
    folder: Path, template: list[PromSeries], count: int, interval_s: float, selector: PromVllmSelector
) -> tuple[str, int]:
    """A Prometheus that scrapes nothing and holds ``template`` for ``count`` replicas, from four
    minutes ago to twenty minutes on (a sample each 30 s, within its 5-minute lookback); its
    URL and pid.

    Its rules cannot record: the head refuses samples older than the newest block, which ends
    twenty minutes on. The outlier rules' series are therefore backfilled too."""
    promtool = shutil.which("promtool")
    if promtool is None:
        raise SystemExit("--backfill needs promtool (apt-get install prometheus)")
    folder.mkdir()
    now = time.time()
    times = [now - 240.0 + 30.0 * k for k in range(49)]
    source = folder / "series.om"
    started = time.monotonic()
    ranked = {r.record for r in selector.outlier_rules()}
    lines = _write_openmetrics(source, template, count, times, ranked)
    subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", "--quiet", str(source), str(folder / "data")],
        check=True,
    )
    source.unlink()
    print(
        f"  backfilled {count} replicas ({lines:,} samples) in {time.monotonic() - started:.1f} s", flush=True
    )
    record = start_prometheus(
        free_port(), folder, dict(os.environ), folder / "logs", timeout_s=120.0, interval_s=interval_s
    )
    return record.url, record.pid


def _end(pid: int) -> None:
    os.killpg(pid, signal.SIGTERM)
    os.waitpid(pid, 0)  # started by this process: reap it


async def _tick_ms(probes: Sequence[Probe]) -> float:
    # The garbage of the method measured before (a direct tick parses every replica's text)
    # is not this one's to collect: in a run, only one of them reads.
    gc.collect()
    started = time.perf_counter()
    await asyncio.gather(*(p.read() for p in probes))
    return (time.perf_counter() - started) * 1000.0


@dataclass
class Ticks:
    """The ticks measured at one replica count, in ms, by method."""

    direct: list[float] = field(default_factory=list)
    through: list[float] = field(default_factory=list)
    computed: list[float] = field(default_factory=list)
    focused: list[float] = field(default_factory=list)


# The replicas a focused tick reads each, as an experiment's SLOs name one or two.
_NAMED = frozenset({"replica-0", "replica-1"})


async def _measure(
    port: int, prom_url: str, count: int, ticks: int, selector: PromVllmSelector, computed_too: bool
) -> Ticks:
    names = [f"replica-{n}" for n in range(count)]
    limits = httpx.Limits(max_connections=100, max_keepalive_connections=100)
    async with httpx.AsyncClient(timeout=120.0, limits=limits) as client:
        direct = [
            VllmProbe(
                name,
                f"http://127.0.0.1:{port}/r/{n}/metrics",
                f"http://127.0.0.1:{port}/r/{n}/health",
                client=client,
                timeout_s=120.0,
            )
            for n, name in enumerate(names)
        ]
        # Each mode said outright: a source left to ask Prometheus' rules API would time that
        # request too, once.
        source = PrometheusVllmSource(
            prom_url, replace(selector, recorded=True), client=client, timeout_s=120.0
        )
        computing = PrometheusVllmSource(
            prom_url, replace(selector, recorded=False), client=client, timeout_s=120.0
        )
        named = _NAMED & set(names)
        focusing = PrometheusVllmSource(
            prom_url,
            replace(selector, recorded=True),
            client=client,
            timeout_s=120.0,
            focus=Focus(named),
        )
        focused: list[Probe] = [PrometheusVllmProbe(name, focusing) for name in sorted(named)]
        focused.append(PrometheusVllmOutliersProbe(focusing, named))
        through = [PrometheusVllmProbe(name, source) for name in names]
        computed = [PrometheusVllmProbe(name, computing) for name in names]
        measured = Ticks()
        # Each method's ticks together, Prometheus' first: a run reads one way only, and the
        # direct probes' connections and parsed pages, once read, would stay alive under the
        # other methods' ticks and lengthen every garbage collection they set off.
        for _ in range(ticks):
            await asyncio.sleep(source.max_age_s)  # a new round of queries, as the next tick would send
            measured.focused.append(await _tick_ms(focused))
        for _ in range(ticks):
            await asyncio.sleep(source.max_age_s)
            measured.through.append(await _tick_ms(through))
        for _ in range(ticks if computed_too else 0):
            await asyncio.sleep(source.max_age_s)
            measured.computed.append(await _tick_ms(computed))
        for _ in range(ticks):
            measured.direct.append(await _tick_ms(direct))
        return measured


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--counts", default="2,50,200,1000", help="replica counts, comma-separated")
    parser.add_argument("--ticks", type=int, default=5, help="ticks measured per count and method")
    parser.add_argument("--scrape-interval", type=float, default=5.0, help="Prometheus' scrape interval, s")
    parser.add_argument(
        "--published",
        choices=("full", "kept"),
        default="full",
        help="what each stand-in publishes: the whole recorded text, or only the series the probes read",
    )
    parser.add_argument(
        "--backfill",
        action="store_true",
        help="query a Prometheus whose TSDB promtool filled with every replica's series, "
        "instead of one scraping every stand-in (the query side alone)",
    )
    args = parser.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    # A `timeout` or Ctrl-C must still end the Prometheus and the stand-ins this bench started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    text = RECORDED.read_bytes()
    server, port = _stand_in(text if args.published == "full" else _kept(text))
    with tempfile.TemporaryDirectory(prefix="ic-probe-scale-") as scratch:
        folder = Path(scratch)
        # What the Prometheus below records: its rules' window is five of its scrape intervals.
        selector = vllm_selector(args.scrape_interval)
        record = start_prometheus(
            free_port(),
            folder / "prometheus",
            dict(os.environ),
            folder / "logs",
            interval_s=args.scrape_interval,
        )
        try:
            targets_dir = Path(record.targets_dir)
            template: list[PromSeries] = []
            if args.backfill:
                # One stand-in scraped and recorded gives the series every backfilled replica copies.
                write_targets(targets_dir, VLLM_JOB, _targets(port, 1, "metrics"))
                write_targets(targets_dir, HEALTH_JOB, _targets(port, 1, "health"))
                _wait_scraped(record.url, 1, 30.0 + 3 * args.scrape_interval, selector)
                template = _template(record.url, selector)
                print(
                    f"backfilled replicas copy the {len(template)} series a tick reads of one scraped "
                    "stand-in; computed quantiles not measured",
                    flush=True,
                )
            print(
                f"{'replicas':>8}  {'direct median':>13}  {'direct max':>10}  {'prometheus median':>17}  "
                f"{'prometheus max':>14}  {'direct / prometheus':>19}  {'computed median':>15}  "
                f"{'computed max':>12}  {'focused median':>14}  {'focused max':>11}"
            )
            for count in counts:
                if args.backfill:
                    prom_url, prom_pid = _backfilled_prometheus(
                        folder / f"backfill-{count}", template, count, args.scrape_interval, selector
                    )
                else:
                    write_targets(targets_dir, VLLM_JOB, _targets(port, count, "metrics"))
                    write_targets(targets_dir, HEALTH_JOB, _targets(port, count, "health"))
                    prom_url, prom_pid = record.url, 0
                try:
                    # Within the try: a Prometheus that never holds every replica is ended too.
                    budget = 60.0 if args.backfill else 30.0 + 3 * args.scrape_interval + count * 0.05
                    _wait_scraped(prom_url, count, budget, selector)
                    measured = asyncio.run(
                        _measure(port, prom_url, count, args.ticks, selector, computed_too=not args.backfill)
                    )
                finally:
                    if prom_pid:
                        _end(prom_pid)
                d, t = statistics.median(measured.direct), statistics.median(measured.through)
                computed = (
                    f"{statistics.median(measured.computed):>12.1f} ms  {max(measured.computed):>9.1f} ms"
                    if measured.computed
                    else f"{'-':>15}  {'-':>12}"
                )
                f = statistics.median(measured.focused)
                print(
                    f"{count:>8}  {d:>10.1f} ms  {max(measured.direct):>7.1f} ms  {t:>14.1f} ms  "
                    f"{max(measured.through):>11.1f} ms  {d / t:>18.1f}x  {computed}  "
                    f"{f:>11.1f} ms  {max(measured.focused):>8.1f} ms",
                    flush=True,
                )
        finally:
            _end(record.pid)
            server.terminate()
            server.join(timeout=10)
    print(
        "target: through Prometheus <= 250 ms at 1,000 replicas, flat in the replica count "
        f"(focused: above {EVERY_REPLICA_UP_TO} replicas a run reads in focus)"
    )


if __name__ == "__main__":
    main()
