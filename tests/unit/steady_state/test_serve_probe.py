"""ServeProbe against an in-process fake dashboard answering Serve's REST API.

The replica entries are built with Ray's own schema classes (ray.serve.schema.ReplicaDetails),
so a renamed field in Ray shows up here rather than on a game day.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from ray.serve._private.common import ReplicaState
from ray.serve.schema import ReplicaDetails, ServeInstanceDetails

from inferchaos.errors import ProbeError
from inferchaos.steady_state.catalog import KNOWN_PROBES
from inferchaos.steady_state.serve import ServeProbe

TOKEN = "s3cret"


@dataclass
class FakeDashboard:
    details: dict[str, Any] = field(default_factory=ServeInstanceDetails.get_empty_schema_dict)
    status: int = 200
    authorizations: list[str] = field(default_factory=list)
    url: str = ""


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


@pytest.fixture
async def dashboard() -> AsyncIterator[FakeDashboard]:
    state = FakeDashboard()

    async def applications(request: web.Request) -> web.Response:
        state.authorizations.append(request.headers.get("Authorization", ""))
        return web.json_response(state.details, status=state.status)

    app = web.Application()
    app.router.add_get("/api/serve/applications/", applications)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    state.url = str(server.make_url("")).rstrip("/")
    try:
        yield state
    finally:
        await server.close()


@pytest.fixture
async def probe(dashboard: FakeDashboard) -> AsyncIterator[ServeProbe]:
    p = ServeProbe(dashboard.url, lambda: TOKEN)
    yield p
    await p.aclose()


async def test_counts_replicas_per_state_and_names_each_replica(
    dashboard: FakeDashboard, probe: ServeProbe
) -> None:
    dashboard.details = serving(replica("abc", ReplicaState.RUNNING), replica("xyz", ReplicaState.STARTING))
    samples = await probe.read()
    where = {"app": "default", "deployment": "Replica"}
    assert {(s.probe, tuple(sorted(s.labels.items())), s.value) for s in samples} == {
        ("ray.serve_replica", tuple(sorted({**where, "replica": "abc", "state": "RUNNING"}.items())), 1.0),
        ("ray.serve_replica", tuple(sorted({**where, "replica": "xyz", "state": "STARTING"}.items())), 0.0),
        ("ray.serve_replicas", tuple(sorted({**where, "state": "RUNNING"}.items())), 1.0),
        ("ray.serve_replicas", tuple(sorted({**where, "state": "STARTING"}.items())), 1.0),
    }
    assert {s.probe for s in samples} <= KNOWN_PROBES
    assert dashboard.authorizations == [f"Bearer {TOKEN}"]


async def test_a_deployment_with_no_running_replica_reads_zero_running(
    dashboard: FakeDashboard, probe: ServeProbe
) -> None:
    dashboard.details = serving(replica("abc", ReplicaState.STOPPING))
    running = [
        s for s in await probe.read() if s.probe == "ray.serve_replicas" and s.labels["state"] == "RUNNING"
    ]
    assert [s.value for s in running] == [0.0]


async def test_no_serve_application_reads_nothing(probe: ServeProbe) -> None:
    assert await probe.read() == []


async def test_a_dashboard_error_is_a_probe_error(dashboard: FakeDashboard, probe: ServeProbe) -> None:
    dashboard.status = 503
    with pytest.raises(ProbeError, match="HTTP 503"):
        await probe.read()


async def test_an_unexpected_document_is_a_probe_error(dashboard: FakeDashboard, probe: ServeProbe) -> None:
    dashboard.details = {"applications": {"default": {"deployments": {"Replica": {"replicas": [{}]}}}}}
    with pytest.raises(ProbeError, match="without id or state"):
        await probe.read()


async def test_nothing_listening_is_a_probe_error(refused_url: str) -> None:
    probe = ServeProbe(refused_url, lambda: "")
    try:
        with pytest.raises(ProbeError, match="failed"):
            await probe.read()
    finally:
        await probe.aclose()
