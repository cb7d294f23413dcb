"""The client's models type every field Optional: what the readers make of a missing one."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from kubernetes.client import (
    ApiClient,
    V1Deployment,
    V1DeploymentSpec,
    V1LabelSelector,
    V1ObjectMeta,
    V1Pod,
    V1PodTemplateSpec,
)

from inferchaos.primitives.kube.api import object_name
from inferchaos.steady_state.k8s import K8sProbe


def test_object_name_is_the_metadata_name() -> None:
    assert object_name(V1Pod(metadata=V1ObjectMeta(name="vllm-0"))) == "vllm-0"


def test_object_name_without_metadata_or_name_is_empty() -> None:
    assert object_name(V1Pod()) == ""
    assert object_name(V1Pod(metadata=V1ObjectMeta(generate_name="vllm-"))) == ""


def test_a_deployment_without_status_counts_nothing_ready(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = V1DeploymentSpec(selector=V1LabelSelector(), template=V1PodTemplateSpec())
    fresh = V1Deployment(metadata=V1ObjectMeta(name="vllm"), spec=spec)  # the controller has not run yet
    listing = SimpleNamespace(items=[fresh])
    apps = SimpleNamespace(list_namespaced_deployment=lambda namespace: listing)
    monkeypatch.setattr("inferchaos.steady_state.k8s.AppsV1Api", lambda api_client: apps)
    samples = K8sProbe(ApiClient(), "ns")._deployments()
    assert [(s.probe, s.value, s.labels) for s in samples] == [
        ("k8s.deployment_ready_replicas", 0.0, {"deployment": "vllm"}),
        ("k8s.deployment_available_replicas", 0.0, {"deployment": "vllm"}),
    ]
