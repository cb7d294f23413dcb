"""The kind environment: a local Kubernetes cluster (1 control plane, 3 workers with fake GPUs),
KubeRay and vLLM CPU replicas. ``up.sh`` brings it up; the game-day workflow runs it in CI."""
