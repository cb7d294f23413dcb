"""The Kubernetes client, its allow-list and the scheduler's messages, for the k8s faults, probe and environments."""
