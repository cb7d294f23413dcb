"""How the Kubernetes faults reach a cluster.

Faults take an ``env`` that is duck-typed, so any environment driver (kind, a real cluster,
a test double around a fake API server) can serve them. It must expose:

- ``env.k8s``: a :class:`K8sTarget` (the kube ``ApiClient``, the allow-list, the container
  runtime that runs kind's node containers, and the name of the kube context);
- ``env.name``: the environment's name, recorded in every ledger entry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from inferchaos.errors import ConfigError
from inferchaos.primitives.kube.allowlist import AllowList

if TYPE_CHECKING:
    from kubernetes.client import ApiClient, AppsV1Api, CoreV1Api, CustomObjectsApi


@dataclass
class K8sTarget:
    """One cluster a fault may act on, fenced by its allow-list.

    ``context`` names the kube context ``api_client`` was built from; plans refuse to act
    unless it is in ``allow.contexts``, so a client pointed at the wrong cluster acts nowhere.
    """

    api_client: ApiClient
    allow: AllowList
    runtime: str = "docker"
    context: str | None = None

    @property
    def core(self) -> CoreV1Api:
        """Nodes, Pods, evictions, events."""
        from kubernetes.client import CoreV1Api

        return CoreV1Api(self.api_client)

    @property
    def apps(self) -> AppsV1Api:
        """Deployments."""
        from kubernetes.client import AppsV1Api

        return AppsV1Api(self.api_client)

    @property
    def custom(self) -> CustomObjectsApi:
        """Custom resources such as KubeRay's RayClusters."""
        from kubernetes.client import CustomObjectsApi

        return CustomObjectsApi(self.api_client)


def connect_kubeconfig(
    context: str, allow: AllowList, runtime: str = "docker", config_file: str | None = None
) -> K8sTarget:
    """A K8sTarget for ``context`` of a kubeconfig file (``$KUBECONFIG`` or ~/.kube/config)."""
    from kubernetes.config import new_client_from_config
    from kubernetes.config.config_exception import ConfigException

    try:
        api_client = new_client_from_config(config_file=config_file, context=context, persist_config=False)
    except (ConfigException, OSError) as e:
        raise ConfigError(f"could not load kube context {context!r}: {e}") from e
    return K8sTarget(api_client=api_client, allow=allow, runtime=runtime, context=context)


def connect_url(
    url: str,
    context: str,
    allow: AllowList,
    token: str | None = None,
    runtime: str = "docker",
    ca_file: str | None = None,
) -> K8sTarget:
    """A K8sTarget for an API server URL with an optional bearer token (no kubeconfig).

    ``context`` is the name this cluster goes by in the allow-list.
    """
    from kubernetes.client import ApiClient, Configuration

    configuration = Configuration(host=url)
    if token:
        configuration.api_key = {"BearerToken": token}
        configuration.api_key_prefix = {"BearerToken": "Bearer"}
    if ca_file:
        configuration.ssl_ca_cert = ca_file
    return K8sTarget(api_client=ApiClient(configuration), allow=allow, runtime=runtime, context=context)


def connect_in_cluster(context: str, allow: AllowList, runtime: str = "docker") -> K8sTarget:
    """A K8sTarget from inside a Pod, through the kube client's own in-cluster loader.

    The loader reads ``KUBERNETES_SERVICE_HOST``/``_PORT`` and the Pod's ServiceAccount token
    and CA (``/var/run/secrets/kubernetes.io/serviceaccount/``), and re-reads the token as the
    kubelet rotates it: a bound token read once by hand expires during a long game day.
    ``context`` is the name this cluster goes by in the allow-list.
    """
    from kubernetes.client import ApiClient, Configuration
    from kubernetes.config import load_incluster_config
    from kubernetes.config.config_exception import ConfigException

    configuration = Configuration()
    try:
        load_incluster_config(client_configuration=configuration)
    except (ConfigException, OSError) as e:
        raise ConfigError(f"kube.in_cluster: cannot load this Pod's ServiceAccount credentials: {e}") from e
    return K8sTarget(api_client=ApiClient(configuration), allow=allow, runtime=runtime, context=context)
