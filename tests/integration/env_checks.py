"""What the integration tests ask of the live environment, in one place."""

from __future__ import annotations

import httpx

from inferchaos.environments.local.env import LocalEnvironment


def healthy_replica_names(env: LocalEnvironment) -> set[str]:
    """Replicas that published "healthy" and whose own vLLM answers /health with 200 now."""
    healthy = set()
    for record in env.replica_records():
        try:
            if record.state == "healthy" and httpx.get(f"{record.url}/health", timeout=2).status_code == 200:
                healthy.add(record.name)
        except httpx.HTTPError:
            continue
    return healthy


def free_gpus(env: LocalEnvironment) -> float:
    """Logical GPUs free now, per the GCS."""
    import ray

    env.connect_ray()
    return float(ray.available_resources().get("GPU", 0.0))
