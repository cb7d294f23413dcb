"""The Ray probe through Prometheus: the PromQL it sends and how it reads Ray's ``ray_*`` series.

The answers are in the shape of Prometheus' HTTP API, with the labels Ray 2.60's metrics agent
exports (read off a running environment); the real server scraping the real cluster, compared
with the state API, is tests/integration/test_prometheus_backend.py's.
"""

from __future__ import annotations

import asyncio

import pytest

from inferchaos.errors import ProbeError
from inferchaos.primitives.processes import free_port
from inferchaos.primitives.prometheus_api import PromSeries
from inferchaos.steady_state.catalog import RAY_PROBES
from inferchaos.steady_state.probe_base import Sample
from inferchaos.steady_state.prometheus_ray import (
    ACTORS,
    DEAD,
    NODES,
    PGS,
    RESOURCES,
    TASKS,
    PrometheusRayProbe,
    PromRaySelector,
    ray_samples_of,
)


def test_one_tick_is_six_queries_each_scoped_by_the_clusters_matchers() -> None:
    queries = PromRaySelector('job="ray"').queries()
    assert set(queries) == {NODES, DEAD, RESOURCES, ACTORS, TASKS, PGS}
    assert all('job="ray"' in q for q in queries.values())
    # Not the monitor's ray_cluster_active_nodes, which keeps a lost node's 1 without an autoscaler.
    assert queries[NODES] == 'max(ray_local_resource_view_node_count{job="ray"})'
    # Its highest over a minute: a failed scrape of the head must not read as 0 dead, then as deaths.
    assert queries[DEAD] == 'sum(max_over_time(ray_node_failure_total{job="ray"}[1m]))'
    # The GCS's count of actors, not the workers' own (which split ALIVE into IDLE and RUNNING_TASKS).
    assert 'Source="gcs"' in queries[ACTORS] and 'State!="DEAD"' in queries[ACTORS]
    assert 'State!~"FINISHED|FAILED"' in queries[TASKS]
    # A cluster's Prometheus with no matchers: bare selectors.
    assert PromRaySelector().queries()[NODES] == "max(ray_local_resource_view_node_count)"


def _results() -> dict[str, list[PromSeries]]:
    """One tick of a cluster with a head and two workers of 2 GPUs, Serve's two replicas holding
    one each, a STRICT_SPREAD group stuck and a task waiting for a GPU."""
    return {
        NODES: [PromSeries({}, 3.0)],
        DEAD: [PromSeries({}, 1.0)],
        RESOURCES: [
            PromSeries({"Name": "GPU", "State": "USED"}, 2.0),
            PromSeries({"Name": "GPU", "State": "AVAILABLE"}, 2.0),
            PromSeries({"Name": "CPU", "State": "USED"}, 0.0),
            PromSeries({"Name": "CPU", "State": "AVAILABLE"}, 5.0),
        ],
        ACTORS: [
            PromSeries({"Name": "ServeReplica:inferchaos:vllm", "State": "ALIVE"}, 2.0),
            PromSeries({"Name": "ServeController", "State": "ALIVE"}, 1.0),
            PromSeries({"Name": "GpuHog", "State": "PENDING_CREATION"}, 3.0),
            PromSeries({"Name": "GpuHog", "State": "RESTARTING"}, 0.0),
        ],
        TASKS: [
            PromSeries({"State": "PENDING_NODE_ASSIGNMENT"}, 1.0),
            PromSeries({"State": "RUNNING"}, 4.0),
        ],
        PGS: [
            PromSeries({"State": "Registered"}, 1.0),
            PromSeries({"State": "Pending"}, 1.0),
            PromSeries({"State": "Infeasible"}, 0.0),
        ],
    }


def test_a_tick_reads_as_the_state_api_probe_names_its_samples() -> None:
    samples = {(s.probe, tuple(sorted(s.labels.items()))): s.value for s in ray_samples_of(_results())}
    assert samples[("ray.nodes_alive", ())] == 3.0
    assert samples[("ray.nodes_dead", ())] == 1.0
    assert samples[("ray.gpus_total", ())] == 4.0
    assert samples[("ray.gpus_available", ())] == 2.0
    assert samples[("ray.cpus_total", ())] == 5.0
    assert samples[("ray.tasks_pending_node_assignment", ())] == 1.0
    assert samples[("ray.pending_pgs", ())] == 1.0
    assert samples[("ray.actors_alive", (("class", "ServeReplica:inferchaos:vllm"),))] == 2.0
    assert samples[("ray.actors", (("class", "GpuHog"), ("state", "PENDING_CREATION")))] == 3.0
    assert ("ray.actors", (("class", "GpuHog"), ("state", "RESTARTING"))) not in samples, (
        "a state no actor is in is left out, as the state API lists none"
    )
    assert ("ray.actors_alive", (("class", "GpuHog"),)) not in samples
    assert samples[("ray.tasks", (("state", "RUNNING"),))] == 4.0
    assert {probe for probe, _ in samples} <= RAY_PROBES


def test_an_infeasible_group_is_pending_as_the_state_api_says() -> None:
    results = _results()
    results[PGS] = [PromSeries({"State": "Infeasible"}, 2.0), PromSeries({"State": "Pending"}, 0.0)]
    assert Sample("ray.pending_pgs", 2.0) in ray_samples_of(results)


def test_no_task_waiting_no_gpu_free_and_no_node_lost_read_as_zero_not_as_absent() -> None:
    results = _results()
    results[TASKS] = []
    results[DEAD] = []
    results[RESOURCES] = [PromSeries({"Name": "GPU", "State": "USED"}, 4.0)]
    samples = ray_samples_of(results)
    assert Sample("ray.tasks_pending_node_assignment", 0.0) in samples
    assert Sample("ray.gpus_available", 0.0) in samples
    assert Sample("ray.gpus_total", 4.0) in samples
    assert Sample("ray.nodes_dead", 0.0) in samples


def test_no_node_count_is_a_probe_error_never_a_cluster_of_zero_nodes() -> None:
    results = _results()
    results[NODES] = []
    with pytest.raises(ProbeError, match="no ray_local_resource_view_node_count"):
        ray_samples_of(results)


def test_a_prometheus_that_does_not_answer_is_a_probe_error() -> None:
    probe = PrometheusRayProbe(f"http://127.0.0.1:{free_port()}", PromRaySelector('job="ray"'), timeout_s=1.0)

    async def read() -> None:
        try:
            await probe.read()
        finally:
            await probe.aclose()

    with pytest.raises(ProbeError, match="did not answer"):
        asyncio.run(read())
