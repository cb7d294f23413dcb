"""Serve replica state, read from Ray's dashboard: what Ray Serve itself says of its replicas.

The dashboard's Serve REST API, ``GET <dashboard>/api/serve/applications/``, answers Serve's
``ServeInstanceDetails`` (ray/serve/schema.py): ``applications.<app>.deployments.<name>``
lists each live replica (``ReplicaDetails``) with its ``replica_id``, ``actor_id`` and
``state`` (``ray.serve._private.common.ReplicaState``: STARTING, UPDATING, RECOVERING,
RUNNING, STOPPING, STOPPED, PENDING_MIGRATION). Ray 2.60 has no UNHEALTHY replica state: a
replica whose health check fails is STOPPING and a new one (a new id) STARTING in its place.

It is read over HTTP rather than through a driver connection (``serve.status()``), so a
sampler tick costs one round trip and no Serve import. The dashboard asks the controller; while
the controller is down the read fails or times out, and the sampler records that failure.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from inferchaos.errors import ProbeError
from inferchaos.layers import Layer
from inferchaos.primitives import http
from inferchaos.steady_state.probe_base import Sample

logger = logging.getLogger(__name__)

SERVE_API_PATH = "/api/serve/applications/"
RUNNING = "RUNNING"


def serve_samples(details: Mapping[str, Any]) -> list[Sample]:
    """Samples of one ``ServeInstanceDetails`` document.

    ``ray.serve_replicas{app,deployment,state}``: replicas per state (RUNNING always, 0 when
    none runs); ``ray.serve_replica{app,deployment,replica,state}``: 1 for a RUNNING replica, 0
    for one in any other state, so a replaced replica shows as a new ``replica`` label.
    ProbeError when the document does not have that shape.
    """
    applications = details.get("applications")
    if not isinstance(applications, Mapping):
        raise ProbeError(f"Serve answered no applications mapping: {str(details)[:200]}")
    samples: list[Sample] = []
    for app, app_details in sorted(applications.items()):
        deployments = app_details.get("deployments") if isinstance(app_details, Mapping) else None
        if not isinstance(deployments, Mapping):
            raise ProbeError(f"Serve application {app!r} has no deployments mapping")
        for deployment, dep_details in sorted(deployments.items()):
            replicas = dep_details.get("replicas") if isinstance(dep_details, Mapping) else None
            if not isinstance(replicas, list):
                raise ProbeError(f"Serve deployment {app}/{deployment} has no replicas list")
            where = {"app": str(app), "deployment": str(deployment)}
            states: Counter[str] = Counter({RUNNING: 0})
            for replica in replicas:
                if not isinstance(replica, Mapping) or "replica_id" not in replica or "state" not in replica:
                    raise ProbeError(
                        f"Serve deployment {app}/{deployment} lists a replica without id or state"
                    )
                state = str(replica["state"])
                states[state] += 1
                labels = {**where, "replica": str(replica["replica_id"]), "state": state}
                samples.append(Sample("ray.serve_replica", 1.0 if state == RUNNING else 0.0, labels))
            samples += [
                Sample("ray.serve_replicas", float(n), {**where, "state": state})
                for state, n in sorted(states.items())
            ]
    return samples


class ServeProbe:
    """Reads Serve's replica states from the dashboard at ``dashboard_url``.

    ``token`` gives the Ray auth token (read once, on first use): Ray 2.60's dashboard refuses
    an HTTP request without it when token authentication is on. An empty token sends none.
    """

    name = "ray@serve"
    layer = Layer.RAY

    def __init__(
        self,
        dashboard_url: str,
        token: Callable[[], str],
        *,
        timeout_s: float = 2.0,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.url = dashboard_url.rstrip("/") + SERVE_API_PATH
        self.timeout_s = timeout_s
        self._token = token
        self._headers: dict[str, str] | None = None
        self._client = client
        self._owns_client = client is None

    def _auth_headers(self) -> dict[str, str]:
        if self._headers is None:
            try:
                token = self._token()
            except OSError as e:
                raise ProbeError(f"cannot read the Ray auth token for {self.url}: {e}") from e
            self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        return self._headers

    async def read(self) -> list[Sample]:
        """Samples named as in steady_state/catalog.py (``ray.serve_*``); ProbeError on failure."""
        if self._client is None:
            self._client = http.async_client(timeout=self.timeout_s)
        try:
            response = await self._client.get(self.url, headers=self._auth_headers(), timeout=self.timeout_s)
        except httpx.HTTPError as e:
            raise ProbeError(f"GET {self.url} failed: {type(e).__name__}: {e}") from e
        if response.status_code != 200:
            raise ProbeError(f"GET {self.url} answered HTTP {response.status_code}: {response.text[:200]}")
        try:
            details = response.json()
        except ValueError as e:
            raise ProbeError(f"GET {self.url} answered no JSON: {e}") from e
        if not isinstance(details, Mapping):
            raise ProbeError(f"GET {self.url} answered {type(details).__name__}, not an object")
        return serve_samples(details)

    async def aclose(self) -> None:
        """Close the HTTP client if this probe created it."""
        if self._owns_client and self._client is not None:
            await self._client.aclose()
            self._client = None
