"""Prometheus' HTTP query API (``/api/v1/query``): instant PromQL queries read as labelled numbers.

https://prometheus.io/docs/prometheus/latest/querying/api/ - an instant query answers
``{"status": "success", "data": {"resultType": "vector", "result": [{"metric": {...},
"value": [<unix time>, "<number>"]}]}}``; a failed one ``{"status": "error", "errorType": ...,
"error": ...}``, with HTTP 400, 422 or 503.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from inferchaos.errors import ProbeError


@dataclass(frozen=True)
class PromSeries:
    """One element of an instant vector: its labels and its value (NaN and ±Inf as Prometheus says)."""

    labels: dict[str, str]
    value: float


def vector_of(payload: Mapping[str, Any], query: str) -> list[PromSeries]:
    """The instant vector a query API answer holds; ProbeError for an error or any other shape."""
    if payload.get("status") != "success":
        raise ProbeError(
            f"Prometheus refused {query!r}: {payload.get('errorType', '?')}: {payload.get('error', payload)}"
        )
    data = payload.get("data")
    if not isinstance(data, Mapping) or data.get("resultType") != "vector":
        kind = data.get("resultType") if isinstance(data, Mapping) else type(data).__name__
        raise ProbeError(f"Prometheus answered {query!r} with a {kind}, not an instant vector")
    series = []
    for element in data.get("result", []):
        try:
            _, text = element["value"]
            series.append(PromSeries(dict(element.get("metric", {})), float(text)))
        except (KeyError, TypeError, ValueError) as e:
            raise ProbeError(f"Prometheus answered {query!r} with a malformed sample {element!r}") from e
    return series


def finite(series: list[PromSeries]) -> list[PromSeries]:
    """The elements with a number: ``histogram_quantile`` answers NaN for a window without observations."""
    return [s for s in series if math.isfinite(s.value)]


async def instant_query(
    client: httpx.AsyncClient, base_url: str, query: str, timeout_s: float
) -> list[PromSeries]:
    """Evaluate ``query`` now; ProbeError when Prometheus cannot be reached or refuses it."""
    url = f"{base_url.rstrip('/')}/api/v1/query"
    try:
        response = await client.post(url, data={"query": query}, timeout=timeout_s)
    except httpx.HTTPError as e:
        raise ProbeError(f"Prometheus at {base_url} did not answer: {type(e).__name__}: {e}") from e
    try:
        payload = response.json()
    except ValueError as e:
        raise ProbeError(f"Prometheus at {base_url} answered HTTP {response.status_code} without JSON") from e
    return vector_of(payload, query)
