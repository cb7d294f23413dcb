"""The base URL of a service inferchaos talks to over HTTP (a Pushgateway, a team's Prometheus),
checked before anything is sent to it.

It imports nothing else of the project: reports and experiments both read URLs given on the
command line.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from inferchaos.errors import ConfigError


def http_base_url(text: str, example: str, path_owner: str) -> str:
    """``text`` as a service's base URL (http or https, a host, an optional port and path
    prefix), without a trailing slash; ConfigError saying what is wrong otherwise, with
    ``example`` as the URL to copy. ``path_owner`` names what adds its own path after it (``the
    push``), which is why a query or a fragment is refused.

    Credentials in the URL are refused, and never printed: they would end up in messages and logs.
    """

    def refuse(problem: str, shown: str = text) -> ConfigError:
        return ConfigError(f"{problem}, got {shown!r} (e.g. {example})")

    if not text:
        raise refuse("expected a URL")
    if any(c.isspace() or not c.isprintable() for c in text):
        raise refuse("expected a URL without spaces or control characters")
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https"):
        raise refuse("expected an http:// or https:// URL")
    if parts.username is not None or parts.password is not None:
        masked = text if parts.password is None else text.replace(f":{parts.password}@", ":***@", 1)
        raise refuse("credentials in the URL are not supported", masked)
    if not parts.hostname:
        raise refuse("expected a host after the scheme")
    try:
        port = parts.port
    except ValueError as e:
        raise refuse("the port must be a number from 1 to 65535") from e
    if port == 0:
        raise refuse("the port must be a number from 1 to 65535")
    if parts.query or parts.fragment or text.endswith(("?", "#")):
        raise refuse(f"expected no query or fragment: {path_owner} adds its own path")
    return f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}"
