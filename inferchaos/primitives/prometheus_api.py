"""Prometheus' HTTP query API (``/api/v1/query``): instant PromQL queries read as labelled numbers.

https://prometheus.io/docs/prometheus/latest/querying/api/ - an instant query answers
``{"status": "success", "data": {"resultType": "vector", "result": [{"metric": {...},
"value": [<unix time>, "<number>"]}]}}``; a failed one ``{"status": "error", "errorType": ...,
"error": ...}``, with HTTP 400, 422 or 503. ``/api/v1/rules`` lists the rule groups it evaluates.
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


def promql_duration(seconds: float) -> str:
    """A PromQL duration (``5s``, ``2500ms``): PromQL refuses fractions (``2.5s``), and a recording
    rule's name holds no dot."""
    millis = round(seconds * 1000)
    return f"{millis // 1000}s" if millis % 1000 == 0 else f"{millis}ms"


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


async def recording_rule_names(client: httpx.AsyncClient, base_url: str, timeout_s: float) -> set[str]:
    """The names of the recording rules Prometheus evaluates (``/api/v1/rules?type=record``).

    ProbeError when it did not answer, or answered 5xx (not ready yet): ask again later. A
    backend without the rules API (a 4xx, or no JSON) records nothing: an empty set.
    """
    url = f"{base_url.rstrip('/')}/api/v1/rules"
    try:
        response = await client.get(url, params={"type": "record"}, timeout=timeout_s)
    except httpx.HTTPError as e:
        raise ProbeError(f"Prometheus at {base_url} did not answer: {type(e).__name__}: {e}") from e
    if response.status_code >= 500:
        raise ProbeError(f"Prometheus at {base_url} answered {url} with HTTP {response.status_code}")
    try:
        payload = response.json()
    except ValueError:
        return set()
    data = (
        payload.get("data") if isinstance(payload, Mapping) and payload.get("status") == "success" else None
    )
    groups = data.get("groups") if isinstance(data, Mapping) else None
    if not isinstance(groups, list):
        return set()
    return {
        str(rule["name"])
        for group in groups
        if isinstance(group, Mapping)
        for rule in group.get("rules", [])
        if isinstance(rule, Mapping) and rule.get("type") == "recording" and "name" in rule
    }


@dataclass(frozen=True)
class PromRule:
    """One rule Prometheus evaluates, as ``/api/v1/rules`` lists it."""

    kind: str  # "alerting" or "recording"
    name: str
    # The expression as Prometheus prints it back once parsed, not as the rules file spells it.
    query: str
    group: str


def rules_of(payload: object, base_url: str) -> list[PromRule]:
    """The rules a ``/api/v1/rules`` answer lists; ProbeError for any answer that is not one."""
    if isinstance(payload, Mapping) and payload.get("status") == "error":
        raise ProbeError(
            f"Prometheus at {base_url} refused its rules: {payload.get('errorType', '?')}: {payload.get('error')}"
        )
    data = (
        payload.get("data") if isinstance(payload, Mapping) and payload.get("status") == "success" else None
    )
    groups = data.get("groups") if isinstance(data, Mapping) else None
    if not isinstance(groups, list):
        raise ProbeError(f"{base_url} answered /api/v1/rules without a rule list: not Prometheus' HTTP API")
    rules = []
    for group in groups:
        listed = group.get("rules") if isinstance(group, Mapping) else None
        if not isinstance(listed, list):
            raise ProbeError(f"{base_url} answered /api/v1/rules with a malformed group {group!r:.200}")
        for rule in listed:
            if not (
                isinstance(rule, Mapping)
                and isinstance(rule.get("name"), str)
                and isinstance(rule.get("query"), str)
            ):
                raise ProbeError(f"{base_url} answered /api/v1/rules with a malformed rule {rule!r:.200}")
            rules.append(
                PromRule(str(rule.get("type", "")), rule["name"], rule["query"], str(group.get("name", "")))
            )
    return rules


def loaded_rules(client: httpx.Client, base_url: str, timeout_s: float) -> list[PromRule]:
    """Every rule Prometheus evaluates, alerting and recording (``/api/v1/rules``).

    ProbeError when it did not answer, or answered anything but Prometheus' rule list (an HTTP
    error without Prometheus' error JSON, a page that is not JSON: another server at that URL).
    """
    url = f"{base_url.rstrip('/')}/api/v1/rules"
    try:
        response = client.get(url, timeout=timeout_s)
    except httpx.HTTPError as e:
        raise ProbeError(f"Prometheus at {base_url} did not answer: {type(e).__name__}: {e}") from e
    try:
        payload = response.json()
    except ValueError as e:
        raise ProbeError(
            f"{base_url} answered {url} with HTTP {response.status_code} without JSON: not Prometheus' HTTP API"
        ) from e
    return rules_of(payload, base_url)
