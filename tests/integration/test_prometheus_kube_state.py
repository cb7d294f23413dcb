"""The Kubernetes probe's PromQL against a real Prometheus scraping what kube-state-metrics writes.

The distribution's ``prometheus`` scrapes a stand-in for kube-state-metrics: a plain HTTP
server on 127.0.0.1 whose ``/metrics`` is the exposition kube-state-metrics writes for a small
cluster. :class:`PrometheusK8sProbe` then reads it with the queries it sends on a real cluster,
so the PromQL, Prometheus' answers and their reading meet with no fake between them. A second
target, another cluster's kube-state-metrics under another job, is what ``kube_matchers`` is
for. Neither Ray nor vLLM is needed: this module uses none of conftest.py's environment
fixtures. The stand-in and Prometheus are tests/integration/scraped_stand_in.py's.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from scraped_stand_in import Job, needs_prometheus, prometheus_scraping, query

from inferchaos.faults.base import wait_until
from inferchaos.steady_state.probe_base import Sample
from inferchaos.steady_state.prometheus_k8s import PrometheusK8sProbe, PromKubeSelector

pytestmark = [pytest.mark.integration, needs_prometheus]

NS = "inferchaos"
JOB, OTHER_JOB = "kube-state-metrics", "kube-state-metrics-b"

# What kube-state-metrics v2 (its main branch at commit c92fe0c) writes on /metrics for
# this cluster, started with --metric-labels-allowlist=nodes=[inferchaos.io/pool], cut to the
# families the probe reads and a few neighbours. The HELP texts, the "[STABLE]" prefix of stable families, the
# label names and their order (an object's own labels first: namespace, pod, uid), the five
# phases and three condition statuses per object are those of kubernetes/kube-state-metrics'
# internal/store/{deployment,node,pod}.go, pkg/metric_generator/generator.go (generateHeader)
# and the expected texts of internal/store/*_test.go; the metric names and labels are those of
# its docs/metrics/{workload/deployment,cluster/node,workload/pod}-metrics.md. A store that
# holds objects writes the header of each of its families, with or without series under it.
#
# The cluster: three nodes, inferchaos-worker2 NotReady (its kubelet stopped posting: every
# condition Unknown); the Deployment vllm with 3 desired and 2 ready; in the namespace two
# Pods Pending: vllm-...-q4mtl, which the scheduler refused, and the Ray head, bound and
# creating its container. Another namespace (team-b) has a vllm Deployment and a Pod that is
# also unschedulable; kube-system a CoreDNS Pod that restarted 4 times.
KUBE_STATE_METRICS = """\
# HELP kube_deployment_status_replicas [STABLE] The number of replicas per deployment.
# TYPE kube_deployment_status_replicas gauge
kube_deployment_status_replicas{namespace="inferchaos",deployment="vllm"} 3
kube_deployment_status_replicas{namespace="team-b",deployment="vllm"} 2
# HELP kube_deployment_status_replicas_ready [STABLE] The number of ready replicas per deployment.
# TYPE kube_deployment_status_replicas_ready gauge
kube_deployment_status_replicas_ready{namespace="inferchaos",deployment="vllm"} 2
kube_deployment_status_replicas_ready{namespace="team-b",deployment="vllm"} 1
# HELP kube_deployment_status_replicas_available [STABLE] The number of available replicas per deployment.
# TYPE kube_deployment_status_replicas_available gauge
kube_deployment_status_replicas_available{namespace="inferchaos",deployment="vllm"} 2
kube_deployment_status_replicas_available{namespace="team-b",deployment="vllm"} 1
# HELP kube_deployment_status_replicas_unavailable [STABLE] The number of unavailable replicas per deployment.
# TYPE kube_deployment_status_replicas_unavailable gauge
kube_deployment_status_replicas_unavailable{namespace="inferchaos",deployment="vllm"} 1
kube_deployment_status_replicas_unavailable{namespace="team-b",deployment="vllm"} 1
# HELP kube_deployment_spec_replicas [STABLE] Number of desired pods for a deployment.
# TYPE kube_deployment_spec_replicas gauge
kube_deployment_spec_replicas{namespace="inferchaos",deployment="vllm"} 3
kube_deployment_spec_replicas{namespace="team-b",deployment="vllm"} 2
# HELP kube_node_labels [STABLE] Kubernetes labels converted to Prometheus labels.
# TYPE kube_node_labels gauge
kube_node_labels{node="inferchaos-control-plane"} 1
kube_node_labels{node="inferchaos-worker",label_inferchaos_io_pool="gpu"} 1
kube_node_labels{node="inferchaos-worker2",label_inferchaos_io_pool="gpu"} 1
# HELP kube_node_spec_unschedulable [STABLE] Whether a node can schedule new pods.
# TYPE kube_node_spec_unschedulable gauge
kube_node_spec_unschedulable{node="inferchaos-control-plane"} 0
kube_node_spec_unschedulable{node="inferchaos-worker"} 0
kube_node_spec_unschedulable{node="inferchaos-worker2"} 0
# HELP kube_node_status_condition [STABLE] The condition of a cluster node.
# TYPE kube_node_status_condition gauge
kube_node_status_condition{node="inferchaos-control-plane",condition="MemoryPressure",status="true"} 0
kube_node_status_condition{node="inferchaos-control-plane",condition="MemoryPressure",status="false"} 1
kube_node_status_condition{node="inferchaos-control-plane",condition="MemoryPressure",status="unknown"} 0
kube_node_status_condition{node="inferchaos-control-plane",condition="DiskPressure",status="true"} 0
kube_node_status_condition{node="inferchaos-control-plane",condition="DiskPressure",status="false"} 1
kube_node_status_condition{node="inferchaos-control-plane",condition="DiskPressure",status="unknown"} 0
kube_node_status_condition{node="inferchaos-control-plane",condition="PIDPressure",status="true"} 0
kube_node_status_condition{node="inferchaos-control-plane",condition="PIDPressure",status="false"} 1
kube_node_status_condition{node="inferchaos-control-plane",condition="PIDPressure",status="unknown"} 0
kube_node_status_condition{node="inferchaos-control-plane",condition="Ready",status="true"} 1
kube_node_status_condition{node="inferchaos-control-plane",condition="Ready",status="false"} 0
kube_node_status_condition{node="inferchaos-control-plane",condition="Ready",status="unknown"} 0
kube_node_status_condition{node="inferchaos-worker",condition="MemoryPressure",status="true"} 0
kube_node_status_condition{node="inferchaos-worker",condition="MemoryPressure",status="false"} 1
kube_node_status_condition{node="inferchaos-worker",condition="MemoryPressure",status="unknown"} 0
kube_node_status_condition{node="inferchaos-worker",condition="DiskPressure",status="true"} 0
kube_node_status_condition{node="inferchaos-worker",condition="DiskPressure",status="false"} 1
kube_node_status_condition{node="inferchaos-worker",condition="DiskPressure",status="unknown"} 0
kube_node_status_condition{node="inferchaos-worker",condition="PIDPressure",status="true"} 0
kube_node_status_condition{node="inferchaos-worker",condition="PIDPressure",status="false"} 1
kube_node_status_condition{node="inferchaos-worker",condition="PIDPressure",status="unknown"} 0
kube_node_status_condition{node="inferchaos-worker",condition="Ready",status="true"} 1
kube_node_status_condition{node="inferchaos-worker",condition="Ready",status="false"} 0
kube_node_status_condition{node="inferchaos-worker",condition="Ready",status="unknown"} 0
kube_node_status_condition{node="inferchaos-worker2",condition="MemoryPressure",status="true"} 0
kube_node_status_condition{node="inferchaos-worker2",condition="MemoryPressure",status="false"} 0
kube_node_status_condition{node="inferchaos-worker2",condition="MemoryPressure",status="unknown"} 1
kube_node_status_condition{node="inferchaos-worker2",condition="DiskPressure",status="true"} 0
kube_node_status_condition{node="inferchaos-worker2",condition="DiskPressure",status="false"} 0
kube_node_status_condition{node="inferchaos-worker2",condition="DiskPressure",status="unknown"} 1
kube_node_status_condition{node="inferchaos-worker2",condition="PIDPressure",status="true"} 0
kube_node_status_condition{node="inferchaos-worker2",condition="PIDPressure",status="false"} 0
kube_node_status_condition{node="inferchaos-worker2",condition="PIDPressure",status="unknown"} 1
kube_node_status_condition{node="inferchaos-worker2",condition="Ready",status="true"} 0
kube_node_status_condition{node="inferchaos-worker2",condition="Ready",status="false"} 0
kube_node_status_condition{node="inferchaos-worker2",condition="Ready",status="unknown"} 1
# HELP kube_pod_container_status_restarts_total [STABLE] The number of container restarts per container.
# TYPE kube_pod_container_status_restarts_total counter
kube_pod_container_status_restarts_total{namespace="inferchaos",pod="vllm-6d9c7b8f5-2xkqp",uid="0f7f6f8e-3b1d-4c53-9d55-1a7e2b9c4d01",container="vllm"} 1
kube_pod_container_status_restarts_total{namespace="inferchaos",pod="vllm-6d9c7b8f5-7hvzn",uid="5a1c2e9b-8f4d-4e0a-b6c7-2d3e4f5a6b02",container="vllm"} 0
kube_pod_container_status_restarts_total{namespace="inferchaos",pod="raycluster-inferchaos-head-x8z2k",uid="9c8b7a6d-5e4f-4a3b-8c2d-1e0f9a8b7c03",container="ray-head"} 0
kube_pod_container_status_restarts_total{namespace="team-b",pod="vllm-5f8d9c7b6-lm3np",uid="3e2d1c0b-9a8f-4e7d-a6c5-b4a3f2e1d004",container="vllm"} 0
kube_pod_container_status_restarts_total{namespace="kube-system",pod="coredns-668d6bf9bc-4xw7p",uid="7b6a5f4e-3d2c-4b1a-9f8e-d7c6b5a4f305",container="coredns"} 4
# HELP kube_pod_container_status_waiting_reason [STABLE] Describes the reason the container is currently in waiting state.
# TYPE kube_pod_container_status_waiting_reason gauge
kube_pod_container_status_waiting_reason{namespace="inferchaos",pod="raycluster-inferchaos-head-x8z2k",uid="9c8b7a6d-5e4f-4a3b-8c2d-1e0f9a8b7c03",container="ray-head",reason="ContainerCreating"} 1
# HELP kube_pod_status_phase [STABLE] The pods current phase.
# TYPE kube_pod_status_phase gauge
kube_pod_status_phase{namespace="inferchaos",pod="vllm-6d9c7b8f5-2xkqp",uid="0f7f6f8e-3b1d-4c53-9d55-1a7e2b9c4d01",phase="Pending"} 0
kube_pod_status_phase{namespace="inferchaos",pod="vllm-6d9c7b8f5-2xkqp",uid="0f7f6f8e-3b1d-4c53-9d55-1a7e2b9c4d01",phase="Succeeded"} 0
kube_pod_status_phase{namespace="inferchaos",pod="vllm-6d9c7b8f5-2xkqp",uid="0f7f6f8e-3b1d-4c53-9d55-1a7e2b9c4d01",phase="Failed"} 0
kube_pod_status_phase{namespace="inferchaos",pod="vllm-6d9c7b8f5-2xkqp",uid="0f7f6f8e-3b1d-4c53-9d55-1a7e2b9c4d01",phase="Unknown"} 0
kube_pod_status_phase{namespace="inferchaos",pod="vllm-6d9c7b8f5-2xkqp",uid="0f7f6f8e-3b1d-4c53-9d55-1a7e2b9c4d01",phase="Running"} 1
kube_pod_status_phase{namespace="inferchaos",pod="vllm-6d9c7b8f5-7hvzn",uid="5a1c2e9b-8f4d-4e0a-b6c7-2d3e4f5a6b02",phase="Pending"} 0
kube_pod_status_phase{namespace="inferchaos",pod="vllm-6d9c7b8f5-7hvzn",uid="5a1c2e9b-8f4d-4e0a-b6c7-2d3e4f5a6b02",phase="Succeeded"} 0
kube_pod_status_phase{namespace="inferchaos",pod="vllm-6d9c7b8f5-7hvzn",uid="5a1c2e9b-8f4d-4e0a-b6c7-2d3e4f5a6b02",phase="Failed"} 0
kube_pod_status_phase{namespace="inferchaos",pod="vllm-6d9c7b8f5-7hvzn",uid="5a1c2e9b-8f4d-4e0a-b6c7-2d3e4f5a6b02",phase="Unknown"} 0
kube_pod_status_phase{namespace="inferchaos",pod="vllm-6d9c7b8f5-7hvzn",uid="5a1c2e9b-8f4d-4e0a-b6c7-2d3e4f5a6b02",phase="Running"} 1
kube_pod_status_phase{namespace="inferchaos",pod="vllm-6d9c7b8f5-q4mtl",uid="c1d2e3f4-a5b6-4c7d-8e9f-0a1b2c3d4e06",phase="Pending"} 1
kube_pod_status_phase{namespace="inferchaos",pod="vllm-6d9c7b8f5-q4mtl",uid="c1d2e3f4-a5b6-4c7d-8e9f-0a1b2c3d4e06",phase="Succeeded"} 0
kube_pod_status_phase{namespace="inferchaos",pod="vllm-6d9c7b8f5-q4mtl",uid="c1d2e3f4-a5b6-4c7d-8e9f-0a1b2c3d4e06",phase="Failed"} 0
kube_pod_status_phase{namespace="inferchaos",pod="vllm-6d9c7b8f5-q4mtl",uid="c1d2e3f4-a5b6-4c7d-8e9f-0a1b2c3d4e06",phase="Unknown"} 0
kube_pod_status_phase{namespace="inferchaos",pod="vllm-6d9c7b8f5-q4mtl",uid="c1d2e3f4-a5b6-4c7d-8e9f-0a1b2c3d4e06",phase="Running"} 0
kube_pod_status_phase{namespace="inferchaos",pod="raycluster-inferchaos-head-x8z2k",uid="9c8b7a6d-5e4f-4a3b-8c2d-1e0f9a8b7c03",phase="Pending"} 1
kube_pod_status_phase{namespace="inferchaos",pod="raycluster-inferchaos-head-x8z2k",uid="9c8b7a6d-5e4f-4a3b-8c2d-1e0f9a8b7c03",phase="Succeeded"} 0
kube_pod_status_phase{namespace="inferchaos",pod="raycluster-inferchaos-head-x8z2k",uid="9c8b7a6d-5e4f-4a3b-8c2d-1e0f9a8b7c03",phase="Failed"} 0
kube_pod_status_phase{namespace="inferchaos",pod="raycluster-inferchaos-head-x8z2k",uid="9c8b7a6d-5e4f-4a3b-8c2d-1e0f9a8b7c03",phase="Unknown"} 0
kube_pod_status_phase{namespace="inferchaos",pod="raycluster-inferchaos-head-x8z2k",uid="9c8b7a6d-5e4f-4a3b-8c2d-1e0f9a8b7c03",phase="Running"} 0
kube_pod_status_phase{namespace="team-b",pod="vllm-5f8d9c7b6-lm3np",uid="3e2d1c0b-9a8f-4e7d-a6c5-b4a3f2e1d004",phase="Pending"} 0
kube_pod_status_phase{namespace="team-b",pod="vllm-5f8d9c7b6-lm3np",uid="3e2d1c0b-9a8f-4e7d-a6c5-b4a3f2e1d004",phase="Succeeded"} 0
kube_pod_status_phase{namespace="team-b",pod="vllm-5f8d9c7b6-lm3np",uid="3e2d1c0b-9a8f-4e7d-a6c5-b4a3f2e1d004",phase="Failed"} 0
kube_pod_status_phase{namespace="team-b",pod="vllm-5f8d9c7b6-lm3np",uid="3e2d1c0b-9a8f-4e7d-a6c5-b4a3f2e1d004",phase="Unknown"} 0
kube_pod_status_phase{namespace="team-b",pod="vllm-5f8d9c7b6-lm3np",uid="3e2d1c0b-9a8f-4e7d-a6c5-b4a3f2e1d004",phase="Running"} 1
kube_pod_status_phase{namespace="team-b",pod="vllm-5f8d9c7b6-zz9rt",uid="e5f4a3b2-c1d0-4e9f-8a7b-6c5d4e3f2a07",phase="Pending"} 1
kube_pod_status_phase{namespace="team-b",pod="vllm-5f8d9c7b6-zz9rt",uid="e5f4a3b2-c1d0-4e9f-8a7b-6c5d4e3f2a07",phase="Succeeded"} 0
kube_pod_status_phase{namespace="team-b",pod="vllm-5f8d9c7b6-zz9rt",uid="e5f4a3b2-c1d0-4e9f-8a7b-6c5d4e3f2a07",phase="Failed"} 0
kube_pod_status_phase{namespace="team-b",pod="vllm-5f8d9c7b6-zz9rt",uid="e5f4a3b2-c1d0-4e9f-8a7b-6c5d4e3f2a07",phase="Unknown"} 0
kube_pod_status_phase{namespace="team-b",pod="vllm-5f8d9c7b6-zz9rt",uid="e5f4a3b2-c1d0-4e9f-8a7b-6c5d4e3f2a07",phase="Running"} 0
kube_pod_status_phase{namespace="kube-system",pod="coredns-668d6bf9bc-4xw7p",uid="7b6a5f4e-3d2c-4b1a-9f8e-d7c6b5a4f305",phase="Pending"} 0
kube_pod_status_phase{namespace="kube-system",pod="coredns-668d6bf9bc-4xw7p",uid="7b6a5f4e-3d2c-4b1a-9f8e-d7c6b5a4f305",phase="Succeeded"} 0
kube_pod_status_phase{namespace="kube-system",pod="coredns-668d6bf9bc-4xw7p",uid="7b6a5f4e-3d2c-4b1a-9f8e-d7c6b5a4f305",phase="Failed"} 0
kube_pod_status_phase{namespace="kube-system",pod="coredns-668d6bf9bc-4xw7p",uid="7b6a5f4e-3d2c-4b1a-9f8e-d7c6b5a4f305",phase="Unknown"} 0
kube_pod_status_phase{namespace="kube-system",pod="coredns-668d6bf9bc-4xw7p",uid="7b6a5f4e-3d2c-4b1a-9f8e-d7c6b5a4f305",phase="Running"} 1
# HELP kube_pod_status_reason The pod status reasons
# TYPE kube_pod_status_reason gauge
# HELP kube_pod_status_scheduled [STABLE] Describes the status of the scheduling process for the pod.
# TYPE kube_pod_status_scheduled gauge
kube_pod_status_scheduled{namespace="inferchaos",pod="vllm-6d9c7b8f5-2xkqp",uid="0f7f6f8e-3b1d-4c53-9d55-1a7e2b9c4d01",condition="true"} 1
kube_pod_status_scheduled{namespace="inferchaos",pod="vllm-6d9c7b8f5-2xkqp",uid="0f7f6f8e-3b1d-4c53-9d55-1a7e2b9c4d01",condition="false"} 0
kube_pod_status_scheduled{namespace="inferchaos",pod="vllm-6d9c7b8f5-2xkqp",uid="0f7f6f8e-3b1d-4c53-9d55-1a7e2b9c4d01",condition="unknown"} 0
kube_pod_status_scheduled{namespace="inferchaos",pod="vllm-6d9c7b8f5-7hvzn",uid="5a1c2e9b-8f4d-4e0a-b6c7-2d3e4f5a6b02",condition="true"} 1
kube_pod_status_scheduled{namespace="inferchaos",pod="vllm-6d9c7b8f5-7hvzn",uid="5a1c2e9b-8f4d-4e0a-b6c7-2d3e4f5a6b02",condition="false"} 0
kube_pod_status_scheduled{namespace="inferchaos",pod="vllm-6d9c7b8f5-7hvzn",uid="5a1c2e9b-8f4d-4e0a-b6c7-2d3e4f5a6b02",condition="unknown"} 0
kube_pod_status_scheduled{namespace="inferchaos",pod="vllm-6d9c7b8f5-q4mtl",uid="c1d2e3f4-a5b6-4c7d-8e9f-0a1b2c3d4e06",condition="true"} 0
kube_pod_status_scheduled{namespace="inferchaos",pod="vllm-6d9c7b8f5-q4mtl",uid="c1d2e3f4-a5b6-4c7d-8e9f-0a1b2c3d4e06",condition="false"} 1
kube_pod_status_scheduled{namespace="inferchaos",pod="vllm-6d9c7b8f5-q4mtl",uid="c1d2e3f4-a5b6-4c7d-8e9f-0a1b2c3d4e06",condition="unknown"} 0
kube_pod_status_scheduled{namespace="inferchaos",pod="raycluster-inferchaos-head-x8z2k",uid="9c8b7a6d-5e4f-4a3b-8c2d-1e0f9a8b7c03",condition="true"} 1
kube_pod_status_scheduled{namespace="inferchaos",pod="raycluster-inferchaos-head-x8z2k",uid="9c8b7a6d-5e4f-4a3b-8c2d-1e0f9a8b7c03",condition="false"} 0
kube_pod_status_scheduled{namespace="inferchaos",pod="raycluster-inferchaos-head-x8z2k",uid="9c8b7a6d-5e4f-4a3b-8c2d-1e0f9a8b7c03",condition="unknown"} 0
kube_pod_status_scheduled{namespace="team-b",pod="vllm-5f8d9c7b6-lm3np",uid="3e2d1c0b-9a8f-4e7d-a6c5-b4a3f2e1d004",condition="true"} 1
kube_pod_status_scheduled{namespace="team-b",pod="vllm-5f8d9c7b6-lm3np",uid="3e2d1c0b-9a8f-4e7d-a6c5-b4a3f2e1d004",condition="false"} 0
kube_pod_status_scheduled{namespace="team-b",pod="vllm-5f8d9c7b6-lm3np",uid="3e2d1c0b-9a8f-4e7d-a6c5-b4a3f2e1d004",condition="unknown"} 0
kube_pod_status_scheduled{namespace="team-b",pod="vllm-5f8d9c7b6-zz9rt",uid="e5f4a3b2-c1d0-4e9f-8a7b-6c5d4e3f2a07",condition="true"} 0
kube_pod_status_scheduled{namespace="team-b",pod="vllm-5f8d9c7b6-zz9rt",uid="e5f4a3b2-c1d0-4e9f-8a7b-6c5d4e3f2a07",condition="false"} 1
kube_pod_status_scheduled{namespace="team-b",pod="vllm-5f8d9c7b6-zz9rt",uid="e5f4a3b2-c1d0-4e9f-8a7b-6c5d4e3f2a07",condition="unknown"} 0
kube_pod_status_scheduled{namespace="kube-system",pod="coredns-668d6bf9bc-4xw7p",uid="7b6a5f4e-3d2c-4b1a-9f8e-d7c6b5a4f305",condition="true"} 1
kube_pod_status_scheduled{namespace="kube-system",pod="coredns-668d6bf9bc-4xw7p",uid="7b6a5f4e-3d2c-4b1a-9f8e-d7c6b5a4f305",condition="false"} 0
kube_pod_status_scheduled{namespace="kube-system",pod="coredns-668d6bf9bc-4xw7p",uid="7b6a5f4e-3d2c-4b1a-9f8e-d7c6b5a4f305",condition="unknown"} 0
# HELP kube_pod_status_unschedulable [STABLE] Describes the unschedulable status for the pod.
# TYPE kube_pod_status_unschedulable gauge
kube_pod_status_unschedulable{namespace="inferchaos",pod="vllm-6d9c7b8f5-q4mtl",uid="c1d2e3f4-a5b6-4c7d-8e9f-0a1b2c3d4e06"} 1
kube_pod_status_unschedulable{namespace="team-b",pod="vllm-5f8d9c7b6-zz9rt",uid="e5f4a3b2-c1d0-4e9f-8a7b-6c5d4e3f2a07"} 1
"""

# Another cluster's kube-state-metrics in the same Prometheus: its own nodes, all Ready, and a
# vllm Deployment in a namespace of the same name whose readings must not mix with ours.
OTHER_CLUSTER = """\
# HELP kube_deployment_status_replicas_ready [STABLE] The number of ready replicas per deployment.
# TYPE kube_deployment_status_replicas_ready gauge
kube_deployment_status_replicas_ready{namespace="inferchaos",deployment="vllm"} 8
# HELP kube_deployment_status_replicas_available [STABLE] The number of available replicas per deployment.
# TYPE kube_deployment_status_replicas_available gauge
kube_deployment_status_replicas_available{namespace="inferchaos",deployment="vllm"} 8
# HELP kube_node_spec_unschedulable [STABLE] Whether a node can schedule new pods.
# TYPE kube_node_spec_unschedulable gauge
kube_node_spec_unschedulable{node="gpu-b-1"} 0
kube_node_spec_unschedulable{node="gpu-b-2"} 0
# HELP kube_node_status_condition [STABLE] The condition of a cluster node.
# TYPE kube_node_status_condition gauge
kube_node_status_condition{node="gpu-b-1",condition="Ready",status="true"} 1
kube_node_status_condition{node="gpu-b-1",condition="Ready",status="false"} 0
kube_node_status_condition{node="gpu-b-1",condition="Ready",status="unknown"} 0
kube_node_status_condition{node="gpu-b-2",condition="Ready",status="true"} 1
kube_node_status_condition{node="gpu-b-2",condition="Ready",status="false"} 0
kube_node_status_condition{node="gpu-b-2",condition="Ready",status="unknown"} 0
"""


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a real Prometheus scraping the stand-in for kube-state-metrics each second,
    once for the module: every test reads the same unchanging cluster. As kube-prometheus-stack
    scrapes kube-state-metrics, its namespace and pod labels are the objects' (honor_labels),
    not the target's."""
    pages = {"/metrics": KUBE_STATE_METRICS, "/other/metrics": OTHER_CLUSTER}
    jobs = {JOB: Job("/metrics", honor_labels=True), OTHER_JOB: Job("/other/metrics", honor_labels=True)}
    with prometheus_scraping(tmp_path_factory.mktemp("kube-state"), pages, jobs) as scraping:
        url = scraping.url
        # Both targets scraped, every family of ours in: the first scrape lands within a second.
        both = wait_until(
            lambda: (
                len(query(url, "up == 1")) == 2
                and len(query(url, f'count by (job) (kube_node_status_condition{{job="{JOB}"}})')) == 1
                and len(query(url, 'count by (job) ({__name__=~"kube_.+"})')) == 2
            ),
            30.0,
            0.5,
        )
        assert both is not None, f"targets not scraped: {query(url, 'up')}"
        yield url


def _values(samples: list[Sample]) -> dict[str, float]:
    return {f"{s.probe}{{{s.label_text()}}}" if s.labels else s.probe: s.value for s in samples}


async def _read(url: str, selector: PromKubeSelector) -> dict[str, float]:
    probe = PrometheusK8sProbe(url, selector, timeout_s=5.0)
    try:
        return _values(await probe.read())
    finally:
        await probe.aclose()


async def test_the_promql_probe_reads_the_cluster_kube_state_metrics_describes(scraped: str) -> None:
    values = await _read(scraped, PromKubeSelector(NS, f'job="{JOB}"'))
    assert values == {
        # Three nodes, inferchaos-worker2 NotReady; none cordoned.
        "k8s.nodes_ready": 2.0,
        "k8s.nodes_schedulable": 2.0,
        # vllm: 3 desired, 2 ready; team-b's vllm is not this namespace's.
        "k8s.deployment_ready_replicas{deployment=vllm}": 2.0,
        "k8s.deployment_available_replicas{deployment=vllm}": 2.0,
        # The refused vllm Pod and the Ray head creating its container; team-b's refused Pod
        # is not counted.
        "k8s.pods_pending{namespace=inferchaos}": 2.0,
        "k8s.pods_unschedulable{namespace=inferchaos;reason=Unschedulable}": 1.0,
        "k8s.pod_restarts{pod=raycluster-inferchaos-head-x8z2k}": 0.0,
        "k8s.pod_restarts{pod=vllm-6d9c7b8f5-2xkqp}": 1.0,
        "k8s.pod_restarts{pod=vllm-6d9c7b8f5-7hvzn}": 0.0,
        # Not scheduled, so no container status and no restart series: 0, as the API says.
        "k8s.pod_restarts{pod=vllm-6d9c7b8f5-q4mtl}": 0.0,
    }


async def test_another_namespace_reads_only_its_own_objects(scraped: str) -> None:
    values = await _read(scraped, PromKubeSelector("team-b", f'job="{JOB}"'))
    assert values["k8s.deployment_ready_replicas{deployment=vllm}"] == 1.0
    assert values["k8s.pods_pending{namespace=team-b}"] == 1.0
    assert values["k8s.pods_unschedulable{namespace=team-b;reason=Unschedulable}"] == 1.0
    assert {k for k in values if k.startswith("k8s.pod_restarts")} == {
        "k8s.pod_restarts{pod=vllm-5f8d9c7b6-lm3np}",
        "k8s.pod_restarts{pod=vllm-5f8d9c7b6-zz9rt}",
    }


async def test_the_node_selector_counts_only_the_pool_through_kube_node_labels(scraped: str) -> None:
    values = await _read(scraped, PromKubeSelector(NS, f'job="{JOB}"', "inferchaos.io/pool=gpu"))
    # The two GPU workers, one of them NotReady; the control plane is not in the pool.
    assert values["k8s.nodes_ready"] == 1.0 and values["k8s.nodes_schedulable"] == 1.0
    # A set-based selector: its values are regex-escaped ('-' and '.') for Prometheus' RE2.
    selector = PromKubeSelector(NS, f'job="{JOB}"', "inferchaos.io/pool in (gpu, cpu-pool.a)")
    assert (await _read(scraped, selector))["k8s.nodes_ready"] == 1.0
    values = await _read(scraped, PromKubeSelector(NS, f'job="{JOB}"', "!inferchaos.io/pool"))
    assert values["k8s.nodes_ready"] == 1.0  # the control plane alone


async def test_kube_matchers_keep_another_clusters_kube_state_metrics_out(scraped: str) -> None:
    # Without them the other cluster's two Ready nodes and its vllm Deployment (8 ready) mix in.
    mixed = await _read(scraped, PromKubeSelector(NS))
    assert mixed["k8s.nodes_ready"] == 4.0
    assert mixed["k8s.deployment_ready_replicas{deployment=vllm}"] == 8.0
    ours = await _read(scraped, PromKubeSelector(NS, f'job="{JOB}"'))
    assert ours["k8s.nodes_ready"] == 2.0
    assert ours["k8s.deployment_ready_replicas{deployment=vllm}"] == 2.0
