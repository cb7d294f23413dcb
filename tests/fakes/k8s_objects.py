"""Kubernetes objects in the JSON shapes a real API server returns, for seeding the fake cluster.

``kind_cluster`` seeds what ``environments/kind/up.sh`` builds: one tainted control plane and
three workers labelled ``inferchaos.io/pool=gpu`` advertising two ``nvidia.com/gpu`` each,
vLLM replicas (one GPU each, one per worker), a DaemonSet agent, a mirror Pod, kube-system
Pods and a KubeRay RayCluster.
"""

from __future__ import annotations

from typing import Any

from tests.fakes.apiserver import FakeCluster

NS = "inferchaos"
WORKERS = ("inferchaos-worker", "inferchaos-worker2", "inferchaos-worker3")
CONTROL_PLANE = "inferchaos-control-plane"
GPU_POOL = "inferchaos.io/pool=gpu"
T0 = "2025-11-29T10:00:00Z"
VLLM_RS = "vllm-7c9d8f6b5"


def node(
    name: str,
    gpus: int = 0,
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    ip: str = "172.18.0.2",
) -> dict[str, Any]:
    capacity = {"cpu": "4", "memory": "16365748Ki", "pods": "110", "ephemeral-storage": "76026616Ki"}
    if gpus:
        capacity["nvidia.com/gpu"] = str(gpus)
    spec: dict[str, Any] = {
        "podCIDR": "10.244.1.0/24",
        "podCIDRs": ["10.244.1.0/24"],
        "providerID": f"kind://docker/inferchaos/{name}",
    }
    if taints:
        spec["taints"] = taints
    conditions = [
        {
            "type": t,
            "status": "False",
            "reason": f"KubeletHasNo{t}",
            "message": f"kubelet has no {t}",
            "lastHeartbeatTime": T0,
            "lastTransitionTime": T0,
        }
        for t in ("MemoryPressure", "DiskPressure", "PIDPressure")
    ] + [
        {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "message": "kubelet is posting ready status",
            "lastHeartbeatTime": T0,
            "lastTransitionTime": T0,
        }
    ]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux",
                "beta.kubernetes.io/arch": "amd64",
                **(labels or {}),
            },
            "annotations": {
                "kubeadm.alpha.kubernetes.io/cri-socket": "unix:///run/containerd/containerd.sock",
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        "spec": spec,
        "status": {
            "capacity": capacity,
            "allocatable": dict(capacity),
            "conditions": conditions,
            "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": "8c1e6f0ad1f54a2fa4d3c1f4a7a8b9c0",
                "systemUUID": "4c4c4544-0000-1000-8000-000000000000",
                "bootID": "0f8d7e29-3c7b-4ac4-9d8f-0e1b7c6d5a4f",
                "kernelVersion": "6.8.0-1017-azure",
                "osImage": "Debian GNU/Linux 12 (bookworm)",
                "containerRuntimeVersion": "containerd://1.7.18",
                "kubeletVersion": "v1.31.0",
                "kubeProxyVersion": "v1.31.0",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
            "images": [{"names": ["registry.k8s.io/pause:3.10"], "sizeBytes": 320368}],
        },
    }


def pod(
    name: str,
    namespace: str = NS,
    node_name: str | None = None,
    labels: dict[str, str] | None = None,
    owner: tuple[str, str] | None = None,
    gpus: int = 0,
    phase: str = "Running",
    restarts: int = 0,
    annotations: dict[str, str] | None = None,
    image: str = "inferchaos/vllm-cpu:0.32.0",
) -> dict[str, Any]:
    amounts = {"cpu": "1", "memory": "2560Mi"}
    if gpus:
        amounts["nvidia.com/gpu"] = str(gpus)
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels or {}}
    if annotations:
        metadata["annotations"] = annotations
    if owner:
        kind, owner_name = owner
        api_version = {
            "ReplicaSet": "apps/v1",
            "DaemonSet": "apps/v1",
            "Node": "v1",
            "RayCluster": "ray.io/v1",
        }[kind]
        metadata["ownerReferences"] = [
            {
                "apiVersion": api_version,
                "kind": kind,
                "name": owner_name,
                "uid": "6f1c1a51-0000-4000-8000-00000000000a",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "main",
                "image": image,
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
        "tolerations": [
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            }
        ],
    }
    status: dict[str, Any] = {"phase": phase, "qosClass": "Guaranteed"}
    if node_name:
        spec["nodeName"] = node_name
        status.update(hostIP="172.18.0.3", podIP="10.244.1.7", startTime=T0)
    if phase == "Running":
        status["conditions"] = [
            {"type": t, "status": "True", "lastTransitionTime": T0}
            for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
        ]
        status["containerStatuses"] = [
            {
                "name": "main",
                "image": image,
                "imageID": f"docker.io/{image}@sha256:{'0' * 64}",
                "containerID": "containerd://" + "a" * 64,
                "ready": True,
                "started": True,
                "restartCount": restarts,
                "state": {"running": {"startedAt": T0}},
            }
        ]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": status}


def pending_pod(
    name: str, message: str, namespace: str = NS, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    """A Pod the scheduler could not place, its PodScheduled condition carrying ``message``."""
    obj = pod(name, namespace, labels=labels, owner=("ReplicaSet", VLLM_RS), gpus=1, phase="Pending")
    obj["status"]["conditions"] = [
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": message,
            "lastTransitionTime": T0,
        }
    ]
    return obj


def failed_scheduling(
    pod_obj: dict[str, Any], message: str, seen: str = T0, legacy: bool = False, suffix: str = "1"
) -> dict[str, Any]:
    """The scheduler's FailedScheduling event for ``pod_obj``.

    Today's scheduler writes through events.k8s.io/v1: ``eventTime`` and ``series`` are set and
    ``lastTimestamp`` is null. ``legacy`` gives the older core/v1 shape with timestamps and count.
    """
    meta = pod_obj["metadata"]
    event: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{meta['name']}.17f{suffix}",
            "namespace": meta["namespace"],
            "creationTimestamp": seen,
        },
        "involvedObject": {
            "kind": "Pod",
            "namespace": meta["namespace"],
            "name": meta["name"],
            "uid": meta["uid"],
            "apiVersion": "v1",
            "resourceVersion": meta["resourceVersion"],
        },
        "reason": "FailedScheduling",
        "message": message,
        "type": "Warning",
        "source": {},
    }
    if legacy:
        event.update(
            firstTimestamp=seen, lastTimestamp=seen, count=3, source={"component": "default-scheduler"}
        )
    else:
        event.update(
            eventTime=seen.replace("Z", ".000000Z"),
            firstTimestamp=None,
            lastTimestamp=None,
            reportingComponent="default-scheduler",
            reportingInstance="default-scheduler-inferchaos-control-plane",
            action="Scheduling",
            series={"count": 2, "lastObservedTime": seen.replace("Z", ".000000Z")},
        )
    return event


def deployment(
    name: str, replicas: int = 3, affinity: dict[str, Any] | None = None, ready: int = 3
) -> dict[str, Any]:
    template_spec: dict[str, Any] = {
        "containers": [
            {
                "name": "vllm",
                "image": "inferchaos/vllm-cpu:0.32.0",
                "resources": {
                    "requests": {"cpu": "1", "memory": "2560Mi", "nvidia.com/gpu": "1"},
                    "limits": {"cpu": "1", "memory": "2560Mi", "nvidia.com/gpu": "1"},
                },
            }
        ],
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
    }
    if affinity:
        template_spec["affinity"] = affinity
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS, "generation": 1, "labels": {"app": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": template_spec},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"},
            },
            "revisionHistoryLimit": 10,
            "progressDeadlineSeconds": 600,
        },
        "status": {
            "observedGeneration": 1,
            "replicas": replicas,
            "updatedReplicas": replicas,
            "readyReplicas": ready,
            "availableReplicas": ready,
            "conditions": [
                {
                    "type": "Available",
                    "status": "True",
                    "reason": "MinimumReplicasAvailable",
                    "message": "Deployment has minimum availability.",
                    "lastUpdateTime": T0,
                    "lastTransitionTime": T0,
                }
            ],
        },
    }


def raycluster(
    name: str, ready_workers: int, desired_workers: int, head_ready: bool = True
) -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name, "namespace": NS, "generation": 1},
        "spec": {
            "rayVersion": "2.60.0",
            "headGroupSpec": {
                "rayStartParams": {},
                "template": {"spec": {"containers": [{"name": "ray-head"}]}},
            },
            "workerGroupSpecs": [
                {
                    "groupName": "workers",
                    "replicas": desired_workers,
                    "minReplicas": 0,
                    "maxReplicas": 3,
                    "rayStartParams": {},
                    "template": {"spec": {"containers": [{"name": "ray-worker"}]}},
                }
            ],
        },
        "status": {
            "state": "ready",
            "readyWorkerReplicas": ready_workers,
            "availableWorkerReplicas": ready_workers,
            "desiredWorkerReplicas": desired_workers,
            "minWorkerReplicas": 0,
            "maxWorkerReplicas": 3,
            "conditions": [
                {
                    "type": "RayClusterProvisioned",
                    "status": "True",
                    "reason": "AllPodRunningAndReadyFirstTime",
                    "message": "",
                    "lastTransitionTime": T0,
                },
                {
                    "type": "HeadPodReady",
                    "status": "True" if head_ready else "False",
                    "reason": "HeadPodRunningAndReady" if head_ready else "HeadPodNotFound",
                    "message": "",
                    "lastTransitionTime": T0,
                },
            ],
        },
    }


VLLM_NODE_AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "inferchaos.io/pool", "operator": "In", "values": ["gpu"]}]}
            ]
        }
    }
}


def raycluster_crd(versions: tuple[tuple[str, bool, bool], ...] = (("v1", True, True),)) -> dict[str, Any]:
    """KubeRay's RayCluster CRD as the API server stores it; ``versions`` are (name, served, storage).

    Its schema is cut down to the one line that keeps it valid: the real one is 20,000 lines of
    the Pod template, none of which a reader of the CRD's versions looks at.
    """
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": "rayclusters.ray.io",
            "annotations": {"controller-gen.kubebuilder.io/version": "v0.16.4"},
        },
        "spec": {
            "group": "ray.io",
            "names": {
                "kind": "RayCluster",
                "listKind": "RayClusterList",
                "plural": "rayclusters",
                "singular": "raycluster",
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": name,
                    "served": served,
                    "storage": storage,
                    "schema": {
                        "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                    },
                    "subresources": {"status": {}},
                }
                for name, served, storage in versions
            ],
        },
        "status": {
            "acceptedNames": {
                "kind": "RayCluster",
                "listKind": "RayClusterList",
                "plural": "rayclusters",
                "singular": "raycluster",
            },
            "storedVersions": [name for name, _, storage in versions if storage],
            "conditions": [
                {
                    "type": "Established",
                    "status": "True",
                    "reason": "InitialNamesAccepted",
                    "message": "the initial names have been accepted",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ],
        },
    }


def kind_cluster(cluster: FakeCluster) -> FakeCluster:
    """Seed ``cluster`` with the kind environment of environments/kind."""
    cluster.namespaces.add(NS)
    cluster.add(
        node(
            CONTROL_PLANE,
            labels={"node-role.kubernetes.io/control-plane": ""},
            taints=[{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}],
        )
    )
    for i, name in enumerate(WORKERS):
        cluster.add(node(name, gpus=2, labels={"inferchaos.io/pool": "gpu"}, ip=f"172.18.0.{3 + i}"))
        cluster.add(
            pod(
                f"{VLLM_RS}-{'abc'[i]}x{i}q",
                node_name=name,
                gpus=1,
                restarts=2 if i == 1 else 0,
                labels={"app": "vllm", "pod-template-hash": "7c9d8f6b5"},
                owner=("ReplicaSet", VLLM_RS),
            )
        )
        cluster.add(
            pod(
                f"node-agent-{i}k2f",
                node_name=name,
                labels={"app": "node-agent"},
                owner=("DaemonSet", "node-agent"),
            )
        )
        cluster.add(
            pod(
                f"kube-proxy-{i}w7z",
                namespace="kube-system",
                node_name=name,
                labels={"k8s-app": "kube-proxy"},
                owner=("DaemonSet", "kube-proxy"),
            )
        )
    cluster.add(
        pod(
            "raycluster-inferchaos-workers-worker-x7k2p",
            node_name=WORKERS[0],
            labels={"ray.io/cluster": "raycluster-inferchaos", "ray.io/node-type": "worker"},
            owner=("RayCluster", "raycluster-inferchaos"),
        )
    )
    cluster.add(
        pod(
            f"static-canary-{WORKERS[0]}",
            node_name=WORKERS[0],
            labels={"app": "static-canary"},
            owner=("Node", WORKERS[0]),
            annotations={
                "kubernetes.io/config.mirror": "5f0c2a1e9b8d7c6a",
                "kubernetes.io/config.source": "file",
            },
        )
    )
    cluster.add(
        pod(
            "coredns-7db6d8ff4d-p2xq9",
            namespace="kube-system",
            node_name=WORKERS[0],
            labels={"k8s-app": "kube-dns"},
            owner=("ReplicaSet", "coredns-7db6d8ff4d"),
        )
    )
    cluster.add(
        pod(
            f"etcd-{CONTROL_PLANE}",
            namespace="kube-system",
            node_name=CONTROL_PLANE,
            owner=("Node", CONTROL_PLANE),
            annotations={"kubernetes.io/config.mirror": "9a8b7c"},
        )
    )
    cluster.add(deployment("vllm", affinity=VLLM_NODE_AFFINITY))
    cluster.add(deployment("router", replicas=2, ready=2))
    cluster.add(raycluster_crd())
    cluster.add(raycluster("raycluster-inferchaos", ready_workers=2, desired_workers=3))
    return cluster


def vllm_pods(cluster: FakeCluster) -> list[str]:
    return [n for n in cluster.names("pods", NS) if n.startswith(VLLM_RS)]


# Parameters every fault accepts against the seeded kind cluster.
FAULT_PARAMS: dict[str, dict[str, Any]] = {
    "k8s.cordon_node": {"node": WORKERS[0]},
    "k8s.drain_node": {"node": WORKERS[0], "namespace": NS, "timeout_s": 5.0},
    "k8s.delete_node": {"node": WORKERS[2]},
    "k8s.stop_node_container": {"node": WORKERS[1]},
    "k8s.kill_pods": {"namespace": NS, "label_selector": "app=vllm", "count": 1, "seed": 7},
    "k8s.squat_gpu_ledger": {"namespace": NS},
    "k8s.taint_gpu_nodes": {"label_selector": GPU_POOL},
    "k8s.force_anti_affinity_deadlock": {"namespace": NS, "deployment": "vllm"},
}
