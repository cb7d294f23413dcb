"""The kind environment's files: what up.sh applies must be valid Kubernetes, shaped as designed.

kind itself cannot run here; these checks catch a broken manifest before the weekly CI run does.
"""

from __future__ import annotations

import re
from pathlib import Path
from string import Template
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes.client import ApiClient

from inferchaos.environments.k8s_config import load_k8s_env_config
from inferchaos.environments.kind.fake_gpus import advertise_fake_gpus
from inferchaos.errors import EnvironmentStartError
from tests.fakes.apiserver import FakeCluster
from tests.fakes.k8s_objects import CONTROL_PLANE, GPU_POOL, WORKERS

ROOT = Path(__file__).resolve().parents[3]
KIND = ROOT / "environments" / "kind"
SAMPLE = {
    "VLLM_IMAGE": "inferchaos/vllm-cpu:0.32.0",
    "RAY_IMAGE": "rayproject/ray:2.60.0-py311-cpu",
    "MODEL_NAME": "tiny-llama-l2-h128-ctx2048-s0",
}


def manifests() -> list[dict[str, Any]]:
    docs = []
    for path in sorted((KIND / "manifests").glob("*.yaml")):
        text = Template(path.read_text()).substitute(SAMPLE)  # as up.sh's envsubst does
        docs += [d for d in yaml.safe_load_all(text) if d]
    return docs


def find(kind: str, name: str) -> dict[str, Any]:
    return next(d for d in manifests() if d["kind"] == kind and d["metadata"]["name"] == name)


@pytest.mark.parametrize(
    "doc",
    [d for d in manifests() if d["apiVersion"] != "ray.io/v1"],
    ids=lambda d: f"{d['kind']}-{d['metadata']['name']}",
)
def test_builtin_manifests_are_schema_valid(doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, "1.31", strict=True)


def test_kind_config_is_one_control_plane_and_three_gpu_workers() -> None:
    config = yaml.safe_load((KIND / "kind-config.yaml").read_text())
    roles = [n["role"] for n in config["nodes"]]
    assert roles == ["control-plane", "worker", "worker", "worker"]
    for worker in config["nodes"][1:]:
        assert worker["labels"] == {"inferchaos.io/pool": "gpu"}
        assert {"hostPath": "/tmp/inferchaos-models", "containerPath": "/models", "readOnly": True} in worker[
            "extraMounts"
        ]
    up = (KIND / "up.sh").read_text()
    assert f"CLUSTER=${{CLUSTER:-{config['name']}}}" in up


def test_up_sh_applies_manifests_that_exist() -> None:
    up = (KIND / "up.sh").read_text()
    applied = (
        re.findall(r"manifests/([\w.-]+\.yaml)", up)
        + re.search(r"for manifest in ([^;]+);", up).group(1).split()
    )
    assert applied and all((KIND / "manifests" / name).is_file() for name in applied)


def test_vllm_replicas_are_guaranteed_spread_and_serve_the_mounted_model() -> None:
    deployment = find("Deployment", "vllm")
    pod = deployment["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    assert container["resources"]["requests"] == container["resources"]["limits"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    (term,) = pod["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"] == pod["metadata"]["labels"]
    (volume,) = pod["spec"]["volumes"]
    assert volume["hostPath"]["path"] == f"/models/{SAMPLE['MODEL_NAME']}"
    assert f"--model=/models/{SAMPLE['MODEL_NAME']}" in container["args"]
    assert find("Service", "vllm")["spec"]["selector"] == pod["metadata"]["labels"]


def test_raycluster_hands_every_ray_process_the_auth_token() -> None:
    cluster = find("RayCluster", "raycluster-inferchaos")
    templates = [cluster["spec"]["headGroupSpec"]["template"]] + [
        g["template"] for g in cluster["spec"]["workerGroupSpecs"]
    ]
    for template in templates:
        (container,) = template["spec"]["containers"]
        assert container["resources"]["requests"] == container["resources"]["limits"]
        env = {e["name"]: e for e in container["env"]}
        assert env["RAY_AUTH_MODE"]["value"] == "token"
        assert env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"] == {
            "name": "ray-auth-token",
            "key": "auth_token",
        }


def test_the_token_secret_has_one_key_everywhere() -> None:
    """up.sh writes the key that the RayCluster and kind.yaml read: KubeRay's ``auth_token``."""
    ray = load_k8s_env_config(KIND / "kind.yaml", "kind").ray
    assert (ray.auth_token_secret, ray.token_key) == ("ray-auth-token", "auth_token")
    up = (KIND / "up.sh").read_text()
    created = re.findall(r"create secret generic (\S+) --from-literal=([\w.-]+)=", up)
    assert created == [(ray.auth_token_secret, ray.token_key)]


def test_fake_gpus_are_written_through_the_node_status(api_client: ApiClient, cluster: FakeCluster) -> None:
    spec_before = cluster.get("nodes", WORKERS[0])["spec"]
    assert advertise_fake_gpus(api_client, GPU_POOL, 4) == list(WORKERS)
    for worker in WORKERS:
        status = cluster.get("nodes", worker)["status"]
        assert status["capacity"]["nvidia.com/gpu"] == status["allocatable"]["nvidia.com/gpu"] == "4"
    assert cluster.get("nodes", WORKERS[0])["spec"] == spec_before
    assert "nvidia.com/gpu" not in cluster.get("nodes", CONTROL_PLANE)["status"]["capacity"]
    patches = [r for r in cluster.requests if r.method == "PATCH"]
    assert all(
        r.path.endswith("/status") and r.content_type.startswith("application/json-patch+json")
        for r in patches
    )


def test_fake_gpus_need_a_matching_node(api_client: ApiClient, cluster: FakeCluster) -> None:
    with pytest.raises(EnvironmentStartError, match="no node matches"):
        advertise_fake_gpus(api_client, "inferchaos.io/pool=tpu", 2)


def test_the_in_cluster_config_is_kind_seen_from_a_pod() -> None:
    """gameday-in-cluster.sh's config: kind.yaml's cluster and fence, reached from inside."""
    outside = load_k8s_env_config(KIND / "kind.yaml", "kind")
    inside = load_k8s_env_config(KIND / "in-cluster.yaml", "cluster")
    assert inside.kube.in_cluster and not (inside.kube.kubeconfig or inside.kube.api_url)
    assert (inside.kube.context, inside.kube.namespace) == (outside.kube.context, outside.kube.namespace)
    assert inside.allow == outside.allow
    assert (inside.ray.auth_token_secret, inside.ray.token_key) == (
        outside.ray.auth_token_secret,
        outside.ray.token_key,
    )
    assert inside.vllm.model == outside.vllm.model
    script = (KIND / "gameday-in-cluster.sh").read_text()
    assert f"WORKLOADS={inside.kube.namespace} " in script


def test_the_in_cluster_suite_is_experiments_a_pod_can_run() -> None:
    script = (KIND / "gameday-in-cluster.sh").read_text()
    suite = re.search(r"^SUITE=\(([^)]*)\)$", script, re.MULTILINE)
    assert suite
    for name in suite.group(1).split():
        experiment = yaml.safe_load((ROOT / "experiments" / f"{name}.yaml").read_text())
        # The script turns this line into environment.name: cluster.
        assert experiment["environment"] == {"name": "kind"}
        assert experiment["tags"][:2] == ["inferchaos", "k8s"]
        # Stopping a node's container needs the runtime on kind's host, which a Pod has not.
        assert "stop_node_container" not in (ROOT / "experiments" / f"{name}.yaml").read_text()


def test_the_workflow_builds_the_image_and_runs_the_cronjob_in_kind() -> None:
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "kind-gameday.yml").read_text())
    runs = "\n".join(step.get("run", "") for step in workflow["jobs"]["gameday"]["steps"])
    assert "docker build -f deploy/Dockerfile -t inferchaos:local ." in runs
    assert "kind load docker-image --name inferchaos inferchaos:local" in runs
    scripts = re.findall(r"^(environments/\S+\.sh)$", runs, re.MULTILINE)
    assert scripts == ["environments/kind/gameday-in-cluster.sh"]
    assert all((ROOT / s).is_file() and (ROOT / s).stat().st_mode & 0o111 for s in scripts)
    # The image the workflow loads is the one the CronJob names.
    assert "image: inferchaos:local " in (ROOT / "deploy" / "gameday-cronjob.yaml").read_text()
