"""`inferchaos env check` (inferchaos/run/preflight.py) through the real CLI, every layer faked at HTTP.

The kube API is the fake API server (SelfSubjectAccessReviews, the KubeRay CRD, the vLLM Pods);
the Ray dashboard and each vLLM replica's /metrics are small aiohttp servers answering recorded
shapes (tests/fixtures/ray, tests/fixtures/metrics); the front door is the fake OpenAI server.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from inferchaos.cli.main import main
from inferchaos.primitives.vllm_metrics import KV_USAGE
from tests.fakes.apiserver import FakeApiServer, FakeCluster
from tests.fakes.k8s_objects import NS, WORKERS, raycluster_crd
from tests.fakes.k8s_scenario import k8s_env_config, make_runtime, seed_kind_environment
from tests.fakes.layer_servers import (
    DashboardAnswers,
    ReplicaAnswers,
    ThreadedServer,
    dashboard_app,
    recorded_json,
    replica_app,
)
from tests.fakes.openai_server import FAKE_MODEL, FakeBehaviour, FakeOpenAIServer

TOKEN = "ray-token-for-the-preflight"
OLD_KV_USAGE = "vllm:gpu_cache_usage_perc"


@dataclass
class Layers:
    """The faked environment and the knobs a test turns."""

    cluster: FakeCluster
    config: Path
    kind_config: Path
    dashboard: DashboardAnswers
    dashboard_url: str
    replicas: list[ReplicaAnswers]
    front_door: FakeOpenAIServer


@pytest.fixture
def layers(fake_server: FakeApiServer, tmp_path: Path) -> Iterator[Layers]:
    dashboard = DashboardAnswers(TOKEN)
    replicas = [ReplicaAnswers() for _ in WORKERS]
    servers = [ThreadedServer(dashboard_app(dashboard), "fake-dashboard").start()]
    servers += [ThreadedServer(replica_app(r), "fake-replica").start() for r in replicas]
    front_door = FakeOpenAIServer(FakeBehaviour(chunks=2, first_delay_s=0.0, delay_s=0.0)).start()
    fake_server.cluster = seed_kind_environment(FakeCluster(), TOKEN, [s.port for s in servers[1:]])
    runtime = make_runtime(tmp_path)
    paths = {
        env: k8s_env_config(
            tmp_path,
            env,
            fake_server.url,
            "127.0.0.1:6379",
            servers[0].url,
            front_door.url,
            runtime,
            model=FAKE_MODEL,
        )[0]
        for env in ("cluster", "kind")
    }
    yield Layers(
        fake_server.cluster, paths["cluster"], paths["kind"], dashboard, servers[0].url, replicas, front_door
    )
    front_door.stop()
    for server in servers:
        server.stop()
    assert fake_server.cluster.rejected == []


def _cli(
    args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, str]:
    monkeypatch.setattr("sys.argv", ["inferchaos", *args])
    code = 0
    try:
        main()
    except SystemExit as done:
        code = int(done.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def _check(
    layers: Layers, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *extra: str
) -> tuple[int, dict, str]:
    code, out, err = _cli(
        ["env", "check", "--env", "cluster", "--config", str(layers.config), "--json", *extra],
        monkeypatch,
        capsys,
    )
    return code, json.loads(out), err


def _missing(report: dict) -> list[str]:
    return [f"{i['layer']}: {i['what']}: {i['detail']}" for i in report["items"] if not i["present"]]


def test_everything_present_exits_0_and_reads_only(
    layers: Layers, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, report, err = _check(layers, monkeypatch, capsys)
    assert _missing(report) == [] and (code, err) == (0, "")
    assert report["ok"] is True and report["env"] == "cluster"
    items = {(i["layer"], i["what"]): i["detail"] for i in report["items"]}
    assert items[("kuberay", "rayclusters.ray.io")] == "serves v1 (storage v1)"
    assert items[("ray", f"dashboard {layers.dashboard_url}")].startswith("Ray 2.60.0 (dashboard API 4)")
    assert items[("ray", "state API /api/v0/nodes")] == "lists nodes (3 in the cluster)"
    assert items[("rbac", "patch nodes (cluster-wide)")].startswith("allowed; needed by k8s.cordon_node")
    assert sum(1 for layer, _ in items if layer == "vllm") == len(WORKERS)
    assert layers.front_door.behaviour.max_tokens_seen == [1]
    assert set(layers.dashboard.seen_authorization) == {f"Bearer {TOKEN}"}
    assert layers.cluster.mutating_requests() == [
        r for r in layers.cluster.requests if r.path.endswith("/selfsubjectaccessreviews")
    ]


def test_the_table_looks_like_env_status(
    layers: Layers, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _cli(
        ["env", "check", "--env", "cluster", "--config", str(layers.config)], monkeypatch, capsys
    )
    assert code == 0
    assert "inferchaos env check: cluster (ready)" in out
    assert "env check: cluster: all" not in out  # the table only; a game day prints the summary line


def test_rbac_denied_for_one_verb_exits_2_naming_it(
    layers: Layers, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    layers.cluster.denied_access.append({"verb": "patch", "resource": "nodes"})
    code, report, err = _check(layers, monkeypatch, capsys)
    assert code == 2
    (missing,) = _missing(report)
    assert missing == (
        "rbac: patch nodes (cluster-wide): denied; needed by k8s.cordon_node, k8s.drain_node, k8s.taint_gpu_nodes"
    )
    assert err.splitlines() == [
        f"inferchaos: missing: {missing}",
        f"inferchaos: env check: cluster: 1 of {len(report['items'])} needed items missing",
    ]


def test_a_suite_checks_only_its_faults_accesses(
    layers: Layers, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # deploy/gameday-cronjob.yaml withholds delete_node's accesses on purpose; the k8s suite never deletes a node.
    layers.cluster.denied_access += [
        {"verb": "delete", "resource": "nodes"},
        {"verb": "create", "resource": "nodes"},
    ]
    assert _check(layers, monkeypatch, capsys)[0] == 2
    code, report, _ = _check(layers, monkeypatch, capsys, "--suite", "k8s")
    assert (code, _missing(report)) == (0, [])


def test_a_missing_kuberay_crd_exits_2(
    layers: Layers, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    layers.cluster.missing_crds.add("rayclusters")
    code, report, _ = _check(layers, monkeypatch, capsys)
    assert code == 2
    assert _missing(report) == [
        "kuberay: rayclusters.ray.io: not installed (the KubeRay operator installs it)"
    ]


def test_a_crd_that_does_not_serve_v1_is_missing(
    layers: Layers, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # KubeRay before 1.1 served only v1alpha1.
    layers.cluster.remove("customresourcedefinitions", "rayclusters.ray.io")
    layers.cluster.add(raycluster_crd(versions=(("v1alpha1", True, True),)))
    code, report, _ = _check(layers, monkeypatch, capsys)
    assert code == 2
    assert _missing(report) == [
        "kuberay: rayclusters.ray.io: serves v1alpha1, not v1, which the k8s probe reads"
    ]


def test_old_vllm_metric_names_are_still_found(
    layers: Layers, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for replica in layers.replicas:
        replica.metrics = replica.metrics.replace(KV_USAGE, OLD_KV_USAGE)
    code, report, _ = _check(layers, monkeypatch, capsys)
    assert (code, _missing(report)) == (0, [])
    vllm = [i["detail"] for i in report["items"] if i["layer"] == "vllm"]
    assert vllm == [f"all 9 metrics the vLLM probe reads; older names: {OLD_KV_USAGE} for {KV_USAGE}"] * 3


def test_a_replica_with_neither_name_is_missing(
    layers: Layers, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    replica = layers.replicas[1]
    replica.metrics = "".join(line + "\n" for line in replica.metrics.splitlines() if KV_USAGE not in line)
    code, report, _ = _check(layers, monkeypatch, capsys)
    assert code == 2
    (missing,) = _missing(report)
    assert missing.startswith("vllm: vllm-7c9d8f6b5-bx1q /metrics: ")
    assert missing.endswith(f"no {KV_USAGE} (nor {OLD_KV_USAGE})")


def test_a_front_door_that_is_down_is_missing(
    layers: Layers, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = yaml.safe_load(layers.config.read_text())
    data["vllm"]["service_url"] = "http://127.0.0.1:1"  # nothing listens there
    layers.config.write_text(yaml.safe_dump(data))
    code, report, _ = _check(layers, monkeypatch, capsys)
    assert code == 2
    (missing,) = _missing(report)
    assert missing.startswith(
        f"front door: http://127.0.0.1:1 ({FAKE_MODEL}): a completion failed: ConnectError"
    )


def test_a_front_door_that_refuses_completions_is_missing(
    layers: Layers, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    layers.front_door.behaviour.fail_every = 1
    code, report, _ = _check(layers, monkeypatch, capsys)
    assert code == 2
    assert _missing(report)[0].endswith('a completion failed: HTTP 500: {"error": "injected failure"}')


def test_a_ray_version_other_than_this_hosts_is_missing(
    layers: Layers, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    layers.dashboard.version = {**layers.dashboard.version, "ray_version": "2.59.0"}
    code, report, _ = _check(layers, monkeypatch, capsys)
    assert code == 2
    assert _missing(report) == [
        f"ray: dashboard {layers.dashboard_url}: Ray 2.59.0, but this host has ray 2.60.0: "
        "Ray Client needs the same version"
    ]


def test_a_wrong_ray_token_is_missing_for_the_version_and_the_state_api(
    layers: Layers, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    layers.dashboard.token = "another-token"
    code, report, _ = _check(layers, monkeypatch, capsys)
    assert code == 2
    assert [m.split(": ", 2)[1] for m in _missing(report)] == [
        f"dashboard {layers.dashboard_url}",
        "state API /api/v0/nodes",
    ]
    assert all("answered HTTP 403: Forbidden: Invalid authentication token" in m for m in _missing(report))


def test_an_unreachable_kube_api_is_one_missing_item(
    layers: Layers, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = yaml.safe_load(layers.config.read_text())
    data["kube"]["api_url"] = "http://127.0.0.1:1"
    layers.config.write_text(yaml.safe_dump(data))
    code, report, _ = _check(layers, monkeypatch, capsys)
    assert code == 2
    missing = _missing(report)
    assert missing[0].startswith(
        "kube API: API server of context kind-inferchaos: could not read the API server's"
    )
    assert not any(m.startswith(("rbac", "kuberay", "vllm")) for m in missing)  # not asked without an API


def test_local_says_where_it_is_checked(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _cli(["env", "check"], monkeypatch, capsys)
    assert code == 0 and "`inferchaos env status`" in out


@pytest.mark.parametrize(
    "command", [["run", "experiments/gpu_ledger_squat.yaml"], ["gameday"], ["gameday", "--dry-run"]]
)
def test_run_and_gameday_stop_before_planning_when_something_is_missing(
    layers: Layers,
    home: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: list[str],
) -> None:
    layers.cluster.denied_access.append({"verb": "create", "resource": "pods", "namespace": NS})
    with layers.cluster.lock:
        layers.cluster.requests.clear()
    code, out, err = _cli(
        [*command, "--env", "kind", "--config", str(layers.kind_config)], monkeypatch, capsys
    )
    assert code == 2
    assert err.splitlines()[0] == (
        f"inferchaos: missing: rbac: create pods in {NS}: denied; needed by k8s.squat_gpu_ledger"
    )
    assert err.splitlines()[-1].startswith("inferchaos: env check: kind: 1 of ")
    # Nothing planned (no node list for a plan), nothing written but the reviews.
    assert {r.path for r in layers.cluster.mutating_requests()} == {
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
    }
    assert not (home / "ledger").exists() or not any((home / "ledger").iterdir())


def test_the_recorded_dashboard_shapes_have_rays_own_fields() -> None:
    """The fixtures keep to Ray 2.60's dataclasses, so the fake dashboard answers as the real one."""
    from ray.dashboard.modules.version import VersionResponse
    from ray.util.state.common import ListApiResponse, NodeState

    def names(cls: type) -> set[str]:
        return {f.name for f in dataclasses.fields(cls)}

    assert set(recorded_json("api_version.json")) == names(VersionResponse)
    envelope = recorded_json("list_nodes.json")
    assert set(envelope) == {"result", "msg", "data"} and set(envelope["data"]) == {"result"}
    listing = envelope["data"]["result"]
    assert set(listing) == names(ListApiResponse)
    assert all(set(row) == names(NodeState) for row in listing["result"])
