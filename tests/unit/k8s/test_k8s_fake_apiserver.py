"""The fake API server's own guarantees, which the other tests lean on: it refuses what a real
API server refuses, so a passing test means the code sent what Kubernetes accepts."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from kubernetes.client import (
    ApiClient,
    ApiextensionsV1Api,
    AuthorizationV1Api,
    CoreV1Api,
    V1ResourceAttributes,
    V1SelfSubjectAccessReview,
    V1SelfSubjectAccessReviewSpec,
)
from kubernetes.client.exceptions import ApiException

from tests.fakes.apiserver import ApiError, FakeApiServer, FakeCluster, label_selector_matches
from tests.fakes.k8s_objects import NS, WORKERS


def test_a_schema_invalid_object_is_refused_and_recorded(
    fake_server: FakeApiServer, cluster: FakeCluster
) -> None:
    # Raw HTTP: the client's own models refuse unknown fields before sending anything.
    bad = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "bad"},
        "spec": {"containers": [{"name": "main", "image": "pause", "imagePullPolcy": "Always"}]},
    }
    request = urllib.request.Request(
        f"{fake_server.url}/api/v1/namespaces/{NS}/pods",
        data=json.dumps(bad).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=5)
    assert refused.value.code == 422
    assert [r.kind for r in cluster.rejected] == ["Pod"] and "imagePullPolcy" in cluster.rejected[0].error
    assert "bad" not in cluster.names("pods", NS)
    cluster.rejected.clear()  # seen; the fixture's end-of-test check is for unexpected ones


def test_a_stale_write_conflicts_and_a_failed_json_patch_test_is_invalid(
    api_client: ApiClient, cluster: FakeCluster
) -> None:
    core = CoreV1Api(api_client)
    with pytest.raises(ApiException) as stale:
        core.patch_node(WORKERS[0], {"metadata": {"resourceVersion": "1"}, "spec": {"unschedulable": True}})
    assert stale.value.status == 409
    with pytest.raises(ApiException) as failed:
        core.patch_node(WORKERS[0], [{"op": "test", "path": "/spec/unschedulable", "value": True}])
    assert failed.value.status == 422
    assert "unschedulable" not in cluster.get("nodes", WORKERS[0])["spec"]


def test_the_status_subresource_and_the_main_resource_keep_to_their_parts(
    api_client: ApiClient, cluster: FakeCluster
) -> None:
    core = CoreV1Api(api_client)
    core.patch_node(WORKERS[0], {"status": {"capacity": {"nvidia.com/gpu": "8"}}})
    assert cluster.get("nodes", WORKERS[0])["status"]["capacity"]["nvidia.com/gpu"] == "2"
    core.patch_node_status(
        WORKERS[0], {"spec": {"unschedulable": True}, "status": {"capacity": {"nvidia.com/gpu": "8"}}}
    )
    node = cluster.get("nodes", WORKERS[0])
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "8" and "unschedulable" not in node["spec"]


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ("app=vllm", True),
        ("app==vllm,tier!=cache", True),
        ("app in (vllm, router),!canary", True),
        ("app notin (vllm)", False),
        ("tier", False),
        ("app=vllm,zone=eu", False),
    ],
)
def test_label_selectors_follow_kubernetes(selector: str, matches: bool) -> None:
    assert label_selector_matches(selector, {"app": "vllm"}) is matches


def test_an_unsupported_field_selector_is_a_bad_request(api_client: ApiClient, cluster: FakeCluster) -> None:
    with pytest.raises(ApiException) as refused:
        CoreV1Api(api_client).list_namespaced_pod(NS, field_selector="spec.schedulerName=default-scheduler")
    assert refused.value.status == 400
    with pytest.raises(ApiError):
        label_selector_matches("app in vllm", {})


def _review(api_client: ApiClient, verb: str, resource: str, namespace: str = "") -> bool:
    spec = V1SelfSubjectAccessReviewSpec(
        resource_attributes=V1ResourceAttributes(verb=verb, resource=resource, namespace=namespace or None)
    )
    answer = AuthorizationV1Api(api_client).create_self_subject_access_review(
        V1SelfSubjectAccessReview(spec=spec)
    )
    assert answer.status is not None
    return bool(answer.status.allowed)


def test_access_reviews_are_allowed_unless_denied_and_read_as_the_clients_model(
    api_client: ApiClient, cluster: FakeCluster
) -> None:
    cluster.denied_access.append({"verb": "patch", "resource": "nodes"})
    assert _review(api_client, "list", "nodes") and _review(api_client, "patch", "pods", NS)
    assert not _review(api_client, "patch", "nodes")
    (sent,) = [r.body for r in cluster.requests if r.path.endswith("/selfsubjectaccessreviews")][-1:]
    assert sent["spec"]["resourceAttributes"] == {"verb": "patch", "resource": "nodes"}


def test_the_raycluster_crd_reads_as_the_clients_model_and_is_gone_with_kuberay(
    api_client: ApiClient, cluster: FakeCluster
) -> None:
    crd = ApiextensionsV1Api(api_client).read_custom_resource_definition("rayclusters.ray.io")
    assert [(v.name, v.served, v.storage) for v in crd.spec.versions] == [("v1", True, True)]
    cluster.missing_crds.add("rayclusters")
    with pytest.raises(ApiException) as gone:
        ApiextensionsV1Api(api_client).read_custom_resource_definition("rayclusters.ray.io")
    assert gone.value.status == 404
