"""The base of faults that act on the embedded local environment's processes, and their shared reads."""

from __future__ import annotations

from typing import TypeVar

from inferchaos.faults.base import TypedFault, capability_error
from inferchaos.primitives.capabilities import RayProcessEnvironment

P = TypeVar("P")


class LocalProcessFault(TypedFault[P, RayProcessEnvironment]):
    """A fault that kills or starts processes, so it needs the embedded environment's process records."""

    def _open(self, env: object) -> RayProcessEnvironment:
        if not isinstance(env, RayProcessEnvironment):
            raise capability_error(
                self.name,
                env,
                "the embedded local environment only (it needs its process records)",
            )
        return env


def free_gpus(env: RayProcessEnvironment) -> float:
    """Logical GPUs free right now, per the GCS."""
    import ray

    env.connect_ray()
    return float(ray.available_resources().get("GPU", 0.0))
