"""The three Kubernetes experiments end to end, through the real runner and the real driver.

The environment is a ``cluster`` environment (:class:`environments.k8s_env.K8sEnvironment`)
whose kube API is the fake API server with its simulated control plane (scheduler,
Deployment controller, node lifecycle; ``tests/fakes``), and whose Ray cluster, front door
and vLLM replicas are the REAL shared local environment: the vLLM Pods' addresses point at
the local replicas, the Ray token Secret holds the local cluster's token. No Kubernetes server
can run here; the kind workflow runs the same files against a real one.

The experiments run as written except for shorter phases (baseline 4 s, fault 8 s): the fake
control plane notices a lost node after 1 s and evicts after 1 s, where kind takes ~20 s.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import httpx
import pytest

from inferchaos.cli.main import cli
from inferchaos.environments.k8s_env import K8sEnvironment
from inferchaos.environments.local.env import LocalEnvironment
from inferchaos.faults.ledger import Ledger
from inferchaos.run.runner import RunOptions, run_experiment
from inferchaos.run.spec import load_and_validate
from tests.fakes.apiserver import FakeApiServer, FakeCluster
from tests.fakes.k8s_doubles import FakeRuntime
from tests.fakes.k8s_objects import WORKERS
from tests.fakes.k8s_scenario import (
    control_plane,
    k8s_env_config,
    k8s_state,
    make_runtime,
    seed_kind_environment,
)

pytestmark = pytest.mark.integration

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"
BASELINE_S, DURING_S = 4.0, 8.0


@dataclass
class FakeK8s:
    """The fake kube API beside the real local environment, reseeded per test."""

    server: FakeApiServer
    runtime: FakeRuntime
    folder: Path
    local: LocalEnvironment
    # Each local replica's address by its port: its worker's own with --network netns.
    hosts: dict[int, str] = field(default_factory=dict)

    def reseed(self) -> FakeCluster:
        state = self.local.load_state()
        urls = [httpx.URL(r.url) for r in self.local.replica_records()]
        self.hosts = {int(u.port or 80): str(u.host) for u in urls}
        ports = sorted(self.hosts)
        # Three GPU workers, one replica each; with two local replicas the third Pod shares one.
        pods = [ports[i % len(ports)] for i in range(len(WORKERS))]
        self.server.cluster = seed_kind_environment(
            FakeCluster(), state.read_token(), pods, [self.hosts[port] for port in pods]
        )
        # Atomically: the fake control plane's thread reads it meanwhile (a half-written file
        # killed that thread once in a fresh-clone run).
        self.runtime.set_running(dict.fromkeys(WORKERS, True))
        return self.server.cluster

    def config(self, env: str) -> tuple[Path, K8sEnvironment]:
        state = self.local.load_state()
        path, config = k8s_env_config(
            self.folder,
            env,
            self.server.url,
            state.ray_address,
            state.dashboard_url,
            state.front_door_url,
            self.runtime,
            model=state.served_model_name,
        )
        return path, K8sEnvironment(config)


@pytest.fixture(scope="module")
def fake_k8s(local_env: LocalEnvironment, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeK8s]:
    folder = tmp_path_factory.mktemp("fake-k8s")
    server = FakeApiServer()
    server.start()
    runtime = make_runtime(folder)
    k8s = FakeK8s(server, runtime, folder, local_env)
    k8s.reseed()
    controllers = control_plane(
        lambda: server.cluster, runtime, lambda port: k8s.hosts.get(port, "127.0.0.1")
    )
    controllers.start()
    yield k8s
    controllers.stop()
    server.stop()


def _run(name: str, fake_k8s: FakeK8s, tmp_path: Path) -> tuple[dict, FakeCluster, dict]:
    cluster = fake_k8s.reseed()
    before = k8s_state(cluster)
    spec = load_and_validate(EXPERIMENTS / f"{name}.yaml")
    spec = replace(spec, baseline_s=BASELINE_S, fault=replace(spec.fault, duration_s=DURING_S))
    _, env = fake_k8s.config("cluster")
    try:
        verdict = run_experiment(spec, env, RunOptions(interval_s=0.5, run_dir=tmp_path / name), print)
    finally:
        env.close()
    assert verdict is not None
    result = verdict.to_dict()
    print(
        f"{name}: {result['status']} {result['reason']}; triage {result['triage']}; timing {result['timing']}"
    )
    assert Ledger().entries() == [], "the ledger must be empty after the run"
    assert cluster.rejected == [], "every request must be schema-valid"
    assert k8s_state(cluster) == before, "the fake cluster must be as it was"
    return result, cluster, before


def _assert_passed_with_k8s_triage(result: dict, scheduler_says: str, tmp_path: Path, name: str) -> None:
    assert result["env"] == "cluster"
    assert result["status"] == "passed", result["reason"]
    assert result["fault"]["effect_observed"]
    slos = {s["name"]: s for s in result["slos"]}
    assert all(s["ok"] for s in slos.values()), slos
    assert slos["availability"]["observed"] >= 0.9  # the real front door served all along
    triage = result["triage"]
    assert triage["layer"] == "k8s", triage
    assert triage["evidence"]["probe"] == "k8s.pods_unschedulable"
    assert scheduler_says in triage["reason"] and scheduler_says in triage["evidence"]["labels"]["reason"]
    timing = result["timing"]
    assert timing["recovered"] and 0 <= timing["time_to_recover_s"] <= timing["recovery_within_s"]
    with (tmp_path / name / "timeline.csv").open() as f:
        probes = {row["probe"] for row in csv.DictReader(f)}
    # The runner sampled every layer: the real replicas and Ray, and the fake kube API.
    assert {"k8s.pods_unschedulable", "k8s.nodes_ready", "canary.success", "ray.nodes_alive"} <= probes
    assert any(p.startswith("vllm.") for p in probes)


def test_gpu_ledger_squat(fake_k8s: FakeK8s, tmp_path: Path) -> None:
    result, cluster, _ = _run("gpu_ledger_squat", fake_k8s, tmp_path)
    evidence = result["fault"]["evidence"]
    assert evidence["symptoms"]["gpus_held"] == 3
    (pending,) = evidence["symptoms"]["pending"]
    assert "inferchaos-squat-canary-" in pending and "3 Insufficient nvidia.com/gpu" in pending
    _assert_passed_with_k8s_triage(result, "3 Insufficient nvidia.com/gpu", tmp_path, "gpu_ledger_squat")
    assert not [p for p in cluster.names("pods") if p.startswith("inferchaos-squat")]


def test_anti_affinity_pending(fake_k8s: FakeK8s, tmp_path: Path) -> None:
    result, cluster, before = _run("anti_affinity_pending", fake_k8s, tmp_path)
    pending = result["fault"]["evidence"]["symptoms"]["pending"]
    assert len(pending) == 2  # 4 nodes + 1 extra = 5 replicas; 3 run
    assert all("3 node(s) didn't match pod anti-affinity rules" in p for p in pending)
    _assert_passed_with_k8s_triage(
        result, "didn't match pod anti-affinity rules", tmp_path, "anti_affinity_pending"
    )
    assert cluster.get("deployments", "vllm", "inferchaos")["spec"]["replicas"] == 3


def test_k8s_node_loss(fake_k8s: FakeK8s, tmp_path: Path) -> None:
    result, cluster, _ = _run("k8s_node_loss", fake_k8s, tmp_path)
    symptoms = result["fault"]["evidence"]["symptoms"]
    assert symptoms["container_running"] is False and symptoms["node_ready"] == "Unknown"
    (pending,) = symptoms["pending"]
    assert "1 node(s) had untolerated taint {node.kubernetes.io/unreachable: }" in pending
    assert "2 node(s) didn't match pod anti-affinity rules" in pending
    _assert_passed_with_k8s_triage(result, "{node.kubernetes.io/unreachable: }", tmp_path, "k8s_node_loss")
    assert fake_k8s.runtime.running(WORKERS[1])
    slos = {s["name"]: s for s in result["slos"]}
    assert slos["nodes_back"]["ok"] and slos["replicas_back"]["ok"]


@pytest.mark.parametrize("name", ["k8s_node_loss", "gpu_ledger_squat", "anti_affinity_pending"])
def test_dry_run_from_the_cli_touches_nothing(
    name: str, fake_k8s: FakeK8s, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = fake_k8s.reseed()
    path, _ = fake_k8s.config("kind")
    with pytest.raises(SystemExit) as done:
        cli.main(
            ["run", str(EXPERIMENTS / f"{name}.yaml"), "--env", "kind", "--config", str(path), "--dry-run"],
            standalone_mode=False,
        )
    out = capsys.readouterr().out
    assert done.value.code == 0, out
    assert "would touch:" in out and "environment: kind" in out
    # The preflight asks the API what it may do (SelfSubjectAccessReviews, which persist
    # nothing); nothing else may be sent with a mutating verb.
    writes = [r for r in cluster.mutating_requests() if not r.path.endswith("/selfsubjectaccessreviews")]
    assert writes == [], "a dry run must not write to the kube API"
    assert Ledger().entries() == []


def test_env_status_of_a_cluster(fake_k8s: FakeK8s, capsys: pytest.CaptureFixture[str]) -> None:
    fake_k8s.reseed()
    path, _ = fake_k8s.config("cluster")
    cli.main(["env", "status", "--env", "cluster", "--config", str(path), "--json"], standalone_mode=False)
    status = json.loads(capsys.readouterr().out)
    assert status["env"] == "cluster" and status["up"] and status["front_door"]["healthy"]
    assert len(status["vllm"]["replicas"]) == 3 and all(r["healthy"] for r in status["vllm"]["replicas"])
    assert {r["node_id"] for r in status["vllm"]["replicas"]} == set(WORKERS)
    assert status["model"]["max_model_len"] > 0
