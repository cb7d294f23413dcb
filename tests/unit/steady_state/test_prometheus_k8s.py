"""The Kubernetes probe through Prometheus: the PromQL it sends and how it reads kube-state-metrics.

The answers are in the shape of Prometheus' HTTP API, with the labels kube-state-metrics' series
carry (docs/metrics/*/*-metrics.md in its repository); a real Prometheus scraping a real
kube-state-metrics exposition is tests/integration/test_prometheus_kube_state.py's.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from inferchaos.errors import ConfigError, ProbeError
from inferchaos.layers import Layer
from inferchaos.primitives.prometheus_api import PromSeries
from inferchaos.steady_state.catalog import K8S_PROBES
from inferchaos.steady_state.probe_base import Sample
from inferchaos.steady_state.prometheus_k8s import (
    DEPLOYMENTS_AVAILABLE,
    DEPLOYMENTS_READY,
    NODE_LABELS,
    NODES_CORDONED,
    NODES_READY,
    POD_PHASES,
    POD_RESTARTS,
    PODS_GATED,
    PODS_UNSCHEDULABLE,
    NodeRequirement,
    PrometheusK8sProbe,
    PromKubeSelector,
    k8s_samples_of,
    ksm_label_name,
    node_requirements,
)

NS = "llm"
KSM = PromKubeSelector(NS, 'job="kube-state-metrics"')


def test_one_tick_is_a_fixed_set_of_queries_scoped_by_the_matchers_and_pods_by_the_namespace() -> None:
    queries = KSM.queries()
    assert set(queries) == {
        NODES_READY,
        NODES_CORDONED,
        DEPLOYMENTS_READY,
        DEPLOYMENTS_AVAILABLE,
        POD_PHASES,
        POD_RESTARTS,
        PODS_UNSCHEDULABLE,
        PODS_GATED,
    }
    assert all('job="kube-state-metrics"' in q for q in queries.values())
    assert queries[NODES_READY] == (
        'max by (node) (kube_node_status_condition{job="kube-state-metrics",condition="Ready",status="true"})'
    )
    assert queries[NODES_CORDONED] == 'max by (node) (kube_node_spec_unschedulable{job="kube-state-metrics"})'
    # Nodes are cluster-wide: kube-state-metrics gives them no namespace label.
    assert all("namespace" not in queries[k] for k in (NODES_READY, NODES_CORDONED))
    namespaced = (
        DEPLOYMENTS_READY,
        DEPLOYMENTS_AVAILABLE,
        POD_PHASES,
        POD_RESTARTS,
        PODS_UNSCHEDULABLE,
        PODS_GATED,
    )
    assert all('namespace="llm"' in queries[k] for k in namespaced)
    assert queries[DEPLOYMENTS_READY] == (
        'max by (deployment) (kube_deployment_status_replicas_ready{job="kube-state-metrics",namespace="llm"})'
    )
    assert "kube_deployment_status_replicas_available{" in queries[DEPLOYMENTS_AVAILABLE]
    assert queries[POD_PHASES] == (
        'max by (pod, phase) (kube_pod_status_phase{job="kube-state-metrics",namespace="llm"}) == 1'
    )
    # Per container first (one kube-state-metrics replica's count), then summed per Pod.
    assert queries[POD_RESTARTS] == (
        "sum by (pod) (max by (pod, container) "
        '(kube_pod_container_status_restarts_total{job="kube-state-metrics",namespace="llm"}))'
    )
    assert "kube_pod_status_unschedulable{" in queries[PODS_UNSCHEDULABLE]
    assert (
        'kube_pod_status_reason{job="kube-state-metrics",namespace="llm",reason="SchedulingGated"}'
        in (queries[PODS_GATED])
    )
    # A Prometheus that scrapes one cluster: no matchers but the namespace.
    assert PromKubeSelector(NS).queries()[NODES_READY] == (
        'max by (node) (kube_node_status_condition{condition="Ready",status="true"})'
    )


@pytest.mark.parametrize(
    ("key", "label"),
    [
        ("inferchaos.io/pool", "label_inferchaos_io_pool"),
        ("nvidia.com/gpu.present", "label_nvidia_com_gpu_present"),
        ("node-role.kubernetes.io/control-plane", "label_node_role_kubernetes_io_control_plane"),
        ("cloud.google.com/gke-nodepool", "label_cloud_google_com_gke_nodepool"),
        ("acceleratorType", "label_accelerator_type"),
    ],
)
def test_a_node_label_key_is_named_as_kube_state_metrics_names_it(key: str, label: str) -> None:
    assert ksm_label_name(key) == label


@pytest.mark.parametrize(
    ("selector", "matchers"),
    [
        ("inferchaos.io/pool=gpu", ['label_inferchaos_io_pool="gpu"']),
        ("pool==gpu", ['label_pool="gpu"']),
        ("pool!=cpu", ['label_pool!="cpu"']),
        ("zone in (eu-1a, eu-1b)", ['label_zone=~"eu\\\\-1a|eu\\\\-1b"']),
        ("tier notin (spot)", ['label_tier!~"spot"']),
        ("nvidia.com/gpu.present", ['label_nvidia_com_gpu_present!=""']),
        ("!spot", ['label_spot=""']),
        (
            "inferchaos.io/pool=gpu, zone in (a,b),!spot",
            ['label_inferchaos_io_pool="gpu"', 'label_zone=~"a|b"', 'label_spot=""'],
        ),
    ],
)
def test_a_node_selector_is_read_as_matchers_on_kube_node_labels(selector: str, matchers: list[str]) -> None:
    assert [r.matcher() for r in node_requirements(selector)] == matchers


def test_no_node_selector_is_no_requirement() -> None:
    assert node_requirements(None) == () and node_requirements("  ") == ()


@pytest.mark.parametrize("selector", ["pool=gpu=a", "pool in a,b", "(pool)", "pool>3", "=gpu"])
def test_a_selector_promql_cannot_express_is_a_one_line_config_error(selector: str) -> None:
    with pytest.raises(ConfigError) as e:
        PromKubeSelector(NS, node_selector=selector).queries()
    assert str(e.value).startswith(f"allow.node_selector: {selector!r} is not a Kubernetes label selector")
    assert "\n" not in str(e.value)


def test_with_a_node_selector_the_node_counts_join_kube_node_labels_and_check_the_labels_exist() -> None:
    queries = PromKubeSelector(NS, 'job="ksm"', "inferchaos.io/pool=gpu").queries()
    join = ' and on (node) kube_node_labels{job="ksm",label_inferchaos_io_pool="gpu"}'
    assert queries[NODES_READY].endswith(join) and queries[NODES_CORDONED].endswith(join)
    assert queries[NODE_LABELS] == 'count by (label_inferchaos_io_pool) (kube_node_labels{job="ksm"})'


def _results() -> dict[str, list[PromSeries]]:
    """One tick of a cluster of four nodes (one NotReady, one cordoned), a Deployment vllm of
    which 2 replicas are ready, and in the namespace three Pods Pending: one the scheduler
    refused, one held back by its scheduling gates, one bound and starting."""
    return {
        NODES_READY: [
            PromSeries({"node": "control-plane"}, 1.0),
            PromSeries({"node": "gpu-0"}, 1.0),
            PromSeries({"node": "gpu-1"}, 1.0),
            PromSeries({"node": "gpu-2"}, 0.0),
        ],
        NODES_CORDONED: [
            PromSeries({"node": "control-plane"}, 0.0),
            PromSeries({"node": "gpu-0"}, 0.0),
            PromSeries({"node": "gpu-1"}, 1.0),
            PromSeries({"node": "gpu-2"}, 0.0),
        ],
        DEPLOYMENTS_READY: [
            PromSeries({"deployment": "vllm"}, 2.0),
            PromSeries({"deployment": "router"}, 1.0),
        ],
        DEPLOYMENTS_AVAILABLE: [
            PromSeries({"deployment": "vllm"}, 2.0),
            PromSeries({"deployment": "router"}, 1.0),
        ],
        POD_PHASES: [
            PromSeries({"pod": "vllm-a", "phase": "Running"}, 1.0),
            PromSeries({"pod": "vllm-b", "phase": "Running"}, 1.0),
            PromSeries({"pod": "vllm-c", "phase": "Pending"}, 1.0),
            PromSeries({"pod": "batch-gated", "phase": "Pending"}, 1.0),
            PromSeries({"pod": "router-a", "phase": "Pending"}, 1.0),
        ],
        POD_RESTARTS: [
            PromSeries({"pod": "vllm-a"}, 0.0),
            PromSeries({"pod": "vllm-b"}, 3.0),
            PromSeries({"pod": "router-a"}, 0.0),
        ],
        PODS_UNSCHEDULABLE: [PromSeries({"pod": "vllm-c"}, 1.0), PromSeries({"pod": "batch-gated"}, 1.0)],
        PODS_GATED: [PromSeries({"pod": "batch-gated"}, 1.0)],
    }


def _values(samples: list[Sample]) -> dict[str, float]:
    return {f"{s.probe}{{{s.label_text()}}}" if s.labels else s.probe: s.value for s in samples}


def test_a_tick_reads_as_the_api_probe_names_its_samples() -> None:
    samples = k8s_samples_of(_results(), KSM)
    assert {s.probe for s in samples} <= K8S_PROBES
    assert _values(samples) == {
        "k8s.nodes_ready": 3.0,
        "k8s.nodes_schedulable": 2.0,  # Ready and not cordoned
        "k8s.deployment_ready_replicas{deployment=router}": 1.0,
        "k8s.deployment_available_replicas{deployment=router}": 1.0,
        "k8s.deployment_ready_replicas{deployment=vllm}": 2.0,
        "k8s.deployment_available_replicas{deployment=vllm}": 2.0,
        "k8s.pods_pending{namespace=llm}": 3.0,
        # kube-state-metrics carries no scheduler message: the reason is the condition's own word.
        "k8s.pods_unschedulable{namespace=llm;reason=Unschedulable}": 1.0,
        "k8s.pods_unschedulable{namespace=llm;reason=SchedulingGated}": 1.0,
        "k8s.pod_restarts{pod=vllm-a}": 0.0,
        "k8s.pod_restarts{pod=vllm-b}": 3.0,
        # No container has a status yet: no restart series, and 0 as the API probe reads it.
        "k8s.pod_restarts{pod=vllm-c}": 0.0,
        "k8s.pod_restarts{pod=batch-gated}": 0.0,
        "k8s.pod_restarts{pod=router-a}": 0.0,
    }


def test_nothing_pending_reads_as_zero_and_no_unschedulable_sample() -> None:
    results = _results()
    results[POD_PHASES] = [PromSeries({"pod": "vllm-a", "phase": "Running"}, 1.0)]
    results[PODS_UNSCHEDULABLE] = results[PODS_GATED] = []
    samples = k8s_samples_of(results, KSM)
    assert Sample("k8s.pods_pending", 0.0, {"namespace": NS}) in samples
    assert not [s for s in samples if s.probe == "k8s.pods_unschedulable"]


def test_an_unschedulable_flag_on_a_pod_no_longer_pending_is_not_counted() -> None:
    results = _results()
    results[PODS_UNSCHEDULABLE].append(PromSeries({"pod": "vllm-a"}, 1.0))  # Running: a stale flag
    assert (
        _values(k8s_samples_of(results, KSM))["k8s.pods_unschedulable{namespace=llm;reason=Unschedulable}"]
        == 1
    )


def test_no_node_series_is_a_probe_error_never_a_cluster_of_zero_nodes() -> None:
    results = _results()
    results[NODES_READY] = []
    with pytest.raises(ProbeError, match="no kube_node_status_condition"):
        k8s_samples_of(results, KSM)


def test_with_a_node_selector_only_the_selected_nodes_count() -> None:
    selector = PromKubeSelector(NS, node_selector="inferchaos.io/pool=gpu")
    results = _results()
    # What the join leaves: the GPU pool, without the control plane.
    results[NODES_READY] = [s for s in results[NODES_READY] if s.labels["node"] != "control-plane"]
    results[NODE_LABELS] = [PromSeries({"label_inferchaos_io_pool": "gpu"}, 3.0), PromSeries({}, 1.0)]
    values = _values(k8s_samples_of(results, selector))
    assert values["k8s.nodes_ready"] == 2.0 and values["k8s.nodes_schedulable"] == 1.0
    # A pool with no Ready node is a reading of 0, once the labels are known to be exported.
    results[NODES_READY] = []
    assert _values(k8s_samples_of(results, selector))["k8s.nodes_ready"] == 0.0


def test_node_labels_kube_state_metrics_does_not_export_are_a_probe_error_naming_its_flag() -> None:
    selector = PromKubeSelector(NS, node_selector="inferchaos.io/pool=gpu,!spot")
    results = _results()
    results[NODE_LABELS] = []
    with pytest.raises(ProbeError, match=r"--metric-labels-allowlist=nodes=\[inferchaos.io/pool,spot\]"):
        k8s_samples_of(results, selector)
    # kube_node_labels is there, but without the pool label on any node: not allowlisted.
    results[NODE_LABELS] = [PromSeries({"label_kubernetes_io_hostname": "gpu-0"}, 1.0)]
    with pytest.raises(ProbeError, match="no label_inferchaos_io_pool on any node"):
        k8s_samples_of(results, selector)


def test_a_negative_requirement_may_name_a_label_no_node_has() -> None:
    assert not NodeRequirement("spot", "!").positive and NodeRequirement("pool", "in", ("a",)).positive
    results = _results()
    results[NODE_LABELS] = [PromSeries({}, 4.0)]
    values = _values(k8s_samples_of(results, PromKubeSelector(NS, node_selector="!spot")))
    assert values["k8s.nodes_ready"] == 3.0


def _vector(series: list[PromSeries]) -> dict[str, object]:
    """An instant-vector answer of Prometheus' /api/v1/query."""
    result = [{"metric": s.labels, "value": [1796000000.5, f"{s.value:g}"]} for s in series]
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


@pytest.fixture
async def prometheus_answering() -> AsyncIterator[tuple[str, dict[str, dict[str, object]]]]:
    """A stand-in for Prometheus' query API on 127.0.0.1: the answer to each query string is
    what the test puts in the dict (an unknown query is answered as Prometheus answers a bad one)."""
    answers: dict[str, dict[str, object]] = {}

    async def query(request: web.Request) -> web.Response:
        form = await request.post()
        answer = answers.get(str(form.get("query", "")))
        if answer is None:
            return web.json_response(
                {"status": "error", "errorType": "bad_data", "error": "parse error"}, status=400
            )
        return web.json_response(answer)

    app = web.Application()
    app.router.add_post("/api/v1/query", query)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/"), answers
    finally:
        await server.close()


def _answers_for(
    selector: PromKubeSelector, results: Mapping[str, list[PromSeries]]
) -> dict[str, dict[str, object]]:
    queries = selector.queries()
    return {queries[key]: _vector(list(series)) for key, series in results.items()}


async def test_the_probe_reads_prometheus_json_answers_into_samples(
    prometheus_answering: tuple[str, dict[str, dict[str, object]]],
) -> None:
    url, answers = prometheus_answering
    answers.update(_answers_for(KSM, _results()))
    probe = PrometheusK8sProbe(url, KSM, timeout_s=2.0)
    assert probe.name == "k8s" and probe.layer is Layer.K8S
    try:
        samples = await probe.read()
    finally:
        await probe.aclose()
    assert _values(samples) == _values(k8s_samples_of(_results(), KSM))


async def test_a_query_prometheus_refuses_is_a_probe_error_naming_it(
    prometheus_answering: tuple[str, dict[str, dict[str, object]]],
) -> None:
    url, answers = prometheus_answering
    answers.update(_answers_for(KSM, _results()))
    del answers[KSM.queries()[PODS_GATED]]
    probe = PrometheusK8sProbe(url, KSM)
    try:
        with pytest.raises(ProbeError, match="Prometheus refused .*kube_pod_status_reason.*bad_data"):
            await probe.read()
    finally:
        await probe.aclose()


def test_a_prometheus_that_does_not_answer_is_a_probe_error(refused_url: str) -> None:
    probe = PrometheusK8sProbe(refused_url, KSM, timeout_s=1.0)

    async def read() -> None:
        try:
            await probe.read()
        finally:
            await probe.aclose()

    with pytest.raises(ProbeError, match="did not answer"):
        asyncio.run(read())


def test_a_node_selector_promql_cannot_express_is_refused_when_the_probe_is_built() -> None:
    with pytest.raises(ConfigError, match="allow.node_selector"):
        PrometheusK8sProbe("http://127.0.0.1:9", PromKubeSelector(NS, node_selector="pool>3"))
