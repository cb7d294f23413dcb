"""The Serve probe's reading of Serve's REST API document, and a dashboard that does not answer.

The documents are built with Ray's own schema classes (ray.serve.schema.ServeInstanceDetails,
ReplicaDetails), so a renamed field in Ray shows up here rather than on a game day. The probe
reads the real dashboard in tests/integration/test_probes.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from ray.serve._private.common import ReplicaState
from ray.serve.schema import ReplicaDetails, ServeInstanceDetails

from inferchaos.errors import ProbeError
from inferchaos.steady_state.catalog import KNOWN_PROBES
from inferchaos.steady_state.serve import ServeProbe, serve_samples


def replica(replica_id: str, state: ReplicaState) -> dict[str, Any]:
    entry = ReplicaDetails(
        replica_id=replica_id, state=state, start_time_s=1.0, actor_id=f"actor-{replica_id}"
    )
    return entry.model_dump(mode="json")


def serving(*replicas: dict[str, Any]) -> dict[str, Any]:
    details = ServeInstanceDetails.get_empty_schema_dict()
    details["applications"] = {
        "default": {
            "name": "default",
            "status": "RUNNING",
            "deployments": {"Replica": {"replicas": list(replicas)}},
        }
    }
    return details


def test_counts_replicas_per_state_and_names_each_replica() -> None:
    samples = serve_samples(
        serving(replica("abc", ReplicaState.RUNNING), replica("xyz", ReplicaState.STARTING))
    )
    where = {"app": "default", "deployment": "Replica"}
    assert {(s.probe, tuple(sorted(s.labels.items())), s.value) for s in samples} == {
        ("ray.serve_replica", tuple(sorted({**where, "replica": "abc", "state": "RUNNING"}.items())), 1.0),
        ("ray.serve_replica", tuple(sorted({**where, "replica": "xyz", "state": "STARTING"}.items())), 0.0),
        ("ray.serve_replicas", tuple(sorted({**where, "state": "RUNNING"}.items())), 1.0),
        ("ray.serve_replicas", tuple(sorted({**where, "state": "STARTING"}.items())), 1.0),
    }
    assert {s.probe for s in samples} <= KNOWN_PROBES


def test_a_deployment_with_no_running_replica_reads_zero_running() -> None:
    samples = serve_samples(serving(replica("abc", ReplicaState.STOPPING)))
    running = [s for s in samples if s.probe == "ray.serve_replicas" and s.labels["state"] == "RUNNING"]
    assert [s.value for s in running] == [0.0]


def test_no_serve_application_reads_nothing() -> None:
    assert serve_samples(ServeInstanceDetails.get_empty_schema_dict()) == []


def test_an_unexpected_document_is_a_probe_error() -> None:
    with pytest.raises(ProbeError, match="without id or state"):
        serve_samples({"applications": {"default": {"deployments": {"Replica": {"replicas": [{}]}}}}})


async def test_nothing_listening_is_a_probe_error(refused_url: str) -> None:
    probe = ServeProbe(refused_url, lambda: "")
    try:
        with pytest.raises(ProbeError, match="failed"):
            await probe.read()
    finally:
        await probe.aclose()
