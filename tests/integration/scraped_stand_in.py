"""A real Prometheus scraping a stand-in exporter: a plain HTTP server on 127.0.0.1 whose pages
are fixed exposition texts, for the PromQL probes' contract tests that need no Ray or vLLM.

Both run as process groups of their own, started by :func:`prometheus_scraping` and ended by
their leaders' pids when it exits.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import yaml

from inferchaos.environments.local.prometheus_server import (
    PROMETHEUS_HOST,
    prometheus_argv,
    prometheus_path,
    wait_ready,
)
from inferchaos.faults.base import wait_until
from inferchaos.primitives import http
from inferchaos.primitives.processes import free_port, spawn_server
from inferchaos.primitives.vllm_metrics import HISTOGRAMS
from tests.skips import needs_package

# The contract tests against a real Prometheus skip, saying why, where the distribution's is missing
# (a failure under INFERCHAOS_STRICT_SKIPS unless .ci/run could not install it: tests/skips.py).
needs_prometheus = needs_package("prometheus", shutil.which("prometheus"), "the distribution's prometheus")
# Exporters answer with the text format's content type (Prometheus 3 refuses a scrape without a
# known one unless told a fallback).
STAND_IN = """\
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

port, *pages = sys.argv[1:]
bodies = {path: Path(file).read_bytes() for path, file in (page.split("=", 1) for page in pages)}


class Exposition(BaseHTTPRequestHandler):
    def do_GET(self):
        body = bodies.get(self.path)
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format, *args):
        pass


ThreadingHTTPServer(("127.0.0.1", int(port)), Exposition).serve_forever()
"""


# The families the vLLM series probes read, as vLLM's V1 engine writes them: one series per engine.
VLLM_FAMILIES = {
    "vllm:num_requests_running": "gauge",
    "vllm:num_requests_waiting": "gauge",
    "vllm:kv_cache_usage_perc": "gauge",
    "vllm:num_preemptions_total": "counter",
    "vllm:prompt_tokens_total": "counter",
    "vllm:generation_tokens_total": "counter",
}


def vllm_page(engines: Mapping[str, tuple[float, ...]]) -> str:
    """A replica's ``/metrics``: per engine, the values of :data:`VLLM_FAMILIES` in their order,
    and the latency histograms direct scraping requires of a vLLM v1 replica (one bucket)."""
    lines = []
    for column, (family, kind) in enumerate(VLLM_FAMILIES.items()):
        lines += [f"# HELP {family} {family}.", f"# TYPE {family} {kind}"]
        for engine, values in engines.items():
            labels = f'engine="{engine}",model_name="tiny-llama"'
            lines.append(f"{family}{{{labels}}} {float(values[column])}")
    for histogram in HISTOGRAMS.values():
        lines += [f"# HELP {histogram} {histogram}.", f"# TYPE {histogram} histogram"]
        for engine in engines:
            for le in ("1.0", "+Inf"):
                lines.append(f'{histogram}_bucket{{engine="{engine}",le="{le}"}} 2.0')
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Job:
    """A scrape job of one stand-in page, each second: ``labels`` are its target's (on ``up``
    too); with ``honor_labels`` the page's own labels win over them."""

    path: str
    honor_labels: bool = False
    labels: Mapping[str, str] = field(default_factory=dict)

    def config(self, name: str, stand_in: str) -> dict[str, object]:
        """The job's entry of ``scrape_configs``, scraping ``stand_in`` (host:port)."""
        return {
            "job_name": name,
            "metrics_path": self.path,
            "scrape_interval": "1s",
            "scrape_timeout": "800ms",
            "honor_labels": self.honor_labels,
            "static_configs": [{"targets": [stand_in], "labels": dict(self.labels)}],
        }


def query(url: str, promql: str) -> list[dict[str, object]]:
    """The result of an instant query, as Prometheus' API answers it."""
    answer = httpx.get(f"{url}/api/v1/query", params={"query": promql}, timeout=5.0).json()
    result: list[dict[str, object]] = answer["data"]["result"]
    return result


@dataclass(frozen=True)
class Scraping:
    """Prometheus at ``url`` scraping the stand-in at ``stand_in`` (both ``http://host:port``)."""

    url: str
    stand_in: str


@contextmanager
def prometheus_scraping(
    folder: Path, pages: Mapping[str, str], jobs: Mapping[str, Job], rules: str = ""
) -> Iterator[Scraping]:
    """Serve ``pages`` (path -> exposition text) and have a real Prometheus scrape them each
    second; yields both once Prometheus is ready (the caller waits for the series it needs).

    ``jobs`` are the scrape jobs, by name; ``rules`` a rules file it evaluates each second.
    """
    folder.mkdir(parents=True, exist_ok=True)
    served = []
    for n, (path, text) in enumerate(pages.items()):
        (folder / f"page{n}.txt").write_text(text)
        served.append(f"{path}={folder / f'page{n}.txt'}")
    (folder / "stand_in.py").write_text(STAND_IN)
    port = free_port()
    stand_in, _ = spawn_server(
        [sys.executable, str(folder / "stand_in.py"), str(port), *served],
        dict(os.environ),
        folder / "logs" / "stand_in.log",
    )
    prometheus: int | None = None
    try:
        answered = wait_until(lambda: _answers(f"http://127.0.0.1:{port}{next(iter(pages))}"), 10.0)
        assert answered is not None, (folder / "logs" / "stand_in.log").read_text()
        config: dict[str, object] = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [job.config(name, f"127.0.0.1:{port}") for name, job in jobs.items()],
        }
        if rules:
            (folder / "rules.yml").write_text(rules)
            config["rule_files"] = [str(folder / "rules.yml")]
        (folder / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
        prometheus_port = free_port()
        argv = prometheus_argv(prometheus_path(), folder / "prometheus.yml", folder / "data", prometheus_port)
        prometheus, _ = spawn_server(argv, dict(os.environ), folder / "logs" / "prometheus.log")
        url = f"http://{PROMETHEUS_HOST}:{prometheus_port}"
        assert wait_ready(url, 30.0, prometheus), (folder / "logs" / "prometheus.log").read_text()[-2000:]
        yield Scraping(url, f"http://127.0.0.1:{port}")
    finally:
        if prometheus is not None:
            end_group(prometheus)
        end_group(stand_in)


def end_group(pid: int) -> None:
    """End a process group this test started, by its leader's pid, and reap the leader."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass  # it died already; it is still this process's child to reap
    if wait_until(lambda: os.waitpid(pid, os.WNOHANG)[0] == pid, 10.0) is None:
        os.killpg(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def _answers(url: str) -> bool:
    try:
        return http.get(url, timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False
