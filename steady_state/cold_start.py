"""How long the platform's own replicas take to start: the yardstick of a recovery that must start one.

A recovery that starts a replica again (a node lost, an engine dead, a device squatted) cannot
be faster than a cold start, and a cold start differs by an order of magnitude between a tiny
model on 2 shared cores (55-90 s measured) and a large one on a GPU cluster (minutes). A
recovery window written as a number of cold starts (``recovery.within_cold_starts``) means the
same on both; this probe reads the cold start it multiplies.

``vllm.cold_start_s{replica}`` is the replica's last completed start-up, from its vLLM server's
spawn to healthy and warmed up, as the replica published it (primitives/replica_slots.py). A
replica still starting, failed or stopped has no reading.
"""

from __future__ import annotations

from collections.abc import Callable

from inferchaos.errors import EnvironmentNotUp, ProbeError
from inferchaos.layers import Layer
from inferchaos.primitives.replica_slots import ReplicaRecord
from inferchaos.steady_state.catalog import COLD_START
from inferchaos.steady_state.probe_base import Sample


class ColdStartProbe:
    """Each replica's last cold start, from the records the replicas publish."""

    name = "vllm@cold_start"
    layer = Layer.VLLM

    def __init__(self, records: Callable[[], list[ReplicaRecord]]) -> None:
        self._records = records

    async def read(self) -> list[Sample]:
        """One ``vllm.cold_start_s`` per replica that is serving; ProbeError when nothing can be read."""
        try:
            records = self._records()
        except EnvironmentNotUp as e:
            raise ProbeError(f"cannot read the replicas' records: {e}") from e
        return [
            Sample(COLD_START, r.ready_at - r.started_at, {"replica": r.name})
            for r in records
            if r.state == "healthy" and r.ready_at is not None and r.ready_at >= r.started_at
        ]
