"""The table of kube accesses (inferchaos/run/kube_access.py) against what the code really sends.

Every Kubernetes fault (plan, inject, evidence, revert), the k8s probe and the driver run
against the fake API server; each request they send is turned back into (verb, resource,
namespace) and must be covered by a row naming that caller. Every row of a caller must have
been asked for, too, so the table can neither miss an access nor keep one nobody makes.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from kubernetes.client import ApiClient

from inferchaos.environments.k8s_env import K8sEnvironment
from inferchaos.faults.ledger import Ledger
from inferchaos.faults.registry import get_fault
from inferchaos.primitives.kube.access import KubeAccess
from inferchaos.primitives.kube.client import K8sTarget
from inferchaos.run.kube_access import (
    DRIVER,
    KUBE_NEEDS,
    PREFLIGHT,
    PROBE,
    KubeNeed,
    Scope,
    needed_access,
)
from inferchaos.steady_state.k8s import K8sProbe
from tests.fakes.apiserver import FakeApiServer, FakeCluster, RecordedRequest
from tests.fakes.k8s_doubles import FakeRuntime, KindEnv
from tests.fakes.k8s_objects import FAULT_PARAMS, GPU_POOL, NS, pod
from tests.fakes.k8s_scenario import CONTEXT, k8s_env_config, token_secret

_PATH = re.compile(
    r"^/(?:api/v1|apis/(?P<group>[^/]+)/[^/]+)(?:/namespaces/(?P<ns>[^/]+))?"
    r"/(?P<resource>[^/]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>[^/]+))?$"
)
_VERBS = {"POST": "create", "PATCH": "patch", "DELETE": "delete", "PUT": "update"}


def access_of(request: RecordedRequest) -> KubeAccess:
    """The access a request makes, as an authorizer sees it."""
    m = _PATH.match(request.path)
    assert m, f"not a resource request: {request.method} {request.path}"
    verb = ("get" if m["name"] else "list") if request.method == "GET" else _VERBS[request.method]
    return KubeAccess(verb, m["resource"], m["group"] or "", m["sub"] or "", m["ns"] or "")


def _covering(access: KubeAccess, caller: str) -> list[KubeNeed]:
    # A fault acts in its `namespace` parameter (an allowed namespace); the probe and the
    # driver read kube.namespace. The test cluster has one namespace for both.
    namespaced = Scope.FAULTS if caller.startswith("k8s.") else Scope.WORKLOADS
    return [
        need
        for need in KUBE_NEEDS
        if caller in need.needed_by
        and (need.verb, need.resource, need.group, need.subresource)
        == (access.verb, access.resource, access.group, access.subresource)
        and need.scope is (Scope.CLUSTER if not access.namespace else namespaced)
    ]


USED: dict[str, set[KubeNeed]] = {}


def _check(caller: str, requests: list[RecordedRequest]) -> None:
    assert requests, f"{caller} sent nothing: the test does not exercise it"
    for request in requests:
        access = access_of(request)
        rows = _covering(access, caller)
        assert rows, (
            f"{caller} made {access.describe()}, which no row of inferchaos/run/kube_access.py names it for"
        )
        USED.setdefault(caller, set()).update(rows)


def _taken(cluster: FakeCluster) -> list[RecordedRequest]:
    with cluster.lock:
        taken = list(cluster.requests)
        cluster.requests.clear()
    return taken


@pytest.mark.parametrize("fault", sorted(FAULT_PARAMS))
def test_every_access_of_a_fault_is_in_the_table(
    env: KindEnv, cluster: FakeCluster, ledger: Ledger, fault: str, fake_runtime: FakeRuntime
) -> None:
    implementation = get_fault(fault)
    _taken(cluster)
    implementation.plan(env, FAULT_PARAMS[fault])
    handle = implementation.inject(env, FAULT_PARAMS[fault], ledger)
    implementation.evidence(env, handle)
    implementation.revert(env, handle, ledger)
    _check(fault, _taken(cluster))


def test_every_access_of_the_probe_is_in_the_table(api_client: ApiClient, cluster: FakeCluster) -> None:
    # A Pod the scheduler refused, so that the probe reads the FailedScheduling events too.
    cluster.add(pod("vllm-pending", phase="Pending"))
    _taken(cluster)
    K8sProbe(api_client, NS, GPU_POOL).read_now()
    _check(PROBE, _taken(cluster))


def test_every_access_of_the_driver_is_in_the_table(
    fake_server: FakeApiServer,
    cluster: FakeCluster,
    api_client: ApiClient,
    tmp_path: Path,
    fake_runtime: FakeRuntime,
) -> None:
    cluster.add(token_secret("a-token"))
    _, config = k8s_env_config(
        tmp_path,
        "kind",
        fake_server.url,
        "127.0.0.1:1",
        "http://127.0.0.1:1",
        "http://127.0.0.1:1",
        fake_runtime,
    )
    driver = K8sEnvironment(config, target=K8sTarget(api_client, config.allow, context=CONTEXT))
    _taken(cluster)
    driver.load_state()
    driver.replica_pods()
    _check(DRIVER, _taken(cluster))


def test_no_row_names_a_caller_that_never_makes_it() -> None:
    """Run last in this file: every row of every caller exercised above was asked for."""
    if len(USED) < len(FAULT_PARAMS) + 2:
        pytest.skip("needs the whole file: the other tests record what was asked for")
    unused = [
        f"{need.verb} {need.resource} ({need.scope}) for {caller}"
        for need in KUBE_NEEDS
        for caller in need.needed_by
        if caller != PREFLIGHT and need not in USED.get(caller, set())
    ]
    assert unused == []


def test_the_accesses_of_a_run_are_its_faults_and_the_readers_in_their_namespaces(
    fake_server: FakeApiServer, tmp_path: Path, fake_runtime: FakeRuntime
) -> None:
    _, config = k8s_env_config(
        tmp_path,
        "cluster",
        fake_server.url,
        "127.0.0.1:1",
        "http://127.0.0.1:1",
        "http://127.0.0.1:1",
        fake_runtime,
    )
    everything = needed_access(config)
    only_kill = needed_access(config, ["k8s.kill_pods"])
    assert {a.access for a in only_kill} < {a.access for a in everything}
    callers = {caller for a in only_kill for caller in a.needed_by}
    assert callers == {"k8s.kill_pods", PROBE, DRIVER, PREFLIGHT}
    described = [a.access.describe() for a in only_kill]
    assert f"get secrets ray-auth-token in {NS}" in described
    assert "get customresourcedefinitions.apiextensions.k8s.io rayclusters.ray.io (cluster-wide)" in described
    assert "delete nodes (cluster-wide)" not in described
    assert len(described) == len(set(described))  # one review per access, whoever needs it
