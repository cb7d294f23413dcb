"""Steady-state probes for Chaos Toolkit's own hypothesis, so `chaos run` checks the platform too.

The inferchaos runner samples far more than this (every layer, every second); these keep a
plain `chaos run` of an experiment file honest about the basics.
"""

from __future__ import annotations

from typing import Any

from inferchaos.ctk import fault_adapter
from inferchaos.ctk.fault_adapter import Configuration, Secrets, open_local_environment
from inferchaos.primitives.openai_stream import stream_completion

# What Chaos Toolkit's discovery lists (inferchaos/ctk/discovery.py).
__all__ = ["environment_status", "fault_effect", "front_door_serves", "healthy_replicas"]


def front_door_serves(configuration: Configuration = None, secrets: Secrets = None) -> bool:
    """True when a short streamed completion comes back through the front door."""
    status = open_local_environment(configuration).status()
    return stream_completion(status.front_door.url, status.model.name, "ping", max_tokens=4, timeout_s=30).ok


def healthy_replicas(configuration: Configuration = None, secrets: Secrets = None) -> int:
    """How many vLLM replicas answer /health with 200."""
    return sum(1 for r in open_local_environment(configuration).status().vllm.replicas if r.healthy)


def environment_status(configuration: Configuration = None, secrets: Secrets = None) -> dict[str, Any]:
    """The environment's status document (as `inferchaos env status --json` prints it)."""
    return dict(open_local_environment(configuration).status().to_dict())


def fault_effect(fault: str, configuration: Configuration = None, secrets: Secrets = None) -> dict[str, Any]:
    """Evidence of every live injection of ``fault`` (``<layer>.<verb>``): did it bite, and how (for the journal)."""
    return fault_adapter.fault_effect(fault, configuration, secrets)
