"""What the probes read through Prometheus share: one tick is a fixed set of instant queries,
sent together to one Prometheus, whose answers the probe turns into its samples."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import httpx

from inferchaos.primitives import http
from inferchaos.primitives.prometheus_api import PromSeries, instant_query


class PromQueries:
    """The fixed ``queries`` (by key) of a probe, asked of the Prometheus at ``url`` once per read.

    ``client`` is shared when given (a bench's, a test's); otherwise one is made at the first
    read and closed by :meth:`aclose`.
    """

    def __init__(
        self,
        url: str,
        queries: Mapping[str, str],
        *,
        timeout_s: float = 2.0,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self._queries = dict(queries)
        self._client = client
        self._owns_client = client is None

    async def answers(self) -> dict[str, list[PromSeries]]:
        """Every query's series, by key; ProbeError when Prometheus could not answer one."""
        if self._client is None:
            self._client = http.async_client(timeout=self.timeout_s)
        keys = list(self._queries)
        answers = await asyncio.gather(
            *(instant_query(self._client, self.url, self._queries[k], self.timeout_s) for k in keys)
        )
        return dict(zip(keys, answers, strict=True))

    async def aclose(self) -> None:
        """Close the HTTP client if this object made it; idempotent."""
        if self._owns_client and self._client is not None:
            await self._client.aclose()
            self._client = None
