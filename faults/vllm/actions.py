"""vLLM-layer faults as Chaos Toolkit actions (python providers of ``faults.vllm.actions``)."""

from __future__ import annotations

from typing import Any

from inferchaos.faults.actions import Configuration, Secrets, inject_action, rollback_action

FAULT_OF = {"flood_kv_cache": "flood_kv_cache", "kill_engine": "kill_engine"}


def flood_kv_cache(
    target: str = "front_door",
    concurrency: int | None = None,
    rate_per_s: float = 0.0,
    duration_s: float | None = None,
    prompt_fraction: float = 0.7,
    max_concurrency: int = 64,
    configuration: Configuration = None,
    secrets: Secrets = None,
) -> dict[str, Any]:
    """Keep long-context streaming completions open until the KV cache is full (sized automatically)."""
    params = {"target": target, "concurrency": concurrency, "rate_per_s": rate_per_s, "duration_s": duration_s,
              "prompt_fraction": prompt_fraction, "max_concurrency": max_concurrency}  # fmt: skip
    return inject_action("flood_kv_cache", params, configuration)


def rollback_flood_kv_cache(configuration: Configuration = None, secrets: Secrets = None) -> list[str]:
    """Close every flood connection (vLLM aborts the requests) and wait for the queue to drain."""
    return rollback_action("flood_kv_cache", configuration)


def kill_engine(
    replica: str | int = 0,
    allow_total_outage: bool = False,
    configuration: Configuration = None,
    secrets: Secrets = None,
) -> dict[str, Any]:
    """SIGKILL one replica's EngineCore process."""
    return inject_action(
        "kill_engine", {"replica": replica, "allow_total_outage": allow_total_outage}, configuration
    )


def rollback_kill_engine(configuration: Configuration = None, secrets: Secrets = None) -> list[str]:
    """Make sure Serve replaces every replica whose engine was killed."""
    return rollback_action("kill_engine", configuration)
