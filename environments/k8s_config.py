"""The config file of a Kubernetes-hosted environment (kind or a real cluster), validated whole.

One YAML file says where every layer is and what may be touched (see
``environments/cluster.example.yaml`` and ``environments/kind/kind.yaml``)::

    env: cluster                       # or kind
    kube: {context, namespace, kubeconfig?, api_url?, token_file?, ca_file?}
    ray: {address, dashboard_url, auth_token_secret? | auth_token_file?}
    vllm: {service_url, model, label_selector, replica_url?, port_name?, max_model_len?}
    prometheus: {url}                  # optional; recorded, not read yet
    allow: {contexts, namespaces, node_selector?, max_targets?}   # required, no default
    container_runtime: none            # docker/podman on kind: its nodes are containers

Every problem is one ConfigError line naming the file and the key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from inferchaos.config_files import read_config_mapping
from inferchaos.errors import ConfigError
from inferchaos.primitives.kube.allowlist import K8sAllowList

K8S_ENVS = ("kind", "cluster")
# Per-replica URL, filled from each vLLM Pod: pod_ip, host_ip, port (the named container port), name.
DEFAULT_REPLICA_URL = "http://{pod_ip}:{port}"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class KubeSettings(_Strict):
    """How to reach the kube API, and the namespace the workloads run in."""

    context: str = Field(min_length=1)
    namespace: str = Field(min_length=1)
    kubeconfig: str | None = None
    # Talk to this URL instead of reading a kubeconfig (a bearer token from token_file).
    api_url: str | None = None
    token_file: str | None = None
    ca_file: str | None = None


class RaySettings(_Strict):
    """The Ray cluster (KubeRay's head Service, or any reachable address) and its auth token."""

    address: str = Field(min_length=1)
    dashboard_url: str = Field(min_length=1)
    # Ray 2.60 turns token authentication on; the token lives in a Secret (key "token") or a file.
    auth_token_secret: str | None = None
    auth_token_file: str | None = None

    @model_validator(mode="after")
    def _one_token_source(self) -> RaySettings:
        if (self.auth_token_secret is None) == (self.auth_token_file is None):
            raise ValueError(
                "needs exactly one of auth_token_secret and auth_token_file (Ray 2.60 uses token auth)"
            )
        return self


class VllmSettings(_Strict):
    """The front door (a Service) and how to find each replica's own URL from its Pod."""

    service_url: str = Field(min_length=1)
    model: str = Field(min_length=1)
    label_selector: str = Field(min_length=1)
    replica_url: str = DEFAULT_REPLICA_URL
    port_name: str = "http"
    max_model_len: int | None = Field(default=None, gt=0)


class PrometheusSettings(_Strict):
    url: str = Field(min_length=1)


class AllowSettings(_Strict):
    """The blast-radius fence; mirrors :class:`faults.k8s.allowlist.K8sAllowList`."""

    contexts: list[str] = Field(min_length=1)
    namespaces: list[str] = Field(min_length=1)
    node_selector: str | None = None
    max_targets: int = Field(default=1, ge=1)


class K8sEnvConfig(_Strict):
    """A whole kind or cluster config file."""

    env: Literal["kind", "cluster"]
    kube: KubeSettings
    ray: RaySettings
    vllm: VllmSettings
    allow: AllowSettings
    prometheus: PrometheusSettings | None = None
    container_runtime: str = "none"
    path: str = ""

    @model_validator(mode="after")
    def _context_is_allowed(self) -> K8sEnvConfig:
        # A config whose own context is outside its allow-list could never act: say so up front.
        if self.kube.context not in self.allow.contexts:
            raise ValueError(
                f"kube.context {self.kube.context!r} is not in allow.contexts {self.allow.contexts}"
            )
        if self.kube.namespace not in self.allow.namespaces:
            raise ValueError(
                f"kube.namespace {self.kube.namespace!r} is not in allow.namespaces {self.allow.namespaces}"
            )
        return self

    def k8s_allow(self) -> K8sAllowList:
        """The allow-list the Kubernetes faults check."""
        return K8sAllowList.from_dict(self.allow.model_dump())


def load_k8s_env_config(path: Path, env_name: str) -> K8sEnvConfig:
    """Read and validate ``path`` for ``env_name`` (kind or cluster); ConfigError on any problem."""
    if env_name not in K8S_ENVS:
        raise ConfigError(f"{path}: {env_name!r} is not a Kubernetes environment ({', '.join(K8S_ENVS)})")
    data = read_config_mapping(path)
    if "allow" not in data:
        raise ConfigError(f"{path}: allow: required for the {env_name} environment; there is no default")
    data.setdefault("env", env_name)
    try:
        config = K8sEnvConfig.model_validate({**data, "path": str(path)})
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "config"
        raise ConfigError(f"{path}: {where}: {first['msg']}") from e
    if config.env != env_name:
        raise ConfigError(f"{path}: env: the file is for {config.env!r} but --env is {env_name!r}")
    return config
