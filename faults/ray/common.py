"""The base of faults that act on the embedded local environment's processes, and their shared reads."""

from __future__ import annotations

from typing import Any, TypeVar

from inferchaos.faults.base import TypedFault, require_capability
from inferchaos.primitives.capabilities import RayProcessEnvironment

P = TypeVar("P")


class LocalProcessFault(TypedFault[P, RayProcessEnvironment]):
    """A fault that kills or starts processes, so it needs the embedded environment's process records."""

    def _open(self, env: Any) -> RayProcessEnvironment:
        return require_capability(
            self.name,
            env,
            RayProcessEnvironment,
            "the embedded local environment only (it needs its process records)",
        )


def free_gpus(env: RayProcessEnvironment) -> float:
    """Logical GPUs free right now, per the GCS."""
    import ray

    env.connect_ray()
    return float(ray.available_resources().get("GPU", 0.0))
