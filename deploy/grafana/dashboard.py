"""The three-layer dashboard for Grafana: vLLM, Ray, and Kubernetes with the device, one row
each, linked by replica and node variables, with inferchaos' alerts annotated.

Built with Grafana's own builder library (grafana-foundation-sdk, a dev dependency), from the
same metric names and labels as the alerting rules (inferchaos/primitives/alert_rules.py).
``inferchaos-dashboard.json`` beside this file is its output for a cluster's labels:

    .venv/bin/python deploy/grafana/dashboard.py > deploy/grafana/inferchaos-dashboard.json

A unit test keeps the two in step; an integration test runs every vLLM, Ray and device query
of the local environment's variant against that environment's real Prometheus.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from grafana_foundation_sdk.builders import dashboard, prometheus, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import DataSourceRef

from inferchaos.primitives.alert_rules import CLUSTER, PREFIX, AlertLabels
from inferchaos.primitives.ray_metrics import NODE_VIEW
from inferchaos.primitives.vllm_metrics import (
    GENERATION_TOKENS,
    KV_USAGE,
    PREEMPTIONS,
    RUNNING,
    TTFT,
    WAITING,
)

UID = "inferchaos-three-layers"
DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")


@dataclass(frozen=True)
class Query:
    """One panel's query, in the row of its layer."""

    layer: str
    title: str
    expr: str
    legend: str
    unit: str = "short"


def queries(labels: AlertLabels) -> tuple[Query, ...]:
    """Every panel's query, for ``labels``' series (the variables ``$replica`` and ``$node``)."""
    by, node = labels.vllm.replica_label, labels.node_label
    replica = f'{by}=~"$replica"'
    selected = ",".join(m for m in (labels.vllm.matchers, replica) if m)
    rate = "$__rate_interval"
    this_node = f'{node}=~"$node"'
    kv = f'__name__="{KV_USAGE}"'
    gpus = labels.ray("ray_resources", this_node, 'Name="GPU"')
    actors = labels.ray("ray_actors", 'Source="gcs"')
    agents = labels.ray("up", this_node)
    per = f"{{{{{by}}}}}"
    return (
        Query("vllm", "KV cache usage", f"max by ({by}) ({{{kv},{selected}}})", per, "percentunit"),
        Query("vllm", "Requests waiting", f"sum by ({by}) ({WAITING}{{{selected}}})", per),
        Query("vllm", "Requests running", f"sum by ({by}) ({RUNNING}{{{selected}}})", per),
        Query(
            "vllm",
            "Generated tokens per second",
            f"sum by ({by}) (rate({GENERATION_TOKENS}{{{selected}}}[{rate}]))",
            per,
        ),
        Query(
            "vllm",
            "Time to first token, p95",
            f"histogram_quantile(0.95, sum by ({by}, le) (rate({TTFT}_bucket{{{selected}}}[{rate}])))",
            per,
            "s",
        ),
        Query(
            "vllm",
            "Preemptions per second",
            f"sum by ({by}) (rate({PREEMPTIONS}{{{selected}}}[{rate}]))",
            per,
        ),
        Query("ray", "Ray nodes alive", f"max({labels.ray(NODE_VIEW)})", "alive"),
        Query("ray", "GPUs by state", f"sum by (State) ({gpus})", "{{State}}"),
        Query(
            "ray",
            "Placement groups by state",
            f"sum by (State) ({labels.ray('ray_gcs_placement_group_count')})",
            "{{State}}",
        ),
        Query("ray", "Actors by state", f"sum by (State) ({actors})", "{{State}}"),
        Query("ray", "Metrics agent answering", f"max by ({node}) ({agents})", f"{{{{{node}}}}}"),
        Query(
            "k8s",
            "Pods Pending",
            'sum by (namespace) (kube_pod_status_phase{phase="Pending"})',
            "{{namespace}}",
        ),
        Query(
            "k8s", "Pods unschedulable", "sum by (namespace) (kube_pod_status_unschedulable)", "{{namespace}}"
        ),
        Query(
            "k8s", "Nodes Ready", 'sum(kube_node_status_condition{condition="Ready",status="true"})', "Ready"
        ),
        Query(
            "device",
            "GPU memory used, by Pod",
            "max by (Hostname, gpu, pod) (DCGM_FI_DEV_FB_USED)",
            "{{Hostname}} GPU {{gpu}} {{pod}}",
            "decmbytes",
        ),
    )


ROWS = (("vllm", "vLLM"), ("ray", "Ray"), ("k8s", "Kubernetes and the device"))
# The device shares the last row: it is what the Kubernetes scheduler's GPU ledger stands for.
ROW_OF = {"vllm": "vllm", "ray": "ray", "k8s": "k8s", "device": "k8s"}


def build(labels: AlertLabels = CLUSTER) -> dict[str, object]:
    """The dashboard's JSON model for ``labels``' series."""
    by, node = labels.vllm.replica_label, labels.node_label
    board = (
        dashboard.Dashboard("inferchaos: vLLM, Ray, Kubernetes")
        .uid(UID)
        .tags(["inferchaos", "vllm", "ray", "kubernetes"])
        .refresh("10s")
        .time("now-1h", "now")
        .with_variable(dashboard.DatasourceVariable("datasource").type("prometheus"))
        .with_variable(
            dashboard.QueryVariable("replica")
            .label("replica")
            .datasource(DATASOURCE)
            .query(f"label_values({RUNNING}, {by})")
            .multi(True)
            .include_all(True)
            .all_value(".*")
        )
        .with_variable(
            dashboard.QueryVariable("node")
            .label("node")
            .datasource(DATASOURCE)
            .query(f"label_values({labels.ray('ray_resources')}, {node})")
            .multi(True)
            .include_all(True)
            .all_value(".*")
        )
        .annotation(
            dashboard.AnnotationQuery()
            .name("inferchaos alerts")
            .datasource(DATASOURCE)
            .enable(True)
            .icon_color("red")
            .expr(f'ALERTS{{alertstate="firing",alertname=~"{PREFIX}.*"}}')
        )
    )
    every = queries(labels)
    for key, title in ROWS:
        board = board.with_row(dashboard.Row(title))
        for query in (q for q in every if ROW_OF[q.layer] == key):
            board = board.with_panel(
                timeseries.Panel()
                .title(query.title)
                .datasource(DATASOURCE)
                .unit(query.unit)
                .with_target(prometheus.Dataquery().ref_id("A").expr(query.expr).legend_format(query.legend))
            )
    model: dict[str, object] = json.loads(json.dumps(board.build(), cls=JSONEncoder))
    return model


def main() -> None:
    """Print the cluster's dashboard (deploy/grafana/inferchaos-dashboard.json)."""
    print(json.dumps(build(), indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
