"""The kind environment's Kubernetes layer as a fake cluster, for whole-experiment tests.

:func:`seed_kind_environment` seeds what ``environments/kind/up.sh`` deploys (the vllm
Deployment of ``manifests/vllm.yaml``: one replica per GPU worker by required anti-affinity,
one fake GPU each, short unreachable tolerations; the Ray token Secret), with each vLLM Pod's
address and port pointing at a real server when ``replica_ports`` are given.
:func:`k8s_env_config` writes the matching environment config for the driver, and
:class:`ClusterWithFakeRay` drives it with Ray and vLLM answering from the runner's fakes.
"""

from __future__ import annotations

import base64
import copy
import json
import stat
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from inferchaos.environments.k8s_config import K8sEnvConfig, load_k8s_env_config
from inferchaos.environments.k8s_env import K8sEnvironment
from inferchaos.primitives.env_status import EnvStatus
from tests.fakes.apiserver import FakeCluster
from tests.fakes.control_plane import FakeControlPlane, with_default_tolerations
from tests.fakes.k8s_doubles import RUNTIME_SCRIPT, FakeRuntime
from tests.fakes.k8s_objects import CONTROL_PLANE, GPU_POOL, NS, WORKERS, node, pod, raycluster_crd
from tests.fakes.scripted_world import FakeEnv

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"
# The sampling interval of a scenario run against the fake cluster. Each k8s probe read makes
# four or five API calls, deserialized into the official client's models and answered by a
# server in the test's own process: beside other busy test workers on 2 cores, a 0.25 s interval
# (0.2 s per read) left little room.
K8S_READ_INTERVAL_S = 0.5

CONTEXT = "kind-inferchaos"
TOKEN_SECRET = "ray-auth-token"
TOKEN_KEY = "auth_token"  # what up.sh writes, as KubeRay's docs do
VLLM_LABELS = {"app": "vllm"}
TOLERATION_S = 1
ANTI_AFFINITY = {
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": VLLM_LABELS}, "topologyKey": "kubernetes.io/hostname"}
        ]
    }
}


def vllm_template(port: int) -> dict[str, Any]:
    """The Pod template of environments/kind/manifests/vllm.yaml, as the API server stores it."""
    amounts = {"cpu": "1", "memory": "3Gi", "nvidia.com/gpu": "1"}
    return {
        "metadata": {"labels": dict(VLLM_LABELS)},
        "spec": {
            "nodeSelector": {"inferchaos.io/pool": "gpu"},
            "tolerations": [
                {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": TOLERATION_S}
                for key in ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")
            ],
            "affinity": copy.deepcopy(ANTI_AFFINITY),
            "containers": [
                {
                    "name": "vllm",
                    "image": "inferchaos/vllm-cpu:0.32.0",
                    "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}],
                    "resources": {"requests": dict(amounts), "limits": dict(amounts)},
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                }
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "schedulerName": "default-scheduler",
        },
    }


def seed_kind_environment(
    cluster: FakeCluster,
    token: str,
    replica_ports: list[int] | None = None,
    replica_hosts: list[str] | None = None,
) -> FakeCluster:
    """Seed ``cluster`` with the kind environment; replica ``i`` listens on
    ``replica_hosts[i]`` (127.0.0.1 by default) port ``replica_ports[i]``."""
    ports = replica_ports or [8000] * len(WORKERS)
    hosts = replica_hosts or ["127.0.0.1"] * len(WORKERS)
    cluster.namespaces.add(NS)
    cluster.add(
        node(
            CONTROL_PLANE,
            labels={"node-role.kubernetes.io/control-plane": ""},
            taints=[{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}],
        )
    )
    template = vllm_template(ports[0])
    for i, name in enumerate(WORKERS):
        cluster.add(node(name, gpus=2, labels={"inferchaos.io/pool": "gpu"}, ip=f"172.18.0.{3 + i}"))
        replica = pod(
            f"vllm-7c9d8f6b5-{'abc'[i]}x{i}q",
            node_name=name,
            gpus=1,
            labels={**VLLM_LABELS, "pod-template-hash": "7c9d8f6b5"},
            owner=("ReplicaSet", "vllm-7c9d8f6b5"),
        )
        spec = copy.deepcopy(template["spec"])
        spec["containers"][0]["ports"][0]["containerPort"] = ports[i]
        replica["spec"] = {**replica["spec"], **spec, "nodeName": name}
        replica["status"]["podIP"] = hosts[i]
        cluster.add(replica)
        cluster.add(
            pod(
                f"node-agent-{i}k2f",
                node_name=name,
                labels={"app": "node-agent"},
                owner=("DaemonSet", "node-agent"),
            )
        )
    ray_worker = pod(
        "raycluster-inferchaos-workers-worker-x7k2p",
        node_name=WORKERS[0],
        labels={"ray.io/cluster": "raycluster-inferchaos", "ray.io/node-type": "worker"},
        owner=("RayCluster", "raycluster-inferchaos"),
    )
    ray_worker["spec"] = with_default_tolerations(ray_worker["spec"])
    cluster.add(ray_worker)
    cluster.add(_deployment(template))
    cluster.add(token_secret(token))
    cluster.add(raycluster_crd())  # KubeRay, as up.sh installs it
    return cluster


def token_secret(token: str, key: str = TOKEN_KEY, name: str = TOKEN_SECRET) -> dict[str, Any]:
    """The Ray token Secret as up.sh creates it (``kubectl create secret generic --from-literal``)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": name, "namespace": NS},
        "data": {key: base64.b64encode(token.encode()).decode()},
    }


def _deployment(template: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "vllm", "namespace": NS, "generation": 1, "labels": dict(VLLM_LABELS)},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": dict(VLLM_LABELS)},
            "template": template,
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"},
            },
            "revisionHistoryLimit": 10,
            "progressDeadlineSeconds": 600,
        },
        "status": {
            "observedGeneration": 1,
            "replicas": 3,
            "updatedReplicas": 3,
            "readyReplicas": 3,
            "availableReplicas": 3,
        },
    }


def make_runtime(folder: Path) -> FakeRuntime:
    """A ``docker`` that runs the three worker containers (kind's nodes)."""
    binary = folder / "bin" / "docker"
    binary.parent.mkdir(parents=True, exist_ok=True)
    binary.write_text(f"#!{sys.executable}\n{RUNTIME_SCRIPT}")
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    runtime = FakeRuntime(binary)
    runtime.set_running(dict.fromkeys(WORKERS, True))
    return runtime


def control_plane(
    cluster_of: Any, runtime: FakeRuntime, host_of_port: Callable[[int], str] = lambda port: "127.0.0.1"
) -> FakeControlPlane:
    """Controllers over the cluster; a node's machine runs while its fake container does. A Pod
    bound anew gets the address of the real server on its container port (``host_of_port``)."""

    def running(name: str) -> bool:
        return bool(json.loads(runtime.state_file.read_text()).get(name, True))

    def pod_ip_for(pod: dict[str, Any]) -> str:
        # Only the vLLM Pods have a port a real server answers on; a squatter has none.
        ports = [p["containerPort"] for c in pod["spec"]["containers"] for p in c.get("ports", [])]
        return host_of_port(int(ports[0])) if ports else "127.0.0.1"

    return FakeControlPlane(cluster_of, container_running=running, pod_ip_for=pod_ip_for)


def k8s_env_config(
    folder: Path,
    env: str,
    api_url: str,
    ray_address: str,
    dashboard_url: str,
    front_door_url: str,
    runtime: FakeRuntime,
    model: str = "tiny-llama",
) -> tuple[Path, K8sEnvConfig]:
    """Write the config file of an environment whose kube API is the fake server; load it back."""
    data = {
        "env": env,
        "kube": {"context": CONTEXT, "namespace": NS, "api_url": api_url},
        "ray": {"address": ray_address, "dashboard_url": dashboard_url, "auth_token_secret": TOKEN_SECRET},
        "vllm": {"service_url": front_door_url, "model": model, "label_selector": "app=vllm"},
        "allow": {"contexts": [CONTEXT], "namespaces": [NS], "node_selector": GPU_POOL, "max_targets": 3},
        "container_runtime": str(runtime.binary),
    }
    path = folder / f"{env}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path, load_k8s_env_config(path, env)


def faked_layers_config(
    folder: Path, env: str, api_url: str, runtime: FakeRuntime
) -> tuple[Path, K8sEnvConfig]:
    """:func:`k8s_env_config` for tests whose Ray and vLLM answer from the runner's fakes: their
    addresses point where nothing listens."""
    return k8s_env_config(
        folder, env, api_url, "127.0.0.1:6379", "http://127.0.0.1:1", "http://127.0.0.1:1", runtime
    )


def k8s_state(cluster: FakeCluster) -> dict[str, Any]:
    """What a revert must restore: node specs and readiness, the Deployment's spec, the Pods' placement.

    Pod names are left out (a lost node's replica comes back as a new Pod), and events are kept
    by a real API server for an hour, so they are not part of the state either.
    """
    nodes = {
        n: (o["spec"], next(c["status"] for c in o["status"]["conditions"] if c["type"] == "Ready"))
        for (_, n), o in cluster.objects["nodes"].items()
    }
    deployment = cluster.get("deployments", "vllm", NS)
    pods = sorted(
        (
            p["metadata"]["namespace"],
            p["spec"].get("nodeName", ""),
            p["status"]["phase"],
            ",".join(
                f"{k}={v}"
                for k, v in sorted(p["metadata"].get("labels", {}).items())
                if k != "pod-template-hash"
            ),
        )
        for p in cluster.objects["pods"].values()
    )
    return {"nodes": nodes, "deployment_spec": deployment["spec"] if deployment else None, "pods": pods}


class ClusterWithFakeRay(K8sEnvironment):
    """The real driver; only Ray and vLLM, which unit tests do not run, answer from the runner's fakes."""

    def status(self) -> EnvStatus:
        status = FakeEnv(name=self.name).status()
        return replace(status, model=replace(status.model, name=self.config.vllm.model))

    def connect_ray(self) -> None:
        """No Ray here."""
