"""The client's models type every field Optional: what the readers make of a missing one."""

from __future__ import annotations

from kubernetes.client import ApiClient, V1ObjectMeta, V1Pod

from inferchaos.primitives.kube.api import object_name
from inferchaos.steady_state.k8s import K8sProbe
from tests.fakes.apiserver import FakeCluster


def test_object_name_is_the_metadata_name() -> None:
    assert object_name(V1Pod(metadata=V1ObjectMeta(name="vllm-0"))) == "vllm-0"


def test_object_name_without_metadata_or_name_is_empty() -> None:
    assert object_name(V1Pod()) == ""
    assert object_name(V1Pod(metadata=V1ObjectMeta(generate_name="vllm-"))) == ""


def test_a_deployment_without_status_counts_nothing_ready(
    cluster: FakeCluster, api_client: ApiClient
) -> None:
    # The controller has not looked at it yet: the API server holds it without a status.
    cluster.add(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "vllm", "namespace": "fresh"},
            "spec": {
                "selector": {"matchLabels": {"app": "vllm"}},
                "template": {
                    "metadata": {"labels": {"app": "vllm"}},
                    "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai"}]},
                },
            },
        }
    )
    samples = K8sProbe(api_client, "fresh")._deployments()
    assert [(s.probe, s.value, s.labels) for s in samples] == [
        ("k8s.deployment_ready_replicas", 0.0, {"deployment": "vllm"}),
        ("k8s.deployment_available_replicas", 0.0, {"deployment": "vllm"}),
    ]
