"""The config file of a Kubernetes-hosted environment (kind or a real cluster), validated whole.

One YAML file says where every layer is and what may be touched (see
``environments/cluster.example.yaml`` and ``environments/kind/kind.yaml``)::

    env: cluster                       # or kind
    kube: {context, namespace, in_cluster? | kubeconfig? | api_url? (+ token_file?, ca_file?)}
    ray: {address, dashboard_url, auth_token_secret? (+ auth_token_key?) | auth_token_file?}
    vllm: {service_url, model, label_selector, replica_url?, port_name?, max_model_len?}
    prometheus: {url, replica_label?, matchers?, health_matchers?, rate_window_s?, ray_matchers?,
                 kube_matchers?}       # optional: the vLLM, Ray and Kubernetes probes then read PromQL
                                       # instead of each Pod's /metrics, Ray's state API and the kube
                                       # API (kube-state-metrics' series)
    allow: {contexts, namespaces, node_selector?, ray_addresses?, devices?, max_targets?}  # required;
                                       # keys: primitives/kube/allowlist.py
    container_runtime: none            # docker/podman on kind: its nodes are containers

Every problem is one ConfigError line naming the file and the key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from inferchaos.config_files import read_config_mapping
from inferchaos.errors import ConfigError
from inferchaos.layers import K8S_ENVS, EnvName
from inferchaos.params import InvalidValue, parse_params
from inferchaos.primitives.kube.allowlist import AllowList, with_current_keys

# Per-replica URL, filled from each vLLM Pod: pod_ip, host_ip, port (the named container port), name.
DEFAULT_REPLICA_URL = "http://{pod_ip}:{port}"

# The key KubeRay's authOptions Secret and Ray's KubeRay guide keep the Ray token under.
DEFAULT_AUTH_TOKEN_KEY = "auth_token"
# What the API server accepts as a key of a Secret's data (alphanumerics, '-', '_', '.').
_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")
# The label name of each matcher in a list of PromQL label matchers (job="x", pod=~"y").
_MATCHED_LABEL = re.compile(r"(?:^|,)\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")


def _require_text(**values: str) -> None:
    for key, value in values.items():
        if not value:
            raise InvalidValue(key, "must not be empty")


@dataclass(frozen=True)
class KubeSettings:
    """How to reach the kube API, and the namespace the workloads run in."""

    context: str
    namespace: str
    kubeconfig: str | None = None
    # Talk to this URL instead of reading a kubeconfig (a bearer token from token_file).
    api_url: str | None = None
    token_file: str | None = None
    ca_file: str | None = None
    # Inside a Pod: the kube client's in-cluster loader (the Pod's ServiceAccount), no kubeconfig.
    in_cluster: bool = False

    def __post_init__(self) -> None:
        _require_text(context=self.context, namespace=self.namespace)
        if self.in_cluster:
            # One way to the API per config: never a kubeconfig's cluster under an in-cluster name.
            others = [k for k in ("kubeconfig", "api_url", "token_file", "ca_file") if getattr(self, k)]
            if others:
                raise InvalidValue("in_cluster", f"reads the Pod's ServiceAccount; drop {', '.join(others)}")


@dataclass(frozen=True)
class RaySettings:
    """The Ray cluster (KubeRay's head Service, or any reachable address) and its auth token."""

    address: str
    dashboard_url: str
    # Ray 2.60 turns token authentication on; the token lives in a Secret or a file.
    auth_token_secret: str | None = None
    # The Secret's key; unset means DEFAULT_AUTH_TOKEN_KEY (read it through token_key).
    auth_token_key: str | None = None
    auth_token_file: str | None = None

    def __post_init__(self) -> None:
        _require_text(address=self.address, dashboard_url=self.dashboard_url)
        if (self.auth_token_secret is None) == (self.auth_token_file is None):
            raise InvalidValue(
                "auth_token_secret",
                "needs exactly one of auth_token_secret and auth_token_file (Ray 2.60 uses token auth)",
            )
        if self.auth_token_key is not None:
            if self.auth_token_secret is None:
                raise InvalidValue("auth_token_key", "names a key of auth_token_secret; set that Secret too")
            if not _SECRET_KEY.match(self.auth_token_key):
                raise InvalidValue(
                    "auth_token_key",
                    f"must be a Secret data key (letters, digits, '-', '_', '.'), got {self.auth_token_key!r}",
                )

    @property
    def token_key(self) -> str:
        """The key of ``auth_token_secret`` that holds the token."""
        return self.auth_token_key or DEFAULT_AUTH_TOKEN_KEY


@dataclass(frozen=True)
class VllmSettings:
    """The front door (a Service) and how to find each replica's own URL from its Pod."""

    service_url: str
    model: str
    label_selector: str
    replica_url: str = DEFAULT_REPLICA_URL
    port_name: str = "http"
    max_model_len: int | None = None

    def __post_init__(self) -> None:
        _require_text(service_url=self.service_url, model=self.model, label_selector=self.label_selector)
        if self.max_model_len is not None and self.max_model_len <= 0:
            raise InvalidValue("max_model_len", f"must be positive, got {self.max_model_len}")


@dataclass(frozen=True)
class PrometheusSettings:
    """Where Prometheus answers, and how its vLLM and Ray series are told apart.

    ``replica_label`` is the label whose value is the replica's Pod name (``pod`` with the
    Prometheus Operator's Pod and Service monitors); ``matchers`` select the vLLM series
    (``job="vllm"``, ``namespace="llm"``); ``health_matchers`` a job that probes each replica's
    ``/health``, where there is one. ``rate_window_s`` is the range of the quantiles' ``rate``:
    at least four scrape intervals. ``ray_matchers`` select the Ray cluster's ``ray_*`` series
    where Prometheus scrapes more than one (KubeRay's PodMonitor labels them ``ray_io_cluster``).
    ``kube_matchers`` select the cluster's kube-state-metrics series (``job="kube-state-metrics"``);
    the Kubernetes probe adds ``kube.namespace`` itself.
    """

    url: str
    replica_label: str = "pod"
    matchers: str = ""
    health_matchers: str | None = None
    rate_window_s: float = 60.0
    ray_matchers: str = ""
    kube_matchers: str = ""

    def __post_init__(self) -> None:
        _require_text(url=self.url, replica_label=self.replica_label)
        if not (self.rate_window_s > 0 and self.rate_window_s < 86_400):
            raise InvalidValue(
                "rate_window_s", f"must be a number of seconds above 0, got {self.rate_window_s}"
            )
        if "{" in self.kube_matchers or "}" in self.kube_matchers:
            raise InvalidValue(
                "kube_matchers",
                "must be PromQL label matchers without the braces (the probe adds them), "
                f"like job='kube-state-metrics'; got {self.kube_matchers!r}",
            )
        if "namespace" in _MATCHED_LABEL.findall(self.kube_matchers):
            # kube-state-metrics' namespace label is the object's: kube.namespace already scopes it,
            # and a second matcher on it would select nothing, or another namespace's Pods.
            raise InvalidValue(
                "kube_matchers", "must not match on namespace: the probe scopes by kube.namespace"
            )


@dataclass(frozen=True)
class K8sEnvConfig:
    """A whole kind or cluster config file."""

    env: EnvName
    kube: KubeSettings
    ray: RaySettings
    vllm: VllmSettings
    allow: AllowList
    prometheus: PrometheusSettings | None = None
    container_runtime: str = "none"
    path: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if self.env not in K8S_ENVS:
            raise InvalidValue("env", f"must be one of {', '.join(K8S_ENVS)}, got {str(self.env)!r}")
        # On Kubernetes an empty list would allow nothing at all: a config that could never act.
        if not self.allow.contexts:
            raise InvalidValue("allow.contexts", "must name at least one kube context")
        if not self.allow.namespaces:
            raise InvalidValue("allow.namespaces", "must name at least one namespace")
        # A config whose own context is outside its allow-list could never act: say so up front.
        if self.kube.context not in self.allow.contexts:
            raise InvalidValue(
                "kube.context", f"{self.kube.context!r} is not in allow.contexts {list(self.allow.contexts)}"
            )
        if self.kube.namespace not in self.allow.namespaces:
            raise InvalidValue(
                "kube.namespace",
                f"{self.kube.namespace!r} is not in allow.namespaces {list(self.allow.namespaces)}",
            )

    def k8s_allow(self) -> AllowList:
        """The allow-list the Kubernetes faults check."""
        return self.allow


def load_k8s_env_config(path: Path, env_name: str) -> K8sEnvConfig:
    """Read and validate ``path`` for ``env_name`` (kind or cluster); ConfigError on any problem."""
    if env_name not in K8S_ENVS:
        raise ConfigError(f"{path}: {env_name!r} is not a Kubernetes environment ({', '.join(K8S_ENVS)})")
    data = read_config_mapping(path)
    if "allow" not in data:
        raise ConfigError(f"{path}: allow: required for the {env_name} environment; there is no default")
    if isinstance(data["allow"], dict):
        data["allow"] = with_current_keys(data["allow"], f"{path}: allow")
    data.setdefault("env", env_name)
    config = parse_params(str(path), K8sEnvConfig, {**data, "path": str(path)}, noun="key")
    if config.env != env_name:
        raise ConfigError(f"{path}: env: the file is for {str(config.env)!r} but --env is {env_name!r}")
    return config
