"""What an environment can do, as small Protocols that faults and probes are typed against.

Faults and probes sit beside the environments, not above them (README "Architecture"): they
never import an environment class, only these Protocols, which every environment that has
the capability satisfies structurally.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from inferchaos.primitives.ray_nodes import RayNodeRecord


class RecordedLocalState(Protocol):
    """What faults and probes read from the state record of an embedded local environment."""

    @property
    def env_id(self) -> str: ...

    @property
    def nodes(self) -> list[RayNodeRecord]: ...

    @property
    def replicas_dir(self) -> Path: ...

    @property
    def replica_slots(self) -> range: ...
