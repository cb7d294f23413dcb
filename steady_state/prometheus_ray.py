"""The Ray probe read from Prometheus: Ray's own ``ray_*`` metrics, by PromQL.

Every Ray node's metrics agent exports what its raylet, its workers and (on the head) the GCS
and the autoscaler's monitor know (https://docs.ray.io/en/latest/ray-observability/reference/
system-metrics.html). Read through the Prometheus that scrapes them, a tick is a fixed set of
queries whatever the cluster's size, and needs no driver connection and no dashboard: on a
cluster where neither is reachable from where the suite runs, Prometheus often is.

What they give, read against the state API on Ray 2.60 (tests/integration/test_prometheus_backend.py):

- ``ray.nodes_alive``: ``ray_local_resource_view_node_count``, the most nodes any live raylet's
  view of the cluster holds (the GCS syncs it; a lost node's own series go stale). Not
  ``ray_cluster_active_nodes``: a cluster without an autoscaler (the local one, KubeRay without
  one) reports it per node, as a gauge that keeps a lost node's last 1;
- ``ray.nodes_dead``: ``ray_node_failure_total``, the GCS's count of nodes it declared dead,
  its highest over the last minute: the head's scrape fails now and then under load, and its
  series would read as absent, 0 dead, then as new deaths.
  Like every Ray counter it is exported from its first increment on, so none is 0;
- ``ray.gpus_*``, ``ray.cpus_*``: ``ray_resources`` per node and state (USED, AVAILABLE);
- ``ray.actors{state,class}``, ``ray.actors_alive{class}``: ``ray_actors`` as the GCS counts
  them (``Source="gcs"``; the workers' own series split ALIVE into IDLE and RUNNING_TASKS),
  DEAD ones left out as the state-API probe leaves them out;
- ``ray.tasks{state}``, ``ray.tasks_pending_node_assignment``: ``ray_tasks`` summed over
  owners and executors (each state is reported by one of them), finished and failed left out;
- ``ray.pending_pgs``: ``ray_gcs_placement_group_count`` in state Pending or Infeasible.
  The metric has neither the group nor its strategy, so ``ray.pgs`` and
  ``ray.pg_pending_age_s`` (the placement-group stall detector's input) are not read.

Ray reports its metrics every few seconds (``metrics_report_interval_ms``, 10 s by default;
the monitor every 5 s), so these readings lag the state API by that much.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

import httpx

from inferchaos.errors import ProbeError
from inferchaos.layers import Layer
from inferchaos.primitives.prometheus_api import PromSeries, finite
from inferchaos.primitives.ray_metrics import NODE_FAILURES, NODE_VIEW
from inferchaos.steady_state.probe_base import Sample
from inferchaos.steady_state.prometheus_queries import PromQueries

logger = logging.getLogger(__name__)

NODES, DEAD, RESOURCES, ACTORS, TASKS, PGS = "nodes", "dead", "resources", "actors", "tasks", "pgs"
# How far back the count of dead nodes is read: past a failed scrape or two of the head.
DEAD_LOOKBACK = "1m"
# The placement-group states of ray_gcs_placement_group_count that the state API calls PENDING.
PENDING_PG_STATES = ("Pending", "Infeasible")
# Task states that are history, as steady_state/ray.py leaves them out.
HISTORY_TASK_STATES = ("FINISHED", "FAILED")


@dataclass(frozen=True)
class PromRaySelector:
    """Which series are the cluster's: ``matchers`` select its nodes' metrics (``job="ray"``)."""

    matchers: str = ""

    def selector(self, metric: str, *extra: str) -> str:
        inner = ",".join(m for m in (self.matchers, *extra) if m)
        return f"{metric}{{{inner}}}" if inner else metric

    def queries(self) -> dict[str, str]:
        """Every query of one tick, by key."""
        history = "|".join(HISTORY_TASK_STATES)
        resources = self.selector("ray_resources", 'Name=~"GPU|CPU"')
        actors = self.selector("ray_actors", 'Source="gcs"', 'State!="DEAD"')
        tasks = self.selector("ray_tasks", f'State!~"{history}"')
        return {
            NODES: f"max({self.selector(NODE_VIEW)})",
            DEAD: f"sum(max_over_time({self.selector(NODE_FAILURES)}[{DEAD_LOOKBACK}]))",
            RESOURCES: f"sum by (Name, State) ({resources})",
            ACTORS: f"sum by (Name, State) ({actors})",
            TASKS: f"sum by (State) ({tasks})",
            PGS: f"sum by (State) ({self.selector('ray_gcs_placement_group_count')})",
        }


def ray_samples_of(results: Mapping[str, list[PromSeries]]) -> list[Sample]:
    """The ``ray.*`` samples (named as in steady_state/catalog.py) of one tick's query results.

    ProbeError when Prometheus holds no count of the cluster's nodes: no Ray series match, or
    none was scraped yet; a made-up 0 would read as a cluster that lost every node.
    """
    nodes = finite(results.get(NODES, []))
    if not nodes:
        raise ProbeError(f"Prometheus has no {NODE_VIEW} for the cluster (not scraped yet?)")
    resources = {
        (s.labels.get("Name", ""), s.labels.get("State", "")): s.value
        for s in finite(results.get(RESOURCES, []))
    }

    def resource(name: str, states: tuple[str, ...]) -> float:
        return sum(v for (n, state), v in resources.items() if n == name and state in states)

    both = ("USED", "AVAILABLE")
    tasks = {
        s.labels.get("State", ""): s.value for s in finite(results.get(TASKS, [])) if s.labels.get("State")
    }
    pending_pgs = sum(
        s.value for s in finite(results.get(PGS, [])) if s.labels.get("State") in PENDING_PG_STATES
    )
    samples = [
        Sample("ray.nodes_alive", nodes[0].value),
        Sample("ray.nodes_dead", sum(s.value for s in finite(results.get(DEAD, [])))),
        Sample("ray.gpus_total", resource("GPU", both)),
        Sample("ray.gpus_available", resource("GPU", ("AVAILABLE",))),
        Sample("ray.cpus_total", resource("CPU", both)),
        Sample("ray.cpus_available", resource("CPU", ("AVAILABLE",))),
        Sample("ray.tasks_pending_node_assignment", tasks.get("PENDING_NODE_ASSIGNMENT", 0.0)),
        Sample("ray.pending_pgs", pending_pgs),
    ]
    actors = sorted(
        (
            (s.labels.get("State", ""), s.labels.get("Name", ""), s.value)
            for s in finite(results.get(ACTORS, []))
        ),
    )
    samples += [Sample("ray.actors", n, {"state": state, "class": cls}) for state, cls, n in actors if n > 0]
    samples += [
        Sample("ray.actors_alive", n, {"class": cls})
        for state, cls, n in actors
        if state == "ALIVE" and n > 0
    ]
    samples += [Sample("ray.tasks", n, {"state": state}) for state, n in sorted(tasks.items()) if n > 0]
    return samples


class PrometheusRayProbe:
    """The Ray layer's readings from the Prometheus at ``url`` that scrapes its nodes."""

    name = "ray"
    layer = Layer.RAY

    def __init__(
        self,
        url: str,
        selector: PromRaySelector,
        *,
        timeout_s: float = 2.0,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.selector = selector
        self.source = PromQueries(url, selector.queries(), timeout_s=timeout_s, client=client)

    async def read(self) -> list[Sample]:
        """Samples named as in steady_state/catalog.py (``ray.*``); ProbeError when Prometheus
        could not answer or holds no Ray series."""
        return ray_samples_of(await self.source.answers())

    async def aclose(self) -> None:
        """Close the HTTP client if this probe created it; idempotent."""
        await self.source.aclose()
