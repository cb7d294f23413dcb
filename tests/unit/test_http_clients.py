"""Every HTTP client inferchaos opens shares one TLS context, and still verifies certificates."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from inferchaos.primitives import http


@pytest.fixture
def bundle_loads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[object]]:
    """Each time a TLS context loads a CA bundle: the CPU a short client used to cost."""
    loads: list[object] = []
    load = ssl.SSLContext.load_verify_locations

    def counted(self: ssl.SSLContext, *args: Any, **kwargs: Any) -> None:
        loads.append(args or kwargs)
        load(self, *args, **kwargs)

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counted)
    http.tls_context.cache_clear()
    yield loads
    http.tls_context.cache_clear()


def test_many_clients_load_the_ca_bundle_once(bundle_loads: list[object]) -> None:
    for _ in range(3):
        with http.client(timeout=1.0):
            pass

    async def open_async() -> None:
        for _ in range(3):
            async with http.async_client(timeout=1.0):
                pass

    asyncio.run(open_async())
    assert len(bundle_loads) == 1


def test_the_shared_context_verifies_certificates_and_host_names() -> None:
    context = http.tls_context()
    assert context.verify_mode is ssl.CERT_REQUIRED
    assert context.check_hostname is True


def test_a_client_that_names_no_timeout_or_limits_keeps_httpx_own() -> None:
    # httpx keeps its defaults private; an upgrade that changes them must change these too.
    from httpx import _config

    assert httpx.Timeout(http.DEFAULT_TIMEOUT_S) == _config.DEFAULT_TIMEOUT_CONFIG
    ours, theirs = http.DEFAULT_LIMITS, _config.DEFAULT_LIMITS
    assert (ours.max_connections, ours.max_keepalive_connections, ours.keepalive_expiry) == (
        theirs.max_connections,
        theirs.max_keepalive_connections,
        theirs.keepalive_expiry,
    )
