"""vllm.cold_start_s: each serving replica's last start-up, read from the records replicas publish."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from inferchaos.errors import EnvironmentNotUp, ProbeError
from inferchaos.primitives.replica_slots import ReplicaRecord, read_records
from inferchaos.steady_state.cold_start import ColdStartProbe
from tests.fakes.gpu import replica_record


def test_each_serving_replica_reads_its_last_start_up(tmp_path: Path) -> None:
    records = [
        replica_record(0, started_at=1000.0, ready_at=1087.5),
        # Still starting, failed during start-up, stopped: none has a cold start to read.
        replica_record(1, state="starting", started_at=1100.0),
        replica_record(2, state="failed", started_at=1100.0, failed_at=1110.0),
        replica_record(3, state="stopped", started_at=900.0, ready_at=950.0),
    ]
    for record in records:
        record.save(tmp_path)
    samples = asyncio.run(ColdStartProbe(lambda: read_records(tmp_path)).read())
    assert [(s.probe, s.value, s.labels) for s in samples] == [
        ("vllm.cold_start_s", 87.5, {"replica": "replica-0"})
    ]
    assert samples[0].layer == "vllm"


def test_an_environment_that_is_down_is_a_failed_read() -> None:
    def down() -> list[ReplicaRecord]:
        raise EnvironmentNotUp("no local environment is up")

    with pytest.raises(ProbeError, match="cannot read the replicas' records: no local environment is up"):
        asyncio.run(ColdStartProbe(down).read())
