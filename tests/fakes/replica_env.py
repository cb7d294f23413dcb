"""An environment that offers only its replica records, for the faults that act on a replica's processes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from inferchaos.primitives.replica_slots import ReplicaRecord
from tests.fakes.gpu import replica_record


@dataclass
class FakeReplicaEnv:
    """Satisfies RayProcessEnvironment; every member but ``name`` and ``replica_records`` refuses to be used."""

    records: list[ReplicaRecord] = field(default_factory=list)
    # Not "local": `inferchaos cleanup` drops an entry of a local environment that is down
    # without reverting it, and these tests want the revert.
    name: str = "fake-local"

    @classmethod
    def around(cls, server_pid: int, url: str, others: tuple[str, ...] = ("healthy",)) -> FakeReplicaEnv:
        """replica-0 served by the process ``server_pid`` at ``url``, then one replica per state in ``others``."""
        port = int(url.rsplit(":", 1)[1])
        first = replica_record(0, vllm_pid=server_pid, url=url, metrics_url=f"{url}/metrics", port=port)
        return cls([first, *(replica_record(i + 1, state=s) for i, s in enumerate(others))])

    def replica_records(self) -> list[ReplicaRecord]:
        return list(self.records)

    def load_state(self) -> Any:
        raise AssertionError("this fault needs only the replica records")

    def connect_ray(self) -> None:
        raise AssertionError("this fault needs only the replica records")

    def ray_nodes(self) -> list[Any]:
        raise AssertionError("this fault needs only the replica records")

    def add_worker(self) -> Any:
        raise AssertionError("this fault needs only the replica records")

    def mark_node_lost(self, name: str) -> None:
        raise AssertionError("this fault needs only the replica records")
