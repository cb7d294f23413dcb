"""An in-memory Kubernetes API server for unit tests, faked at the HTTP boundary.

The real ``kubernetes`` client talks to it over loopback, so everything the code sends is
what a real API server would receive. It serves the endpoints the Kubernetes layer uses with
real JSON shapes (nodes and their status, Pods and evictions, events, Deployments, Secrets, KubeRay
RayClusters, CustomResourceDefinitions), keeps state so a write shows up on the next read, answers
SelfSubjectAccessReviews from a deny-list (everything else is allowed, as kind's admin is), and
applies the semantics the
code relies on: label and field selectors, JSON Patch, merge patches (strategic merge is
approximated by JSON merge patch, which is exact for the fields patched here), the
resourceVersion precondition of a patch, the uid precondition of a delete, PodDisruptionBudget
refusals (429) of evictions, and the status subresource.

Every object POSTed, PUT or produced by a PATCH of Pods, Nodes, Evictions and Deployments is
checked against the Kubernetes OpenAPI schema of the server's version (``kubernetes-validate``,
strict: unknown fields are errors); an invalid one is answered 422 and recorded in
``FakeCluster.rejected`` so tests can assert none was sent.
"""

from __future__ import annotations

import asyncio
import copy
import json
import re
import ssl
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import kubernetes_validate
from aiohttp import web

KUBE_VERSION = "1.31"


@dataclass(frozen=True)
class Resource:
    """One REST resource the fake serves."""

    plural: str
    kind: str
    api_version: str
    namespaced: bool
    validated: bool
    has_status: bool


RESOURCES = {
    r.plural: r
    for r in (
        Resource("nodes", "Node", "v1", namespaced=False, validated=True, has_status=True),
        Resource("pods", "Pod", "v1", namespaced=True, validated=True, has_status=True),
        Resource("events", "Event", "v1", namespaced=True, validated=False, has_status=False),
        Resource("secrets", "Secret", "v1", namespaced=True, validated=True, has_status=False),
        Resource("deployments", "Deployment", "apps/v1", namespaced=True, validated=True, has_status=True),
        Resource("rayclusters", "RayCluster", "ray.io/v1", namespaced=True, validated=False, has_status=True),
        Resource(
            "customresourcedefinitions",
            "CustomResourceDefinition",
            "apiextensions.k8s.io/v1",
            namespaced=False,
            validated=True,
            has_status=True,
        ),
    )
}
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})

# Field selectors the real API server supports for these resources (others answer 400).
FIELD_LABELS = {
    "nodes": {"metadata.name", "spec.unschedulable"},
    "pods": {"metadata.name", "metadata.namespace", "spec.nodeName", "status.phase"},
    "events": {
        "metadata.name",
        "metadata.namespace",
        "involvedObject.kind",
        "involvedObject.name",
        "involvedObject.namespace",
        "involvedObject.uid",
        "reason",
        "type",
    },
    "deployments": {"metadata.name", "metadata.namespace"},
    "secrets": {"metadata.name", "metadata.namespace", "type"},
    "rayclusters": {"metadata.name", "metadata.namespace"},
    "customresourcedefinitions": {"metadata.name"},
}


@dataclass
class RecordedRequest:
    """One request as the server received it."""

    method: str
    path: str
    query: dict[str, str]
    content_type: str
    body: Any
    authorization: str = ""  # the Authorization header as sent (the bearer token)

    @property
    def mutating(self) -> bool:
        return self.method in MUTATING


@dataclass
class RejectedObject:
    """An object the schema check refused."""

    method: str
    path: str
    kind: str
    error: str


class ApiError(Exception):
    """Answered to the client as a ``Status`` with this code."""

    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details or {}

    def status(self) -> dict[str, Any]:
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "details": self.details,
            "code": self.code,
        }


_UTC_OFFSET_TIME = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)\+00:00$")


def normalize_times(value: Any) -> Any:
    """Write UTC times as the API server stores them (``...Z``), whatever offset form came in."""
    if isinstance(value, dict):
        return {k: normalize_times(v) for k, v in value.items()}
    if isinstance(value, list):
        return [normalize_times(v) for v in value]
    if isinstance(value, str) and (m := _UTC_OFFSET_TIME.match(value)):
        return m.group(1) + "Z"
    return value


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class FakeCluster:
    """The state behind the fake server. Seed it with :meth:`add`; read it with :meth:`get`."""

    kube_version: str = KUBE_VERSION
    objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = field(
        default_factory=lambda: {plural: {} for plural in RESOURCES}
    )
    namespaces: set[str] = field(default_factory=lambda: {"default", "kube-system"})
    requests: list[RecordedRequest] = field(default_factory=list)
    rejected: list[RejectedObject] = field(default_factory=list)
    # (namespace, pod) whose eviction a PodDisruptionBudget refuses.
    blocked_evictions: set[tuple[str, str]] = field(default_factory=set)
    # Plurals whose next PATCH finds the object changed underneath (as a controller would).
    conflict_next_patch: dict[str, int] = field(default_factory=dict)
    # Plurals whose CRD is not installed: their endpoints answer 404, and so does a read of the CRD.
    missing_crds: set[str] = field(default_factory=set)
    # SelfSubjectAccessReviews denied: each entry is part of a review's resourceAttributes
    # (``{"verb": "patch", "resource": "nodes"}``); a review that matches every key of one is denied.
    denied_access: list[dict[str, str]] = field(default_factory=list)
    # Called with each mutating request before it is served, e.g. to look at the ledger then.
    observers: list[Callable[[RecordedRequest], None]] = field(default_factory=list)
    lock: threading.RLock = field(default_factory=threading.RLock)
    _rv: int = 1000

    def next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def add(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Seed an object as the cluster already holds it; it must be schema-valid (real shapes only)."""
        plural = _plural_of(obj["kind"])
        resource = RESOURCES[plural]
        obj = copy.deepcopy(obj)
        if resource.validated:
            error = _schema_error(obj, self.kube_version)
            if error:
                raise ValueError(f"seed {obj['kind']} {obj['metadata']['name']} is not schema-valid: {error}")
        meta = obj["metadata"]
        if resource.namespaced:
            meta.setdefault("namespace", "default")
            self.namespaces.add(meta["namespace"])
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", now_rfc3339())
        meta["resourceVersion"] = self.next_rv()
        with self.lock:
            self.objects[plural][(meta.get("namespace", ""), meta["name"])] = obj
        return obj

    def get(self, plural: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        with self.lock:
            found = self.objects[plural].get((namespace, name))
            return copy.deepcopy(found) if found else None

    def update(self, plural: str, name: str, namespace: str = "", **changes: Any) -> dict[str, Any]:
        """Change an object as a controller would (a merge patch that bumps resourceVersion)."""
        with self.lock:
            obj = self.objects[plural][(namespace, name)]
            merged = merge_patch(obj, changes)
            merged["metadata"]["resourceVersion"] = self.next_rv()
            self.objects[plural][(namespace, name)] = merged
            return copy.deepcopy(merged)

    def remove(self, plural: str, name: str, namespace: str = "") -> None:
        with self.lock:
            self.objects[plural].pop((namespace, name), None)

    def names(self, plural: str, namespace: str | None = None) -> list[str]:
        with self.lock:
            return sorted(n for (ns, n) in self.objects[plural] if namespace is None or ns == namespace)

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """Every object without its counters: equal snapshots mean the same cluster state."""
        with self.lock:
            state: dict[str, dict[str, Any]] = {}
            for plural, objects in self.objects.items():
                for (ns, name), obj in objects.items():
                    clean = copy.deepcopy(obj)
                    # Server-managed counters: every write moves them, restoring or not.
                    clean["metadata"].pop("resourceVersion", None)
                    clean["metadata"].pop("generation", None)
                    state[f"{plural}/{ns}/{name}"] = clean
            return state

    def mutating_requests(self) -> list[RecordedRequest]:
        with self.lock:
            return [r for r in self.requests if r.mutating]


def _plural_of(kind: str) -> str:
    for plural, resource in RESOURCES.items():
        if resource.kind == kind:
            return plural
    raise KeyError(kind)


_SCHEMA_VERDICTS: dict[str, str | None] = {}


def _schema_error(obj: dict[str, Any], version: str) -> str | None:
    """The first schema violation of ``obj`` (strict: unknown fields count), or None."""
    # Each check reads the schema files again (~25 ms); the seed objects repeat in every test.
    key = version + json.dumps(obj, sort_keys=True)
    if key not in _SCHEMA_VERDICTS:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
            _SCHEMA_VERDICTS[key] = None
        except kubernetes_validate.ValidationError as e:
            _SCHEMA_VERDICTS[key] = f"{'.'.join(str(p) for p in e.path)}: {e.message}"
    return _SCHEMA_VERDICTS[key]


# --- selectors -------------------------------------------------------------------------------

_SET_TERM = re.compile(r"^([\w./-]+)\s+(in|notin)\s+\(([^)]*)\)$")
_EQ_TERM = re.compile(r"^([\w./-]+)\s*(==|=|!=)\s*([\w./-]*)$")
_KEY = re.compile(r"^(!?)([\w./-]+)$")


def _split_terms(selector: str) -> list[str]:
    terms, depth, current = [], 0, ""
    for ch in selector:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            terms.append(current.strip())
            current = ""
        else:
            current += ch
    if current.strip():
        terms.append(current.strip())
    return terms


def label_selector_matches(selector: str, labels: dict[str, str]) -> bool:
    """Kubernetes label selector semantics: equality, set-based and existence terms, all ANDed."""
    for term in _split_terms(selector):
        if m := _SET_TERM.match(term):
            key, op, values = m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",")}
            ok = labels.get(key) in values if op == "in" else labels.get(key) not in values
        elif m := _EQ_TERM.match(term):
            key, op, value = m.groups()
            ok = labels.get(key) == value if op in ("=", "==") else labels.get(key) != value
        elif m := _KEY.match(term):
            ok = (m.group(2) in labels) != bool(m.group(1))
        else:
            raise ApiError(400, "BadRequest", f"unable to parse requirement: {term!r}")
        if not ok:
            return False
    return True


def _field_value(obj: dict[str, Any], path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if value is None:
        return "false" if path == "spec.unschedulable" else ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def field_selector_matches(plural: str, selector: str, obj: dict[str, Any]) -> bool:
    for term in _split_terms(selector):
        m = re.match(r"^([\w.]+)\s*(==|=|!=)\s*(.*)$", term)
        if not m:
            raise ApiError(400, "BadRequest", f"invalid field selector: {term!r}")
        path, op, value = m.groups()
        if path not in FIELD_LABELS[plural]:
            raise ApiError(
                400, "BadRequest", f'"{path}" is not a known field selector: only "{plural}" fields'
            )
        equal = _field_value(obj, path) == value
        if equal != (op != "!="):
            return False
    return True


# --- patches ---------------------------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: maps merge, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(path: str) -> list[str]:
    if not path.startswith("/"):
        raise ApiError(422, "Invalid", f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def json_patch(target: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902 JSON Patch (add, remove, replace, test); a failed op is a 422, as the API server answers."""
    doc = copy.deepcopy(target)
    for op in ops:
        parts = _pointer(op["path"])
        parent: Any = doc
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent.get(part)
            if parent is None:
                raise ApiError(422, "Invalid", f"doc is missing path: {op['path']}")
        last = parts[-1]
        kind = op["op"]
        if kind == "test":
            current = parent[int(last)] if isinstance(parent, list) else parent.get(last)
            if current != op["value"]:
                raise ApiError(422, "Invalid", f"testing value {op['path']} failed")
        elif kind in ("add", "replace"):
            if kind == "replace" and (isinstance(parent, dict) and last not in parent):
                raise ApiError(
                    422, "Invalid", f"replace operation does not apply: doc is missing key: {op['path']}"
                )
            if isinstance(parent, list):
                parent.insert(len(parent) if last == "-" else int(last), copy.deepcopy(op["value"]))
            else:
                parent[last] = copy.deepcopy(op["value"])
        elif kind == "remove":
            if isinstance(parent, list):
                parent.pop(int(last))
            elif last in parent:
                del parent[last]
            else:
                raise ApiError(
                    422, "Invalid", f"remove operation does not apply: doc is missing path: {op['path']}"
                )
        else:
            raise ApiError(422, "Invalid", f"unsupported JSON patch op {kind!r}")
    return doc


# --- the server ------------------------------------------------------------------------------


class FakeApiServer:
    """Serves a :class:`FakeCluster` on 127.0.0.1 from a thread of its own.

    Swap ``cluster`` between tests; requests always see the current one. With ``ssl_context``
    it serves HTTPS, as a real API server does, for clients that only speak TLS (the in-cluster loader).
    """

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self.cluster = FakeCluster()
        self.port = 0
        self._ssl_context = ssl_context
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        scheme = "https" if self._ssl_context else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    def start(self) -> None:
        ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(ready,), name="fake-apiserver", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("fake API server did not start")

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)

    def _serve(self, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        runner = web.AppRunner(app, access_log=None)
        loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=self._ssl_context)
        loop.run_until_complete(site.start())
        self.port = runner.addresses[0][1]
        ready.set()
        loop.run_forever()
        loop.run_until_complete(runner.cleanup())
        loop.close()

    async def _handle(self, request: web.Request) -> web.Response:
        raw = await request.read()
        content_type = request.headers.get("Content-Type", "")
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            return _json(ApiError(400, "BadRequest", "request body is not JSON").status(), 400)
        cluster = self.cluster
        recorded = RecordedRequest(
            request.method,
            request.path,
            dict(request.query),
            content_type,
            body,
            authorization=request.headers.get("Authorization", ""),
        )
        with cluster.lock:
            cluster.requests.append(recorded)
            if recorded.mutating:
                for observe in cluster.observers:
                    observe(recorded)
            try:
                payload, code = self._route(
                    cluster, request.method, request.path, dict(request.query), content_type, body
                )
            except ApiError as e:
                payload, code = e.status(), e.code
        return _json(payload, code)

    def _route(
        self,
        cluster: FakeCluster,
        method: str,
        path: str,
        query: dict[str, str],
        content_type: str,
        body: Any,
    ) -> tuple[Any, int]:
        if path in ("/version", "/version/"):  # the client asks for /version/, as kube-apiserver serves both
            major, minor = cluster.kube_version.split(".")
            # Every field of version.Info, as kube-apiserver 1.31 answers (the client's model requires them).
            return {
                "major": major,
                "minor": minor,
                "gitVersion": f"v{cluster.kube_version}.0",
                "gitCommit": "9edcffcde5595e8a5b1a35f88c421764e575afce",
                "gitTreeState": "clean",
                "buildDate": "2024-08-13T07:28:49Z",
                "goVersion": "go1.22.5",
                "compiler": "gc",
                "platform": "linux/amd64",
            }, 200
        if path == ACCESS_REVIEWS and method == "POST":
            return self._review(cluster, body)
        m = re.match(
            r"^/(?:api/v1|apis/(?P<group>[^/]+)/(?P<version>[^/]+))"
            r"(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>[^/]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>[^/]+))?$",
            path,
        )
        if not m or m["plural"] not in RESOURCES:
            raise ApiError(
                404, "NotFound", f"the server could not find the requested resource ({method} {path})"
            )
        resource = RESOURCES[m["plural"]]
        group_version = f"{m['group']}/{m['version']}" if m["group"] else "v1"
        if group_version != resource.api_version or resource.plural in cluster.missing_crds:
            raise ApiError(
                404, "NotFound", f"the server could not find the requested resource ({method} {path})"
            )
        ns, name, sub = m["ns"] or "", m["name"], m["sub"]
        if resource.namespaced != bool(ns) and not (resource.namespaced and method == "GET" and name is None):
            raise ApiError(
                404, "NotFound", f"{resource.plural} is {'not ' if not resource.namespaced else ''}namespaced"
            )
        handlers = {
            ("GET", False, None): self._list,
            ("POST", False, None): self._create,
            ("GET", True, None): self._read,
            ("GET", True, "status"): self._read,
            ("PATCH", True, None): self._patch,
            ("PATCH", True, "status"): self._patch,
            ("DELETE", True, None): self._delete,
            ("POST", True, "eviction"): self._evict,
        }
        handler = handlers.get((method, name is not None, sub))
        if (
            handler is None
            or (sub == "status" and not resource.has_status)
            or (sub == "eviction" and resource.plural != "pods")
        ):
            raise ApiError(405, "MethodNotAllowed", f"{method} {path} is not served by the fake")
        return handler(cluster, resource, ns, name, sub, query, content_type, body)

    # Each handler takes the same arguments so _route can dispatch on a table.

    def _list(
        self,
        cluster: FakeCluster,
        resource: Resource,
        ns: str,
        name: str | None,
        sub: str | None,
        query: dict[str, str],
        content_type: str,
        body: Any,
    ) -> tuple[Any, int]:
        items = []
        for (obj_ns, _), obj in sorted(cluster.objects[resource.plural].items()):
            if ns and obj_ns != ns:
                continue
            if "labelSelector" in query and not label_selector_matches(
                query["labelSelector"], obj["metadata"].get("labels") or {}
            ):
                continue
            if "fieldSelector" in query and not field_selector_matches(
                resource.plural, query["fieldSelector"], obj
            ):
                continue
            item = copy.deepcopy(obj)
            # A real list carries kind and apiVersion on the list, not on its items.
            item.pop("kind", None)
            item.pop("apiVersion", None)
            items.append(item)
        return {
            "kind": f"{resource.kind}List",
            "apiVersion": resource.api_version,
            "metadata": {"resourceVersion": str(cluster._rv)},
            "items": items,
        }, 200

    def _existing(self, cluster: FakeCluster, resource: Resource, ns: str, name: str) -> dict[str, Any]:
        obj = cluster.objects[resource.plural].get((ns, name))
        if obj is None:
            raise ApiError(
                404,
                "NotFound",
                f'{resource.plural} "{name}" not found',
                {"name": name, "kind": resource.plural},
            )
        return obj

    def _read(
        self,
        cluster: FakeCluster,
        resource: Resource,
        ns: str,
        name: str | None,
        sub: str | None,
        query: dict[str, str],
        content_type: str,
        body: Any,
    ) -> tuple[Any, int]:
        assert name is not None
        if resource.plural == "customresourcedefinitions" and name.split(".", 1)[0] in cluster.missing_crds:
            raise ApiError(
                404,
                "NotFound",
                f'customresourcedefinitions.apiextensions.k8s.io "{name}" not found',
                {"name": name, "group": "apiextensions.k8s.io", "kind": "customresourcedefinitions"},
            )
        return copy.deepcopy(self._existing(cluster, resource, ns, name)), 200

    def _check_schema(self, cluster: FakeCluster, method: str, path: str, obj: dict[str, Any]) -> None:
        error = _schema_error(obj, cluster.kube_version)
        if error:
            cluster.rejected.append(RejectedObject(method, path, obj.get("kind", "?"), error))
            raise ApiError(422, "Invalid", f"{obj.get('kind')} is invalid: {error}")

    def _create(
        self,
        cluster: FakeCluster,
        resource: Resource,
        ns: str,
        name: str | None,
        sub: str | None,
        query: dict[str, str],
        content_type: str,
        body: Any,
    ) -> tuple[Any, int]:
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the body of a create must be an object")
        obj = normalize_times(body)
        if obj.setdefault("apiVersion", resource.api_version) != resource.api_version or (
            obj.setdefault("kind", resource.kind) != resource.kind
        ):
            raise ApiError(400, "BadRequest", f"expected {resource.api_version} {resource.kind}")
        meta = obj.setdefault("metadata", {})
        if resource.namespaced:
            if meta.setdefault("namespace", ns) != ns:
                raise ApiError(
                    400,
                    "BadRequest",
                    "the namespace of the provided object does not match the namespace sent on the request",
                )
            if ns not in cluster.namespaces:
                raise ApiError(404, "NotFound", f'namespaces "{ns}" not found')
        if resource.validated:
            self._check_schema(cluster, "POST", f"/{resource.plural}", obj)
        if not meta.get("name"):
            raise ApiError(422, "Invalid", "metadata.name: Required value")
        key = (ns, meta["name"])
        if key in cluster.objects[resource.plural]:
            raise ApiError(409, "AlreadyExists", f'{resource.plural} "{meta["name"]}" already exists')
        for server_set in ("uid", "resourceVersion", "creationTimestamp"):
            meta.pop(server_set, None)
        meta.update(uid=str(uuid.uuid4()), resourceVersion=cluster.next_rv(), creationTimestamp=now_rfc3339())
        if resource.plural == "pods":
            obj["status"] = {"phase": "Pending", "qosClass": "Guaranteed"}
        cluster.objects[resource.plural][key] = obj
        return copy.deepcopy(obj), 201

    def _patch(
        self,
        cluster: FakeCluster,
        resource: Resource,
        ns: str,
        name: str | None,
        sub: str | None,
        query: dict[str, str],
        content_type: str,
        body: Any,
    ) -> tuple[Any, int]:
        assert name is not None
        current = self._existing(cluster, resource, ns, name)
        media = content_type.split(";")[0].strip()
        if media == "application/json-patch+json":
            if not isinstance(body, list):
                raise ApiError(400, "BadRequest", "a JSON patch must be a list of operations")
            patched = json_patch(current, body)
        elif media in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
            if not isinstance(body, dict):
                raise ApiError(400, "BadRequest", "a merge patch must be an object")
            patched = merge_patch(current, body)
        else:
            raise ApiError(415, "UnsupportedMediaType", f"the fake does not serve patches of type {media!r}")
        if cluster.conflict_next_patch.get(resource.plural, 0) > 0:
            cluster.conflict_next_patch[resource.plural] -= 1
            current["metadata"]["resourceVersion"] = cluster.next_rv()
        if patched["metadata"].get("resourceVersion") not in (None, current["metadata"]["resourceVersion"]):
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {resource.plural} "{name}": '
                "the object has been modified; please apply your changes to the latest version and try again",
            )
        for immutable in ("name", "namespace", "uid", "creationTimestamp"):
            if patched["metadata"].get(immutable) != current["metadata"].get(immutable):
                raise ApiError(422, "Invalid", f"metadata.{immutable}: field is immutable")
        # The status subresource writes only status; the main resource ignores status.
        if resource.has_status:
            if sub == "status":
                patched = {**copy.deepcopy(current), "status": patched.get("status")}
            elif "status" in current or "status" in patched:
                patched["status"] = copy.deepcopy(current.get("status"))
                if patched["status"] is None:
                    patched.pop("status")
        patched = normalize_times(patched)
        if resource.validated:
            self._check_schema(cluster, "PATCH", f"/{resource.plural}/{name}", patched)
        if resource.plural == "deployments" and patched.get("spec") != current.get("spec"):
            patched["metadata"]["generation"] = current["metadata"].get("generation", 1) + 1
        patched["metadata"]["resourceVersion"] = cluster.next_rv()
        cluster.objects[resource.plural][(ns, name)] = patched
        return copy.deepcopy(patched), 200

    def _delete(
        self,
        cluster: FakeCluster,
        resource: Resource,
        ns: str,
        name: str | None,
        sub: str | None,
        query: dict[str, str],
        content_type: str,
        body: Any,
    ) -> tuple[Any, int]:
        assert name is not None
        current = self._existing(cluster, resource, ns, name)
        preconditions = (body or {}).get("preconditions") or {}
        if preconditions.get("uid") not in (None, current["metadata"]["uid"]):
            raise ApiError(
                409,
                "Conflict",
                f"Precondition failed: UID in precondition: {preconditions['uid']}, "
                f"UID in object meta: {current['metadata']['uid']}",
            )
        # The kubelet would finish a graceful deletion later; the fake removes at once.
        del cluster.objects[resource.plural][(ns, name)]
        if resource.plural == "pods":
            gone = copy.deepcopy(current)
            gone["metadata"]["deletionTimestamp"] = now_rfc3339()
            return gone, 200
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {"name": name, "kind": resource.plural, "uid": current["metadata"]["uid"]},
        }, 200

    def _evict(
        self,
        cluster: FakeCluster,
        resource: Resource,
        ns: str,
        name: str | None,
        sub: str | None,
        query: dict[str, str],
        content_type: str,
        body: Any,
    ) -> tuple[Any, int]:
        assert name is not None
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the body of an eviction must be an Eviction")
        eviction = copy.deepcopy(body)
        if eviction.get("apiVersion") != "policy/v1" or eviction.get("kind") != "Eviction":
            raise ApiError(400, "BadRequest", "expected a policy/v1 Eviction")
        self._check_schema(cluster, "POST", f"/pods/{name}/eviction", eviction)
        if (eviction.get("metadata") or {}).get("name") != name:
            raise ApiError(400, "BadRequest", "name in URL does not match name in Eviction object")
        current = self._existing(cluster, resource, ns, name)
        preconditions = (eviction.get("deleteOptions") or {}).get("preconditions") or {}
        if preconditions.get("uid") not in (None, current["metadata"]["uid"]):
            raise ApiError(409, "Conflict", "Precondition failed: UID in precondition does not match")
        if (ns, name) in cluster.blocked_evictions:
            raise ApiError(
                429,
                "TooManyRequests",
                "Cannot evict pod as it would violate the pod's disruption budget.",
                {
                    "causes": [
                        {
                            "reason": "DisruptionBudget",
                            "message": "The disruption budget vllm needs 2 healthy pods and has 2 currently",
                        }
                    ]
                },
            )
        del cluster.objects["pods"][(ns, name)]
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}, 201

    def _review(self, cluster: FakeCluster, body: Any) -> tuple[Any, int]:
        """A SelfSubjectAccessReview, answered as the RBAC authorizer does (no reason when denied)."""
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the body of a review must be an object")
        # As for any create, an object without apiVersion and kind is taken as the endpoint's.
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", **body}
        if (body["apiVersion"], body["kind"]) != ("authorization.k8s.io/v1", "SelfSubjectAccessReview"):
            raise ApiError(400, "BadRequest", "expected an authorization.k8s.io/v1 SelfSubjectAccessReview")
        self._check_schema(cluster, "POST", ACCESS_REVIEWS, body)
        attributes = (body.get("spec") or {}).get("resourceAttributes")
        if not isinstance(attributes, dict):
            raise ApiError(
                422, "Invalid", "spec.resourceAttributes: Required value (the fake reviews resources only)"
            )
        denied = any(
            all(attributes.get(k, "") == v for k, v in entry.items()) for entry in cluster.denied_access
        )
        status = (
            {"allowed": False}
            if denied
            else {
                "allowed": True,
                "reason": 'RBAC: allowed by ClusterRoleBinding "kubeadm:cluster-admins" of ClusterRole '
                '"cluster-admin" to Group "kubeadm:cluster-admins"',
            }
        )
        return {**copy.deepcopy(body), "metadata": {"creationTimestamp": None}, "status": status}, 201


def _json(payload: Any, code: int) -> web.Response:
    return web.Response(status=code, text=json.dumps(payload), content_type="application/json")
