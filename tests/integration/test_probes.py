"""The probes read the real environment correctly."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from inferchaos.environments.local.config import LocalEnvConfig
from inferchaos.environments.local.env import LocalEnvironment
from inferchaos.steady_state.canary import CanaryConfig, CanaryProbe
from inferchaos.steady_state.probe_base import Sample
from inferchaos.steady_state.ray import RayProbe
from inferchaos.steady_state.serve import ServeProbe
from inferchaos.steady_state.vllm import VllmProbe

pytestmark = pytest.mark.integration


def _by_name(samples: list) -> dict[str, float]:
    return {s.probe: s.value for s in samples}


def test_vllm_probe_counts_exactly_the_prompt_tokens_sent(local_env: LocalEnvironment) -> None:
    replica = next(r for r in local_env.status().vllm.replicas if r.name == "replica-0")
    tokens = httpx.post(
        f"{replica.url}/tokenize", json={"model": "tiny-llama", "prompt": "count these tokens exactly"}
    ).json()
    per_request, requests = int(tokens["count"]), 7
    probe = VllmProbe(replica.name, replica.metrics_url, f"{replica.url}/health")

    async def measure() -> tuple[float, float]:
        before = _by_name(await probe.read())["vllm.prompt_tokens_total"]
        async with httpx.AsyncClient(timeout=30) as client:
            for _ in range(requests):
                # Straight to the replica: the front door would spread them over both.
                response = await client.post(
                    f"{replica.url}/v1/completions",
                    json={"model": "tiny-llama", "prompt": "count these tokens exactly", "max_tokens": 1},
                )
                response.raise_for_status()
        after = _by_name(await probe.read())["vllm.prompt_tokens_total"]
        await probe.aclose()
        return before, after

    before, after = asyncio.run(measure())
    # The canary of other tests may also hit this replica, but only through the front door,
    # which these tests do not run concurrently.
    assert after - before == per_request * requests


def test_canary_ttft_is_positive_and_below_e2e(local_env: LocalEnvironment) -> None:
    status = local_env.status()
    canary = CanaryProbe(
        CanaryConfig(base_url=status.front_door.url, model=status.model.name, rate_per_s=4.0)
    )

    async def sample() -> list:
        await canary.start()
        await asyncio.sleep(3)
        await canary.stop()
        return await canary.read()

    samples = asyncio.run(sample())
    successes = [s.value for s in samples if s.probe == "canary.success"]
    ttfts = [s.value for s in samples if s.probe == "canary.ttft_s"]
    e2es = [s.value for s in samples if s.probe == "canary.e2e_s"]
    assert successes and all(v == 1.0 for v in successes)
    assert ttfts and all(t > 0 for t in ttfts)
    assert len(ttfts) == len(e2es) and all(t < e for t, e in zip(ttfts, e2es, strict=True))


def test_ray_probe_counts_the_nodes_and_logical_gpus(
    local_env: LocalEnvironment, env_config: LocalEnvConfig
) -> None:
    probe = RayProbe(local_env.load_state().dashboard_url, local_env.connect_ray)
    values = _by_name(asyncio.run(probe.read()))
    assert values["ray.nodes_alive"] == env_config.workers + 1
    assert values["ray.gpus_total"] == env_config.workers * env_config.gpus_per_worker
    # Each replica holds one logical GPU.
    assert (
        values["ray.gpus_available"] == env_config.workers * env_config.gpus_per_worker - env_config.replicas
    )


def test_serve_probe_reads_every_replica_running_from_the_real_dashboard(
    local_env: LocalEnvironment, env_config: LocalEnvConfig
) -> None:
    state = local_env.load_state()

    async def read() -> list[Sample]:
        probe = ServeProbe(state.dashboard_url, state.read_token)
        try:
            return await probe.read()
        finally:
            await probe.aclose()

    samples = asyncio.run(read())
    running = [s for s in samples if s.probe == "ray.serve_replicas" and s.labels["state"] == "RUNNING"]
    assert [(s.labels["app"], s.labels["deployment"], s.value) for s in running] == [
        ("inferchaos", "vllm", float(env_config.replicas))
    ]
    per_replica = [s for s in samples if s.probe == "ray.serve_replica"]
    assert len(per_replica) == env_config.replicas and all(s.value == 1.0 for s in per_replica)
