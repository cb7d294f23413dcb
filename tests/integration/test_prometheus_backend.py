"""The vLLM probes through a real Prometheus scraping the real replicas agree with direct scraping.

The session's environment runs without ``--prometheus``; this test starts the same Prometheus
that ``env up --prometheus`` starts (environments/local/prometheus_server.py), points it at the
environment's replicas and nodes, and ends it by its process group. Counters read through
Prometheus lie between two direct reads taken one scrape interval apart, under traffic.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from scraped_stand_in import needs_prometheus

from inferchaos.environments.local.env import LocalEnvironment
from inferchaos.environments.local.prometheus_server import (
    RAY_JOB,
    SCRAPE_INTERVAL_S,
    VLLM_JOB,
    PrometheusRecord,
    local_alert_labels,
    replica_targets,
    start_prometheus,
    write_targets,
)
from inferchaos.environments.local.ray_cluster import refresh_scrape_targets
from inferchaos.errors import ProbeError
from inferchaos.faults.base import wait_until
from inferchaos.primitives.env_status import ReplicaStatus
from inferchaos.primitives.openai_stream import stream_completion
from inferchaos.primitives.processes import free_port
from inferchaos.primitives.prometheus_api import recording_rule_names
from inferchaos.steady_state.probe_base import Sample
from inferchaos.steady_state.prometheus_alerts import PrometheusAlertsProbe
from inferchaos.steady_state.prometheus_ray import PrometheusRayProbe, PromRaySelector
from inferchaos.steady_state.prometheus_vllm import (
    PrometheusVllmProbe,
    PrometheusVllmSource,
    PromVllmSelector,
)
from inferchaos.steady_state.ray import RayProbe
from inferchaos.steady_state.vllm import VllmProbe
from tests.scripts import load_script

pytestmark = [pytest.mark.integration, needs_prometheus]


@pytest.fixture
def prometheus(local_env: LocalEnvironment, tmp_path: Path) -> Iterator[PrometheusRecord]:
    record = start_prometheus(free_port(), tmp_path / "prometheus", dict(os.environ), tmp_path / "logs")
    try:
        state = replace(
            local_env.load_state(), prometheus=record
        )  # not saved: the session's env stays as it is
        refresh_scrape_targets(state)
        yield record
    finally:
        # This process started it, so it is this process's child to end and reap.
        os.killpg(record.pid, signal.SIGTERM)
        if wait_until(lambda: os.waitpid(record.pid, os.WNOHANG)[0] == record.pid, 10.0) is None:
            os.killpg(record.pid, signal.SIGKILL)
            os.waitpid(record.pid, 0)


def _up(url: str, job: str) -> dict[str, float]:
    # A replica slot is listed at every worker's address and is up where any of them answers.
    query = f'max by (replica, node) (up{{job="{job}"}})'
    answer = httpx.get(f"{url}/api/v1/query", params={"query": query}, timeout=5.0).json()
    return {
        r["metric"].get("replica") or r["metric"].get("node", "?"): float(r["value"][1])
        for r in answer["data"]["result"]
    }


def _values(samples: list[Sample]) -> dict[str, float]:
    return {s.probe: s.value for s in samples}


def test_promql_probes_agree_with_direct_scraping_within_one_scrape_interval(
    local_env: LocalEnvironment, prometheus: PrometheusRecord
) -> None:
    status = local_env.status()
    replicas = sorted(status.vllm.replicas, key=lambda r: r.name)
    assert len(replicas) >= 2
    # A replica slot that nothing serves: its scrape fails, and its probe must say so.
    targets = {r.name: int(r.url.rsplit(":", 1)[1]) for r in replicas} | {"replica-9": free_port()}
    # Each slot at every address a replica serves on (the workers' own, in network namespaces).
    hosts = sorted({str(httpx.URL(r.url).host) for r in replicas})
    write_targets(Path(prometheus.targets_dir), VLLM_JOB, replica_targets(targets, hosts))
    every_up = wait_until(
        lambda: (
            all(_up(prometheus.url, VLLM_JOB).get(r.name) == 1.0 for r in replicas)
            and all(v == 1.0 for v in _up(prometheus.url, "ray").values())
            and len(_up(prometheus.url, "ray")) >= 3
        ),
        30.0,
        0.5,
    )
    assert every_up is not None, (
        f"targets never all up: {_up(prometheus.url, VLLM_JOB)} {_up(prometheus.url, 'ray')}"
    )
    assert _up(prometheus.url, VLLM_JOB)["replica-9"] == 0.0

    stop = threading.Event()

    def traffic() -> None:
        while not stop.is_set():
            stream_completion(status.front_door.url, status.model.name, "tell me about chaos", max_tokens=24)

    workers = [threading.Thread(target=traffic, daemon=True) for _ in range(2)]
    for w in workers:
        w.start()
    try:
        time.sleep(3.0)  # a few scrapes with requests finishing, for the rate windows
        asyncio.run(_compare(prometheus, replicas))
    finally:
        stop.set()
        for w in workers:
            w.join(timeout=60)
    # Serve's router splits two clients' requests evenly, so the replicas may have served the same
    # tokens: a few more to replica-0's own port set them apart. Two scrapes later, each replica's
    # counters through Prometheus are exactly its own, not its peer's.
    for _ in range(2):
        stream_completion(replicas[0].url, status.model.name, "only replica-0 hears this", max_tokens=8)
    # vLLM counts a request's tokens shortly after its stream ends (a scrape begun just after the
    # last request still missed its 9 tokens): wait for the scrape after the next one.
    settled = time.time() + SCRAPE_INTERVAL_S
    scraped = wait_until(lambda: _scraped_since(prometheus.url, settled, len(replicas)), 15.0, 0.25)
    assert scraped is not None, "Prometheus did not scrape every replica after the last request"
    asyncio.run(_settled(prometheus, replicas))


def _scraped_since(url: str, since: float, count: int) -> bool:
    """Whether each replica's latest scrape began after ``since`` (``timestamp(up)`` is its start)."""
    query = f'timestamp(up{{job="{VLLM_JOB}"}} == 1) > {since}'
    answer = httpx.get(f"{url}/api/v1/query", params={"query": query}, timeout=5.0).json()
    names = {r["metric"].get("replica") for r in answer["data"]["result"]}
    return len(names - {"replica-9"}) >= count


async def _read_alerts(url: str, metrics: tuple[str, ...]) -> list[Sample]:
    probe = PrometheusAlertsProbe(url, metrics=metrics)
    try:
        return await probe.read()
    finally:
        await probe.aclose()


async def _settled(prometheus: PrometheusRecord, replicas: list[ReplicaStatus]) -> None:
    source = PrometheusVllmSource(
        prometheus.url, PromVllmSelector(replica_label="replica", matchers=f'job="{VLLM_JOB}"')
    )
    direct = {r.name: VllmProbe(r.name, r.metrics_url, f"{r.url}/health") for r in replicas}
    try:
        tokens = {
            r.name: _values(await direct[r.name].read())["vllm.generation_tokens_total"] for r in replicas
        }
        assert len(set(tokens.values())) == len(tokens), f"the replicas' counters must differ: {tokens}"
        for r in replicas:
            mine = _values(await direct[r.name].read())
            through = _values(await PrometheusVllmProbe(r.name, source).read())
            print(
                f"{r.name} settled: direct {mine['vllm.generation_tokens_total']:g} tokens, "
                f"through prometheus {through['vllm.generation_tokens_total']:g}"
            )
            for counter in ("vllm.generation_tokens_total", "vllm.prompt_tokens_total"):
                assert through[counter] == mine[counter], (r.name, counter)
    finally:
        await source.aclose()
        for probe in direct.values():
            await probe.aclose()


async def _compare(prometheus: PrometheusRecord, replicas: list[ReplicaStatus]) -> None:
    selector = PromVllmSelector(
        replica_label="replica",
        matchers=f'job="{VLLM_JOB}"',
        health_matchers='job="vllm_health"',
        window_s=5.0,
    )
    # Unsaid, the source reads the quantiles this Prometheus records (its rules); the computing
    # one asks for them as of any Prometheus.
    source = PrometheusVllmSource(prometheus.url, selector)
    computing = PrometheusVllmSource(prometheus.url, replace(selector, recorded=False))
    names = [r.name for r in replicas]
    direct = {r.name: VllmProbe(r.name, r.metrics_url, f"{r.url}/health") for r in replicas}
    try:
        before = {n: _values(await direct[n].read()) for n in names}
        await asyncio.sleep(SCRAPE_INTERVAL_S * 1.5)
        through = {n: _values(await PrometheusVllmProbe(n, source).read()) for n in names}
        computed = {n: _values(await PrometheusVllmProbe(n, computing).read()) for n in names}
        after = {n: _values(await direct[n].read()) for n in names}
        print("direct before:", before, "\nthrough prometheus:", through, "\ndirect after:", after)
        for n in names:
            for counter in ("vllm.generation_tokens_total", "vllm.prompt_tokens_total"):
                assert before[n][counter] <= through[n][counter] <= after[n][counter], (n, counter)
            assert through[n]["vllm.kv_cache_capacity_tokens"] == after[n]["vllm.kv_cache_capacity_tokens"]
            assert through[n]["vllm.healthy"] == 1.0, "vLLM's empty 200 on /health is a successful scrape"
            assert 0.0 <= through[n]["vllm.kv_cache_usage"] <= 1.0
        served = [
            n
            for n in names
            if after[n]["vllm.generation_tokens_total"] > before[n]["vllm.generation_tokens_total"]
        ]
        assert served, "the traffic reached no replica"
        # Requests finished in the rate window on each replica that served: it has a TTFT quantile,
        # recorded by the rules as computed by the query they stand for.
        async with httpx.AsyncClient() as client:
            loaded = await recording_rule_names(client, prometheus.url, 5.0)
        assert {r.record for r in selector.recording_rules()} <= loaded, loaded
        for n in served:
            assert 0.0 < through[n]["vllm.ttft_p95_s"] < 30.0, through[n]
            assert 0.0 < computed[n]["vllm.ttft_p95_s"] < 30.0, computed[n]
        with pytest.raises(ProbeError, match="up 0"):
            await PrometheusVllmProbe("replica-9", source).read()
        with pytest.raises(ProbeError, match="no .* target"):
            await PrometheusVllmProbe("replica-7", source).read()
    finally:
        await source.aclose()
        await computing.aclose()
        for probe in direct.values():
            await probe.aclose()


def _ray_facts(samples: list[Sample]) -> dict[str, float]:
    """The Ray readings both backends give, with actor counts by class."""
    facts = {
        s.probe: s.value
        for s in samples
        if s.probe
        in (
            "ray.nodes_alive",
            "ray.gpus_total",
            "ray.gpus_available",
            "ray.pending_pgs",
            "ray.tasks_pending_node_assignment",
        )
    }
    facts |= {
        f"ray.actors_alive{{{s.labels['class']}}}": s.value for s in samples if s.probe == "ray.actors_alive"
    }
    return facts


def _agreeing(state_api: RayProbe, through: PrometheusRayProbe, timeout_s: float) -> dict[str, float] | None:
    """The facts once both backends read the same ones, polled each second; None if they never did."""

    def read() -> tuple[dict[str, float], dict[str, float]]:
        async def both() -> tuple[list[Sample], list[Sample]]:
            try:
                return await state_api.read(), await through.read()
            finally:
                await through.aclose()  # its client belongs to this event loop

        mine, theirs = asyncio.run(both())
        return _ray_facts(mine), _ray_facts(theirs)

    last: list[tuple[dict[str, float], dict[str, float]]] = []

    def agree() -> bool:
        try:
            pair = read()
        except ProbeError as e:
            print("not yet:", e)
            return False
        last[:] = [pair]
        return pair[0] == pair[1]

    if wait_until(agree, timeout_s, 1.0) is not None:
        return last[0][0]
    if last:
        print("state API:", last[0][0], "\nthrough prometheus:", last[0][1])
    return None


def test_the_ray_probe_through_prometheus_reads_what_the_state_api_reads(
    local_env: LocalEnvironment, prometheus: PrometheusRecord
) -> None:
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    every_up = wait_until(
        lambda: (
            len(_up(prometheus.url, "ray")) >= 3
            and all(v == 1.0 for v in _up(prometheus.url, "ray").values())
        ),
        30.0,
        0.5,
    )
    assert every_up is not None, f"Ray's nodes never all up: {_up(prometheus.url, 'ray')}"
    state_api = RayProbe(local_env.load_state().dashboard_url, local_env.connect_ray)
    through = PrometheusRayProbe(prometheus.url, PromRaySelector(f'job="{RAY_JOB}"'))
    # Ray's agents report every 10 s (metrics_report_interval_ms), the monitor every 5 s.
    at_rest = _agreeing(state_api, through, 45.0)
    assert at_rest is not None, "the two backends never read the same cluster at rest"
    assert at_rest["ray.nodes_alive"] == 3 and at_rest["ray.pending_pgs"] == 0
    assert at_rest["ray.actors_alive{ServeReplica:inferchaos:vllm}"] == 2

    @ray.remote(num_gpus=1, num_cpus=0)
    class GpuSquatter:
        def ready(self) -> bool:
            return True

    local_env.connect_ray()
    squatter = GpuSquatter.remote()  # type: ignore[attr-defined]
    # STRICT_SPREAD over more bundles than nodes: PENDING for good (design.md).
    stuck = placement_group([{"CPU": 0.01}] * 4, strategy="STRICT_SPREAD")
    changed_at = time.monotonic()
    try:
        ray.get(squatter.ready.remote(), timeout=60)
        changed = _agreeing(state_api, through, 45.0)
        print(f"both read the change {time.monotonic() - changed_at:.1f} s after it")
        assert changed is not None, "the two backends never agreed on the changed cluster"
        assert changed["ray.pending_pgs"] == 1
        assert changed["ray.gpus_available"] == at_rest["ray.gpus_available"] - 1
        print("changed:", changed)
        (squatters,) = [
            v for k, v in changed.items() if k.startswith("ray.actors_alive{") and "GpuSquatter" in k
        ]
        assert squatters == 1
    finally:
        remove_placement_group(stuck)
        ray.kill(squatter)
    back = _agreeing(state_api, through, 45.0)
    assert back is not None and back.get("ray.pending_pgs") == 0
    assert back["ray.gpus_available"] == at_rest["ray.gpus_available"]


def _alerts(url: str, state: str) -> list[dict[str, str]]:
    answer = httpx.get(
        f"{url}/api/v1/query", params={"query": f'ALERTS{{alertstate="{state}"}}'}, timeout=5.0
    )
    return [r["metric"] for r in answer.json()["data"]["result"]]


def test_the_dashboards_vllm_and_ray_queries_return_data_from_the_real_prometheus(
    local_env: LocalEnvironment, prometheus: PrometheusRecord
) -> None:
    """The dashboard built for this environment's labels (the one shipped is the same source
    for a cluster's): every vLLM and Ray panel's query answers with series, under traffic. The
    Kubernetes and device panels read kube-state-metrics and DCGM, which the local environment
    has neither of (the scraped stand-in tests read the kube ones)."""
    status = local_env.status()
    every_up = wait_until(
        lambda: len(_up(prometheus.url, "ray")) >= 3 and len(_up(prometheus.url, VLLM_JOB)) >= 2, 30.0, 0.5
    )
    assert every_up is not None
    for _ in range(6):
        stream_completion(status.front_door.url, status.model.name, "dashboards", max_tokens=8)
    dashboard = load_script("deploy/grafana/dashboard.py")
    queries = [q for q in dashboard.queries(local_alert_labels()) if q.layer in ("vllm", "ray")]
    assert len(queries) >= 10

    def empty() -> list[str]:
        missing = []
        for q in queries:
            expr = q.expr.replace("$__rate_interval", "30s").replace("$replica", ".*").replace("$node", ".*")
            answer = httpx.get(f"{prometheus.url}/api/v1/query", params={"query": expr}, timeout=5.0).json()
            if answer["status"] != "success" or not answer["data"]["result"]:
                missing.append(f"{q.title}: {expr}")
        return missing

    # Ray's agents report every 10 s: wait for every panel to have data.
    answered = wait_until(lambda: not empty(), 45.0, 1.0)
    assert answered is not None, empty()


def test_no_alert_fires_on_the_healthy_environment_and_a_hung_engine_fires_its_own(
    local_env: LocalEnvironment, prometheus: PrometheusRecord, tmp_path: Path
) -> None:
    """The environment's Prometheus evaluates inferchaos' alerting rules: under the canary's kind
    of traffic none fires; an engine hung under traffic (its /health still 200)
    fires InferchaosEngineStalled for that replica alone, in the vllm layer."""
    from inferchaos.faults.ledger import Ledger
    from inferchaos.faults.vllm.blind import BlindHealthCheck
    from inferchaos.faults.vllm.hang import HangEngine

    status = local_env.status()
    every_up = wait_until(
        lambda: len(_up(prometheus.url, "ray")) >= 3 and len(_up(prometheus.url, VLLM_JOB)) >= 2, 30.0, 0.5
    )
    assert every_up is not None
    stop = threading.Event()

    def traffic() -> None:
        while not stop.is_set():
            stream_completion(status.front_door.url, status.model.name, "alerts", max_tokens=8, timeout_s=5.0)
            time.sleep(0.3)

    # Three clients, as the canary keeps several requests in flight: the healthy replica keeps
    # generating while requests wait on the hung one.
    workers = [threading.Thread(target=traffic, daemon=True) for _ in range(3)]
    for worker in workers:
        worker.start()
    ledger, hang, blind = Ledger(tmp_path / "ledger"), HangEngine(), BlindHealthCheck()
    try:
        # A Prometheus that just started has not scraped Ray's agents yet: its absence alerts
        # (the GCS, the Serve controller) fire until Ray's first report, up to 10 s on.
        settled = wait_until(
            lambda: not _alerts(prometheus.url, "firing") + _alerts(prometheus.url, "pending"), 60.0, 1.0
        )
        assert settled is not None, (
            f"alerts never cleared after start-up: {_alerts(prometheus.url, 'firing')}"
        )
        # Longer than every alert's hold (five scrapes) and its windows (15 s). None may fire;
        # a condition that holds for a read or two is what for: absorbs (a CI run once had
        # ReplicaSlowerThanPeers pending under these three clients), so pending ones are shown.
        quiet_until = time.monotonic() + 20.0
        while time.monotonic() < quiet_until:
            firing = _alerts(prometheus.url, "firing")
            assert not firing, f"alerts firing on a healthy environment: {firing}"
            if pending := _alerts(prometheus.url, "pending"):
                print("pending on the healthy environment:", [a.get("alertname") for a in pending])
            time.sleep(1.0)
        # Prometheus is judged here, not Serve: with the plain check Serve keeps the hung replica,
        # which resumes at the revert, instead of replacing it (a replica's whole start-up).
        blinded = blind.inject(local_env, {}, ledger)
        handle = hang.inject(local_env, {"replica": "replica-0", "what": "engine"}, ledger)
        fired: list[dict[str, str]] = []

        def stalled() -> bool:
            # wait_until returns when the check held: the alerts are kept here.
            fired[:] = [
                a
                for a in _alerts(prometheus.url, "firing")
                if a.get("alertname") == "InferchaosEngineStalled"
            ]
            return bool(fired)

        try:
            waited = wait_until(stalled, 45.0, 1.0)
            # What a run's alerts probe reads meanwhile: the alert firing, and of the metrics
            # asked after, the one no exporter here gives (no DCGM: the device alert's reason).
            read = asyncio.run(
                _read_alerts(prometheus.url, ("DCGM_FI_DEV_FB_USED", "vllm:num_requests_waiting"))
            )
        finally:
            hang.revert(local_env, handle, ledger)
            blind.revert(local_env, blinded, ledger)
        assert waited is not None, f"no InferchaosEngineStalled; firing: {_alerts(prometheus.url, 'firing')}"
        print(f"InferchaosEngineStalled fired {waited - handle.injected_at:.1f} s into the hang")
        assert [(a["replica"], a["layer"]) for a in fired] == [("replica-0", "vllm")]
        probed = {(s.probe, s.labels.get("alertname") or s.labels.get("metric")) for s in read}
        assert ("alerts.firing", "InferchaosEngineStalled") in probed, read
        assert {m for probe, m in probed if probe == "alerts.unscraped"} == {"DCGM_FI_DEV_FB_USED"}, read
    finally:
        stop.set()
        for worker in workers:
            worker.join(timeout=30)
    assert ledger.is_empty()
