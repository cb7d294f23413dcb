"""HTTP clients that share one TLS context per process.

httpx builds a TLS context, and loads the whole CA bundle into it, for every client it opens,
``httpx.get`` included, even for a plain-http URL. inferchaos opens many short clients (health
polls, status reads, the environment's checks), so that load was most of each call's CPU. Every
client here verifies exactly as httpx's default does (``SSL_CERT_FILE`` and ``SSL_CERT_DIR``
honoured), from one context built at first use.
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import Mapping

import httpx

TimeoutTypes = float | httpx.Timeout | None
# What httpx.Client and httpx.AsyncClient use when given none (httpx._config keeps them
# private; ``httpx.Limits()`` alone means no limit): a call site that names neither keeps
# httpx's behaviour.
DEFAULT_TIMEOUT_S = 5.0
DEFAULT_LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=20)


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The process's TLS context, as httpx would build it for each client."""
    return httpx.create_ssl_context()


def get(url: str, *, timeout: TimeoutTypes) -> httpx.Response:
    """``httpx.get`` through the shared TLS context."""
    return httpx.get(url, timeout=timeout, verify=tls_context())


def post_json(url: str, body: object, *, timeout: TimeoutTypes) -> httpx.Response:
    """``httpx.post(url, json=body)`` through the shared TLS context."""
    return httpx.post(url, json=body, timeout=timeout, verify=tls_context())


def client(
    *, timeout: TimeoutTypes = DEFAULT_TIMEOUT_S, headers: Mapping[str, str] | None = None
) -> httpx.Client:
    """An ``httpx.Client`` through the shared TLS context."""
    return httpx.Client(timeout=timeout, headers=headers, verify=tls_context())


def async_client(
    *, timeout: TimeoutTypes = DEFAULT_TIMEOUT_S, base_url: str = "", limits: httpx.Limits | None = None
) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` through the shared TLS context."""
    return httpx.AsyncClient(
        timeout=timeout,
        base_url=base_url,
        limits=limits if limits is not None else DEFAULT_LIMITS,
        verify=tls_context(),
    )
