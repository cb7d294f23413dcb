"""The alerts the platform's own Prometheus fires, read each tick: would its alerting have caught the fault?

Prometheus keeps every alert's state as the ``ALERTS`` series (``alertstate`` pending or
firing, with the alert's labels). A tick reads them all: ``alerts.firing`` 1 per firing alert
and label set (its ``layer`` label names the layer it speaks for), ``alerts.pending`` 1 per
alert whose condition holds but not yet for its ``for:``, and ``alerts.firing_count`` even when
none fires, so that a run can tell "no alert fired" from "no alert was read". It also reads
which metrics that inferchaos' alerts need this Prometheus holds no series of
(``alerts.unscraped{metric}`` 1): the reason an alert could not fire, where none did
(steady_state/detection.py reads them all).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import httpx

from inferchaos.layers import Layer
from inferchaos.primitives import http
from inferchaos.primitives.prometheus_api import instant_query
from inferchaos.steady_state.probe_base import Sample

ALERTS_QUERY = "ALERTS"
# The labels of ALERTS that say nothing of the alert itself.
_DROPPED = frozenset({"__name__", "alertstate"})


class PrometheusAlertsProbe:
    """The firing alerts of the Prometheus at ``url``."""

    name = "alerts"
    layer = Layer.ALERTS

    def __init__(
        self,
        url: str,
        *,
        metrics: Sequence[str] = (),
        timeout_s: float = 2.0,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.url = url
        # The metrics whose absence the probe reports (what the alerts read).
        self.metrics = tuple(sorted(set(metrics)))
        self.timeout_s = timeout_s
        self._client = client
        self._owns_client = client is None

    async def read(self) -> list[Sample]:
        """``alerts.firing`` per firing alert, ``alerts.pending`` per pending one, then
        ``alerts.firing_count`` and ``alerts.unscraped`` per metric with no series; ProbeError
        when Prometheus could not answer."""
        if self._client is None:
            self._client = http.async_client(timeout=self.timeout_s)
        series = await instant_query(self._client, self.url, ALERTS_QUERY, self.timeout_s)
        samples = [
            Sample(f"alerts.{state}", 1.0, {k: v for k, v in s.labels.items() if k not in _DROPPED})
            for s in series
            if (state := s.labels.get("alertstate")) in ("firing", "pending")
        ]
        firing = sum(1 for sample in samples if sample.probe == "alerts.firing")
        samples.append(Sample("alerts.firing_count", float(firing), {}))
        if self.metrics:
            names = "|".join(re.escape(m) for m in self.metrics)
            held = await instant_query(
                self._client, self.url, f'count by (__name__) ({{__name__=~"{names}"}})', self.timeout_s
            )
            present = {s.labels.get("__name__") for s in held}
            samples += [
                Sample("alerts.unscraped", 1.0, {"metric": m}) for m in self.metrics if m not in present
            ]
        return samples

    async def aclose(self) -> None:
        """Close the HTTP client if this probe created it; idempotent."""
        if self._client is not None and self._owns_client:
            await self._client.aclose()
        self._client = None
