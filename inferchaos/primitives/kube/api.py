"""Calling the Kubernetes API: one place that turns client failures into K8sError.

The kubernetes client is imported where a call is made, never at module level: it costs
seconds to import, and every command that runs only against the local environment (and every
`chaos run` of a local experiment) imports the faults and probes that sit on top of this.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from urllib3.exceptions import HTTPError

from inferchaos.primitives.kube.kube_errors import K8sError

if TYPE_CHECKING:
    from kubernetes.client import V1ObjectMeta
    from kubernetes.client.exceptions import ApiException

logger = logging.getLogger(__name__)

T = TypeVar("T")


class KubeObject(Protocol):
    """Any object of the kube API: the client's models declare every field Optional."""

    @property
    def metadata(self) -> V1ObjectMeta | None: ...


def object_name(obj: KubeObject) -> str:
    """The name of an object the API server returned.

    Every stored object has one; the client's models type it Optional only because a
    request body may leave it to ``generateName``.
    """
    meta = obj.metadata
    return (meta.name if meta is not None else None) or ""


def api_message(e: ApiException) -> str:
    """The API server's own one-line message (the Status ``message``), else the HTTP reason."""
    if e.body:
        try:
            status = json.loads(e.body)
        except (ValueError, TypeError):
            return str(e.body)[:200]
        if isinstance(status, dict) and status.get("message"):
            return str(status["message"])
    return str(e.reason or "")


@contextmanager
def api_errors(what: str, tolerate: tuple[int, ...] = ()) -> Iterator[None]:
    """Raise K8sError saying ``what`` failed, chained to the client's error.

    Answers whose status is in ``tolerate`` end the block quietly instead: a revert that
    finds its object already gone (404), a delete whose uid precondition no longer holds (409).
    """
    from kubernetes.client.exceptions import ApiException

    try:
        yield
    except ApiException as e:
        if e.status in tolerate:
            logger.debug("%s: tolerated HTTP %s: %s", what, e.status, api_message(e))
            return
        raise K8sError(f"could not {what}: HTTP {e.status}: {api_message(e)}") from e
    except HTTPError as e:
        raise K8sError(f"could not {what}: the API server is unreachable: {e}") from e


def read_if_exists(what: str, read: Callable[..., T], *args: Any) -> T | None:
    """``read(*args)``, or None when the object does not exist; K8sError on any other failure."""
    with api_errors(what, tolerate=(404,)):
        return read(*args)
    return None


def read_raw(read: Callable[..., Any], *args: str) -> dict[str, Any]:
    """The object exactly as the API server sent it, for state that is written back later.

    Going through the client's models would drop fields a newer server knows and the client
    does not, and re-format timestamps; a restore must write back what it read.
    """
    response = read(*args, _preload_content=False)
    return json.loads(response.data)
