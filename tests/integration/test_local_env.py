"""The embedded local environment is made of real, reachable parts."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from inferchaos.environments.local.config import LocalEnvConfig
from inferchaos.environments.local.env import LocalEnvironment
from inferchaos.primitives.openai_stream import stream_completion

pytestmark = pytest.mark.integration


def test_status_shows_head_and_workers_alive_with_logical_gpus(
    local_env: LocalEnvironment, env_config: LocalEnvConfig
) -> None:
    status = local_env.status()
    alive = status.ray.alive_nodes
    assert len(alive) == env_config.workers + 1
    heads = [n for n in alive if n.is_head]
    workers = [n for n in alive if not n.is_head]
    assert len(heads) == 1 and heads[0].gpus == 0
    assert sorted(n.gpus for n in workers) == [env_config.gpus_per_worker] * env_config.workers


def test_each_replica_is_healthy_on_its_own_worker(
    local_env: LocalEnvironment, env_config: LocalEnvConfig
) -> None:
    status = local_env.status()
    replicas = status.vllm.replicas
    assert len(replicas) == env_config.replicas
    worker_ids = {n.node_id for n in status.ray.alive_nodes if not n.is_head}
    assert {r.node_id for r in replicas} <= worker_ids
    assert len({r.node_id for r in replicas}) == len(replicas), "one replica per worker node"
    for replica in replicas:
        assert httpx.get(f"{replica.url}/health", timeout=5).status_code == 200


def test_completion_streams_through_the_front_door(local_env: LocalEnvironment) -> None:
    status = local_env.status()
    # The tiny generated model may sample end-of-text first: one chunk with no text, which
    # says nothing of the front door. Ignoring it, every answer streams its 12 tokens.
    result = stream_completion(
        status.front_door.url, status.model.name, "The platform is", max_tokens=12, extra={"ignore_eos": True}
    )
    assert result.ok, result.error
    assert result.chunks >= 2, "the front door must stream chunk by chunk, not buffer the answer"
    assert result.ttft_s is not None and 0 < result.ttft_s < result.e2e_s
    assert result.replica.startswith("replica-")
    # The server behind the name: a replica Serve replaced answers from another one.
    servers = {r.name: str(r.vllm_pid) for r in local_env.replica_records()}
    assert result.server == servers[result.replica]


def test_every_replica_exports_kv_cache_usage(local_env: LocalEnvironment) -> None:
    for replica in local_env.status().vllm.replicas:
        text = httpx.get(replica.metrics_url, timeout=5).text
        names = {family.name for family in text_string_to_metric_families(text)}
        assert "vllm:kv_cache_usage_perc" in names


def test_status_json_has_the_documented_keys(local_env: LocalEnvironment) -> None:
    data = local_env.status().to_dict()
    assert data["ray"]["address"]
    assert {"node_id", "alive", "is_head", "gpus"} <= set(data["ray"]["nodes"][0])
    assert {"name", "url", "metrics_url", "node_id", "healthy"} <= set(data["vllm"]["replicas"][0])
    assert data["front_door"]["url"].startswith("http://127.0.0.1:")
    assert data["model"]["name"] and data["model"]["max_model_len"] == 2048
    # The progress-aware health check is the default, and status says which one is in force.
    assert data["vllm"]["health_check"] == "progress"
