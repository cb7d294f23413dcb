"""The preflight of a kind or cluster environment: is everything inferchaos needs there?

One read-only pass over every layer, each need one :class:`PreflightItem`:

- the kube API answers, and the identity may make every access of
  :mod:`inferchaos.run.kube_access` (a SelfSubjectAccessReview each);
- KubeRay's CRDs are installed and serve the version the k8s probe reads;
- the Ray dashboard answers with the token: its Ray version (which must be this host's, since
  a Ray Client driver refuses another version) and a state API list;
- every vLLM replica's ``/metrics`` carries the samples the vLLM probe parses, under today's
  names or the older ones vLLM renamed (:mod:`primitives.vllm_metrics`);
- the front door streams one completion of the model, as the canary sends it.

``inferchaos env check`` prints the report; ``run`` and ``gameday`` stop with exit 2 before
planning when anything is missing (:class:`PreflightFailed`).
"""

from __future__ import annotations

import importlib.metadata
import logging
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import httpx

from inferchaos.environments.k8s_env import K8sEnvironment
from inferchaos.errors import ConfigError, EnvironmentError_, ProbeError
from inferchaos.primitives import http
from inferchaos.primitives.kube.access import review_access
from inferchaos.primitives.kube.api import api_errors, object_name, read_if_exists
from inferchaos.primitives.kube.kube_errors import K8sError
from inferchaos.primitives.openai_stream import stream_completion
from inferchaos.primitives.vllm_metrics import OLDER_NAMES, exposed_names
from inferchaos.run.kube_access import KUBERAY_CRDS, needed_access
from inferchaos.steady_state.canary import CanaryConfig
from inferchaos.steady_state.k8s import RAY_VERSION

if TYPE_CHECKING:
    from kubernetes.client import V1CustomResourceDefinition

logger = logging.getLogger(__name__)

HTTP_TIMEOUT_S = 5.0
RAY_VERSION_PATH = "/api/version"
# One state API list, as ray.util.state's list_nodes sends it; one row is enough to know it answers.
RAY_STATE_PATH = "/api/v0/nodes"


@dataclass(frozen=True)
class PreflightItem:
    """One thing inferchaos needs, and whether it is there."""

    layer: str
    what: str
    present: bool
    detail: str

    def line(self) -> str:
        """``rbac: patch nodes (cluster-wide): denied; needed by k8s.cordon_node``."""
        return f"{self.layer}: {self.what}: {self.detail}"


@dataclass(frozen=True)
class PreflightReport:
    """Every item of one preflight, in the order they were checked."""

    env: str
    items: tuple[PreflightItem, ...]

    @property
    def missing(self) -> list[PreflightItem]:
        """The items that are not there."""
        return [item for item in self.items if not item.present]

    @property
    def ok(self) -> bool:
        """Whether everything is there."""
        return not self.missing

    def summary(self) -> str:
        """One line: how many items were checked and how many are missing."""
        if self.ok:
            return f"env check: {self.env}: all {len(self.items)} needed items present"
        return f"env check: {self.env}: {len(self.missing)} of {len(self.items)} needed items missing"

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data (``inferchaos env check --json``)."""
        return {
            "env": self.env,
            "ok": self.ok,
            "missing": len(self.missing),
            "items": [asdict(item) for item in self.items],
        }


class PreflightFailed(EnvironmentError_):
    """Something inferchaos needs is missing from the environment; nothing was planned or touched."""

    def __init__(self, report: PreflightReport) -> None:
        super().__init__(report.summary())
        self.report = report


def run_preflight(
    env: K8sEnvironment, faults: Iterable[str] | None = None, timeout_s: float = HTTP_TIMEOUT_S
) -> PreflightReport:
    """Check everything a run against ``env`` needs; read-only, never raises for what is missing.

    ``faults`` narrows the RBAC check to those faults' accesses (the probe's and the driver's
    are always checked); None checks every fault's. ConfigError still propagates: a config that
    cannot even be used (an unknown kube context) is invalid input, not a missing item.
    """
    items: list[PreflightItem] = []
    kube = _kube_api(env)
    items.append(kube)
    if kube.present:
        items += _access(env, faults)
        items += [_crd(env, name) for name in KUBERAY_CRDS]
    items += _ray(env, timeout_s)
    if kube.present:
        items += _replicas(env, timeout_s)
    items.append(_front_door(env))
    report = PreflightReport(env.name, tuple(items))
    logger.info("%s", report.summary())
    return report


def ensure_preflight_passes(env: K8sEnvironment, faults: Iterable[str] | None = None) -> PreflightReport:
    """:func:`run_preflight`, raising :class:`PreflightFailed` when anything is missing."""
    report = run_preflight(env, faults)
    if not report.ok:
        raise PreflightFailed(report)
    return report


def _kube_api(env: K8sEnvironment) -> PreflightItem:
    from kubernetes.client import VersionApi

    what = f"API server of context {env.config.kube.context}"
    try:
        with api_errors("read the API server's version"):
            info = VersionApi(env.k8s.api_client).get_code()
    except K8sError as e:
        return PreflightItem("kube API", what, False, str(e))
    return PreflightItem("kube API", what, True, f"Kubernetes {info.git_version}")


def _access(env: K8sEnvironment, faults: Iterable[str] | None) -> list[PreflightItem]:
    items = []
    for needed in needed_access(env.config, faults):
        by = ", ".join(needed.needed_by)
        try:
            review = review_access(env.k8s.api_client, needed.access)
        except K8sError as e:
            items.append(PreflightItem("rbac", needed.access.describe(), False, f"{e}; needed by {by}"))
            continue
        detail = "allowed" if review.allowed else "denied"
        if not review.allowed and review.reason:
            detail += f" ({review.reason})"
        items.append(
            PreflightItem("rbac", needed.access.describe(), review.allowed, f"{detail}; needed by {by}")
        )
    return items


def _crd(env: K8sEnvironment, name: str) -> PreflightItem:
    from kubernetes.client import ApiextensionsV1Api

    try:
        crd: V1CustomResourceDefinition | None = read_if_exists(
            f"read the CustomResourceDefinition {name}",
            ApiextensionsV1Api(env.k8s.api_client).read_custom_resource_definition,
            name,
        )
    except K8sError as e:
        return PreflightItem("kuberay", name, False, str(e))
    if crd is None:
        return PreflightItem("kuberay", name, False, "not installed (the KubeRay operator installs it)")
    versions = crd.spec.versions
    served = [v.name for v in versions if v.served]
    storage = next((v.name for v in versions if v.storage), "none")
    if RAY_VERSION not in served:
        return PreflightItem(
            "kuberay",
            name,
            False,
            f"serves {', '.join(served) or 'no version'}, not {RAY_VERSION}, which the k8s probe reads",
        )
    return PreflightItem("kuberay", name, True, f"serves {', '.join(served)} (storage {storage})")


def _ray(env: K8sEnvironment, timeout_s: float) -> list[PreflightItem]:
    ray = env.config.ray
    source = f"file {ray.auth_token_file}" if ray.auth_token_file else f"Secret {ray.auth_token_secret}"
    try:
        token = env.load_state().read_token()
    except (EnvironmentError_, ConfigError) as e:
        # Without the token the dashboard answers 401 to everything: nothing more to ask it.
        return [PreflightItem("ray", "auth token", False, str(e))]
    items = [
        PreflightItem(
            "ray", "auth token", bool(token), f"read from {source}" if token else f"{source} is empty"
        )
    ]
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    base = ray.dashboard_url.rstrip("/")
    with http.client(timeout=timeout_s, headers=headers) as client:
        items.append(_ray_version(client, base))
        items.append(_ray_state_api(client, base))
    return items


def _get_json(client: httpx.Client, url: str, params: dict[str, str] | None = None) -> Any:
    """The JSON a GET answers; ProbeError saying why not."""
    try:
        response = client.get(url, params=params)
    except httpx.HTTPError as e:
        raise ProbeError(f"GET {url} failed: {type(e).__name__}: {e}") from e
    if response.status_code != 200:
        raise ProbeError(f"GET {url} answered HTTP {response.status_code}: {response.text[:200]}")
    try:
        return response.json()
    except ValueError as e:
        raise ProbeError(f"GET {url} answered no JSON: {e}") from e


def _ray_version(client: httpx.Client, base: str) -> PreflightItem:
    what = f"dashboard {base}"
    try:
        answer = _get_json(client, base + RAY_VERSION_PATH)
    except ProbeError as e:
        return PreflightItem("ray", what, False, str(e))
    cluster = answer.get("ray_version") if isinstance(answer, dict) else None
    if not cluster:
        return PreflightItem(
            "ray", what, False, f"{RAY_VERSION_PATH} names no ray_version: {str(answer)[:200]}"
        )
    try:
        here = importlib.metadata.version("ray")
    except importlib.metadata.PackageNotFoundError:
        return PreflightItem("ray", what, False, f"Ray {cluster}; this host has no ray to drive it with")
    if here != cluster:
        # A Ray Client driver (connect_ray) refuses a cluster of another Ray version.
        return PreflightItem(
            "ray",
            what,
            False,
            f"Ray {cluster}, but this host has ray {here}: Ray Client needs the same version",
        )
    return PreflightItem(
        "ray", what, True, f"Ray {cluster} (dashboard API {answer.get('version', '?')}), as this host's"
    )


def _ray_state_api(client: httpx.Client, base: str) -> PreflightItem:
    what = f"state API {RAY_STATE_PATH}"
    try:
        answer = _get_json(client, base + RAY_STATE_PATH, {"limit": "1"})
    except ProbeError as e:
        return PreflightItem("ray", what, False, str(e))
    # The dashboard's REST envelope: {"result": true, "msg": "", "data": {"result": ListApiResponse}}.
    listing = answer.get("data", {}).get("result") if isinstance(answer, dict) else None
    if not (isinstance(answer, dict) and answer.get("result") is True and isinstance(listing, dict)):
        message = answer.get("msg") if isinstance(answer, dict) else None
        return PreflightItem("ray", what, False, f"answered no node list: {message or str(answer)[:200]}")
    return PreflightItem("ray", what, True, f"lists nodes ({listing.get('total', '?')} in the cluster)")


def _replicas(env: K8sEnvironment, timeout_s: float) -> list[PreflightItem]:
    vllm = env.config.vllm
    try:
        pods = env.replica_pods()
    except EnvironmentError_ as e:
        return [PreflightItem("vllm", f"replicas ({vllm.label_selector})", False, str(e))]
    pods = [p for p in pods if not (p.metadata and p.metadata.deletion_timestamp)]
    if not pods:
        return [
            PreflightItem(
                "vllm",
                f"replicas ({vllm.label_selector})",
                False,
                f"no Pod in {env.config.kube.namespace} matches {vllm.label_selector}",
            )
        ]
    items = []
    with http.client(timeout=timeout_s) as client:
        for pod in pods:
            name = object_name(pod)
            if not (pod.status and pod.status.pod_ip):
                phase = pod.status.phase if pod.status else "unknown"
                items.append(
                    PreflightItem("vllm", f"{name} /metrics", False, f"the Pod has no address yet ({phase})")
                )
                continue
            items.append(_metrics(client, name, f"{env.replica_url(pod)}/metrics"))
    return items


def _metrics(client: httpx.Client, replica: str, url: str) -> PreflightItem:
    what = f"{replica} /metrics"
    try:
        response = client.get(url)
    except httpx.HTTPError as e:
        return PreflightItem("vllm", what, False, f"GET {url} failed: {type(e).__name__}: {e}")
    if response.status_code != 200:
        return PreflightItem("vllm", what, False, f"GET {url} answered HTTP {response.status_code}")
    try:
        names = exposed_names(response.text)
    except ProbeError as e:
        return PreflightItem("vllm", what, False, str(e))
    if names.missing:
        described = [
            f"{name} (nor {', '.join(OLDER_NAMES[name])})" if name in OLDER_NAMES else name
            for name in names.missing
        ]
        return PreflightItem("vllm", what, False, f"no {', '.join(described)}")
    detail = f"all {len(names.names)} metrics the vLLM probe reads"
    if names.renamed:
        detail += "; older names: " + ", ".join(f"{old} for {new}" for new, old in names.renamed.items())
    return PreflightItem("vllm", what, True, detail)


def _front_door(env: K8sEnvironment) -> PreflightItem:
    vllm = env.config.vllm
    # What the canary sends, with its timeout, once and for its first token only: a big model
    # on a busy cluster may take longer to start a stream than the other checks wait.
    canary = CanaryConfig(base_url=vllm.service_url.rstrip("/"), model=vllm.model, max_tokens=1)
    what = f"{canary.base_url} ({vllm.model})"
    result = stream_completion(
        canary.base_url, canary.model, canary.prompt, canary.max_tokens, canary.request_timeout_s
    )
    if not result.ok:
        return PreflightItem("front door", what, False, f"a completion failed: {result.error}")
    return PreflightItem(
        "front door", what, True, f"streamed a completion (first token in {result.ttft_s:.2f} s)"
    )
