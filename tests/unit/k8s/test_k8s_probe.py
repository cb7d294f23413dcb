"""The k8s probe reads the fake cluster as facts."""

from __future__ import annotations

import subprocess
import sys

import pytest
from kubernetes.client import ApiClient, Configuration

from inferchaos.errors import ProbeError
from inferchaos.layers import Layer
from inferchaos.steady_state.k8s import K8sProbe
from inferchaos.steady_state.probe_base import Sample
from tests.fakes.apiserver import FakeCluster
from tests.fakes.k8s_objects import GPU_POOL, NS, VLLM_RS, WORKERS, pending_pod


def by_name(samples: list[Sample]) -> dict[str, float]:
    return {f"{s.probe}{{{s.label_text()}}}" if s.labels else s.probe: s.value for s in samples}


async def test_probe_reads_the_cluster(api_client: ApiClient, cluster: FakeCluster) -> None:
    probe = K8sProbe(api_client, NS)
    assert probe.layer is Layer.K8S
    values = by_name(await probe.read())
    assert values["k8s.nodes_ready"] == 4
    assert values["k8s.nodes_schedulable"] == 4
    assert values["k8s.deployment_ready_replicas{deployment=vllm}"] == 3
    assert values["k8s.deployment_available_replicas{deployment=router}"] == 2
    assert values[f"k8s.pods_pending{{namespace={NS}}}"] == 0
    assert values[f"k8s.pod_restarts{{pod={VLLM_RS}-bx1q}}"] == 2
    assert values[f"k8s.pod_restarts{{pod={VLLM_RS}-ax0q}}"] == 0
    assert values["k8s.raycluster_ready_workers{raycluster=raycluster-inferchaos}"] == 2
    assert values["k8s.raycluster_desired_workers{raycluster=raycluster-inferchaos}"] == 3
    assert values["k8s.raycluster_provisioned{raycluster=raycluster-inferchaos}"] == 1
    assert values["k8s.raycluster_head_ready{raycluster=raycluster-inferchaos}"] == 1


async def test_probe_sees_cordoned_lost_and_pending(api_client: ApiClient, cluster: FakeCluster) -> None:
    cluster.update("nodes", WORKERS[0], spec={"unschedulable": True})
    lost = cluster.get("nodes", WORKERS[1])["status"]["conditions"]
    for condition in lost:
        if condition["type"] == "Ready":
            condition.update(status="Unknown", reason="NodeStatusUnknown")
    cluster.update("nodes", WORKERS[1], status={"conditions": lost})
    cluster.add(pending_pod(f"{VLLM_RS}-pp1q", "0/4 nodes are available: 3 Insufficient nvidia.com/gpu."))
    cluster.update("deployments", "vllm", NS, status={"readyReplicas": 2, "availableReplicas": 2})

    values = by_name(await K8sProbe(api_client, NS, node_selector=GPU_POOL).read())
    assert values["k8s.nodes_ready"] == 2  # of the three GPU workers, one is lost
    assert values["k8s.nodes_schedulable"] == 1  # and one more is cordoned
    assert values[f"k8s.pods_pending{{namespace={NS}}}"] == 1
    assert values["k8s.deployment_ready_replicas{deployment=vllm}"] == 2


async def test_probe_without_kuberay_reads_the_rest(api_client: ApiClient, cluster: FakeCluster) -> None:
    cluster.missing_crds.add("rayclusters")
    samples = await K8sProbe(api_client, NS).read()
    assert not [s for s in samples if s.probe.startswith("k8s.raycluster")]
    assert by_name(samples)["k8s.nodes_ready"] == 4


async def test_probe_reports_an_unreachable_api_as_probe_error() -> None:
    client = ApiClient(Configuration(host="http://127.0.0.1:9"))
    client.configuration.retries = 0
    with pytest.raises(ProbeError, match="could not read the Kubernetes layer"):
        await K8sProbe(client, NS).read()
    client.close()


def test_building_the_probe_loads_the_api_classes_so_its_first_read_imports_none() -> None:
    # A fresh interpreter: this one has loaded them already. The client loads an API class's
    # module and its models on first use, which made a probe's first timed read time out.
    script = """
import sys
from kubernetes.client import ApiClient
from inferchaos.steady_state.k8s import API_MODULES, K8sProbe
assert not [m for m in API_MODULES if m in sys.modules], "loaded before the probe was built"
K8sProbe(ApiClient(), "inferchaos")
loaded = len(sys.modules)
from kubernetes.client import AppsV1Api, CoreV1Api, CustomObjectsApi
print(len(sys.modules) - loaded)
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "0", "a read's API classes were still to be imported"
