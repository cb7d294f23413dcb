"""The alerts the platform's own Prometheus fires, read each tick: would its alerting have caught the fault?

Prometheus keeps every alert's state as the ``ALERTS`` series (``alertstate`` pending or
firing, with the alert's labels). A tick reads the firing ones: ``alerts.firing`` 1 per alert
and label set (its ``layer`` label names the layer it speaks for), and ``alerts.firing_count``
even when none fires, so that a run can tell "no alert fired" from "no alert was read"
(steady_state/detection.py reads both).
"""

from __future__ import annotations

import httpx

from inferchaos.layers import Layer
from inferchaos.primitives.prometheus_api import instant_query
from inferchaos.steady_state.base import Sample

FIRING_QUERY = 'ALERTS{alertstate="firing"}'
# The labels of ALERTS that say nothing of the alert itself.
_DROPPED = frozenset({"__name__", "alertstate"})


class PrometheusAlertsProbe:
    """The firing alerts of the Prometheus at ``url``."""

    name = "alerts"
    layer = Layer.ALERTS

    def __init__(self, url: str, *, timeout_s: float = 2.0, client: httpx.AsyncClient | None = None) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self._client = client
        self._owns_client = client is None

    async def read(self) -> list[Sample]:
        """``alerts.firing`` per firing alert, then ``alerts.firing_count``; ProbeError when
        Prometheus could not answer."""
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self.timeout_s)
        series = await instant_query(self._client, self.url, FIRING_QUERY, self.timeout_s)
        samples = [
            Sample("alerts.firing", 1.0, {k: v for k, v in s.labels.items() if k not in _DROPPED})
            for s in series
        ]
        return [*samples, Sample("alerts.firing_count", float(len(samples)), {})]

    async def aclose(self) -> None:
        """Close the HTTP client if this probe created it; idempotent."""
        if self._client is not None and self._owns_client:
            await self._client.aclose()
        self._client = None
