"""One sampling tick of the vLLM probes at 2 to 1,000 replicas: direct scraping beside Prometheus.

Prints, measured side by side in one run, the median and max time of one tick of every
replica's vLLM probe (what the sampler does once per interval):
- direct: each replica's ``/metrics`` fetched and parsed (steady_state/vllm.py);
- through Prometheus: the fixed set of PromQL queries of steady_state/prometheus_vllm.py, sent
  to a real Prometheus (the distribution's) that scrapes the same replicas.

The replicas are stand-ins: one threaded HTTP server publishing a recorded vLLM ``/metrics``
(tests/fixtures/metrics/vllm_flooded.txt, about 600 series) on ``/r/<n>/metrics`` and an empty
200 on ``/r/<n>/health``, each path a target of its own for Prometheus (``__metrics_path__``).
Prometheus scrapes every ``--scrape-interval`` seconds (5 by default: what is measured is the
query side, and 1,000 targets each second would measure the scraping of a 2-core machine).

Target: through Prometheus a tick stays <= 250 ms at 1,000 replicas, and does not grow with the
replica count.

Run: .venv/bin/python bench/probe_scale.py [--counts 2,50,200,1000] [--ticks 5]
Needs `prometheus` on PATH (apt-get install prometheus); starts and ends everything itself.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import signal
import statistics
import sys
import tempfile
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

from inferchaos.environments.local.prometheus_server import (
    HEALTH_JOB,
    VLLM_JOB,
    Target,
    start_prometheus,
    write_targets,
)
from inferchaos.faults.base import wait_until
from inferchaos.primitives.processes import free_port
from inferchaos.steady_state.prometheus_vllm import (
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


def _stand_in(text: bytes) -> tuple[multiprocessing.Process, int]:
    """The stand-in replicas in a process of their own, so their serving is not this process's cost."""
    port = free_port()
    server = multiprocessing.get_context("fork").Process(target=_serve, args=(text, port), daemon=True)
    server.start()
    if wait_until(lambda: _answers(port), 10.0) is None:
        raise SystemExit("the stand-in replicas did not start")
    return server, port


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


def _scraped(url: str) -> int:
    """How many stand-ins Prometheus scraped successfully last time."""
    query = f'count(up{{job="{VLLM_JOB}"}} == 1)'
    try:
        answer = httpx.get(f"{url}/api/v1/query", params={"query": query}, timeout=10.0).json()
    except httpx.HTTPError:
        return 0  # busy ingesting: ask again
    result = answer.get("data", {}).get("result", [])
    return int(float(result[0]["value"][1])) if result else 0


def _wait_scraped(url: str, count: int, budget_s: float) -> None:
    """Wait until every stand-in was scraped, saying how many are every 10 s."""
    deadline = time.monotonic() + budget_s
    said = 0.0
    while (up := _scraped(url)) < count:
        if time.monotonic() > deadline:
            raise SystemExit(f"Prometheus scraped {up} of {count} stand-ins within {budget_s:.0f} s")
        if time.monotonic() - said >= 10.0:
            print(f"  waiting for Prometheus to scrape {count} stand-ins: {up} up", flush=True)
            said = time.monotonic()
        time.sleep(1.0)


async def _tick_ms(probes: list[VllmProbe] | list[PrometheusVllmProbe]) -> float:
    started = time.perf_counter()
    await asyncio.gather(*(p.read() for p in probes))
    return (time.perf_counter() - started) * 1000.0


async def _measure(port: int, prom_url: str, count: int, ticks: int) -> tuple[list[float], list[float]]:
    names = [f"replica-{n}" for n in range(count)]
    limits = httpx.Limits(max_connections=100, max_keepalive_connections=100)
    async with httpx.AsyncClient(timeout=120.0, limits=limits) as client:
        direct = [
            VllmProbe(name, f"http://127.0.0.1:{port}/r/{n}/metrics", f"http://127.0.0.1:{port}/r/{n}/health", client=client, timeout_s=120.0)
            for n, name in enumerate(names)
        ]  # fmt: skip
        selector = PromVllmSelector(
            replica_label="replica",
            matchers=f'job="{VLLM_JOB}"',
            health_matchers=f'job="{HEALTH_JOB}"',
            window_s=30.0,
        )
        source = PrometheusVllmSource(prom_url, selector, client=client, timeout_s=120.0)
        through = [PrometheusVllmProbe(name, source) for name in names]
        direct_ms, through_ms = [], []
        for _ in range(ticks):
            direct_ms.append(await _tick_ms(direct))
            await asyncio.sleep(source.max_age_s)  # a new round of queries, as the next tick would send
            through_ms.append(await _tick_ms(through))
            await asyncio.sleep(source.max_age_s)
        return direct_ms, through_ms


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--counts", default="2,50,200,1000", help="replica counts, comma-separated")
    parser.add_argument("--ticks", type=int, default=5, help="ticks measured per count and method")
    parser.add_argument("--scrape-interval", type=float, default=5.0, help="Prometheus' scrape interval, s")
    args = parser.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    # A `timeout` or Ctrl-C must still end the Prometheus and the stand-ins this bench started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    server, port = _stand_in(RECORDED.read_bytes())
    with tempfile.TemporaryDirectory(prefix="ic-probe-scale-") as scratch:
        folder = Path(scratch)
        record = start_prometheus(
            free_port(),
            folder / "prometheus",
            dict(os.environ),
            folder / "logs",
            interval_s=args.scrape_interval,
        )
        try:
            print(f"{'replicas':>8}  {'direct median':>13}  {'direct max':>10}  {'prometheus median':>17}  "
                  f"{'prometheus max':>14}  {'direct / prometheus':>19}")  # fmt: skip
            for count in counts:
                targets_dir = Path(record.targets_dir)
                write_targets(targets_dir, VLLM_JOB, _targets(port, count, "metrics"))
                write_targets(targets_dir, HEALTH_JOB, _targets(port, count, "health"))
                budget = 30.0 + 3 * args.scrape_interval + count * 0.05
                _wait_scraped(record.url, count, budget)
                direct_ms, through_ms = asyncio.run(_measure(port, record.url, count, args.ticks))
                d, t = statistics.median(direct_ms), statistics.median(through_ms)
                print(f"{count:>8}  {d:>10.1f} ms  {max(direct_ms):>7.1f} ms  {t:>14.1f} ms  "
                      f"{max(through_ms):>11.1f} ms  {d / t:>18.1f}x", flush=True)  # fmt: skip
        finally:
            os.killpg(record.pid, signal.SIGTERM)
            os.waitpid(record.pid, 0)  # started by this process: reap it
            server.terminate()
            server.join(timeout=10)
    print("target: through Prometheus <= 250 ms at 1,000 replicas, flat in the replica count")


if __name__ == "__main__":
    main()
