"""Names of Ray 2.60's own Prometheus metrics that both the PromQL probe and the alerting rules
read about the cluster's nodes (https://docs.ray.io/en/latest/ray-observability/reference/
system-metrics.html; these two are not on that page, read off a running cluster)."""

from __future__ import annotations

# Each raylet's count of the nodes in its view of the cluster, which the GCS keeps in sync.
NODE_VIEW = "ray_local_resource_view_node_count"
# The GCS's count of nodes it declared dead. Like every Ray counter, absent until its first
# increment.
NODE_FAILURES = "ray_node_failure_total"
# The monitor's count of active nodes per node type. Without an autoscaler (the local
# environment, KubeRay without one) every node is its own type, and a lost node's gauge keeps
# its last 1: it says the cluster is there, never how many nodes it has.
ACTIVE_NODES = "ray_cluster_active_nodes"
