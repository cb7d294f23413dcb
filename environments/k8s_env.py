"""The driver of the Kubernetes-hosted environments: ``kind`` and ``cluster``.

Both are one shape: a kube API (the macro layer, through the official client), a Ray cluster
reached at an address and a dashboard (KubeRay's head), and vLLM replicas behind a Service,
each replica a Pod whose own URL comes from its Pod (``vllm.replica_url``). Everything comes
from one config file (:mod:`environments.k8s_config`); nothing is recorded on disk, since the
cluster itself is the state.

``up()`` on kind runs ``environments/kind/up.sh``; on a real cluster it only checks that
every layer answers (inferchaos never creates or deletes a real cluster). ``down()`` on kind
runs ``down.sh``; on a real cluster it does nothing.
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
from urllib3.exceptions import HTTPError

from inferchaos.environments.k8s_config import K8sEnvConfig
from inferchaos.environments.kind.lifecycle import run_kind_script
from inferchaos.environments.local.env import connect_driver, list_ray_nodes
from inferchaos.errors import ConfigError, EnvironmentNotUp
from inferchaos.layers import EnvName
from inferchaos.primitives import http
from inferchaos.primitives.capabilities import SaneBaseline
from inferchaos.primitives.env_status import (
    EnvStatus,
    FrontDoorStatus,
    ModelStatus,
    PrometheusStatus,
    RayStatus,
    ReplicaStatus,
    VllmStatus,
)
from inferchaos.primitives.kube.api import object_name
from inferchaos.primitives.kube.client import K8sTarget, connect_in_cluster, connect_kubeconfig, connect_url

if TYPE_CHECKING:
    from kubernetes.client import V1Pod

logger = logging.getLogger(__name__)

HTTP_TIMEOUT_S = 3.0
DEFAULT_VLLM_PORT = 8000
# kind serves the local environment's tiny CPU model, in containers on a machine of the same
# kind: the local environment's range.
KIND_SANE_BASELINE = SaneBaseline(ttft_p95_max_s=2.0)
# A cluster answers a short canary prompt from GPUs: its first token comes in a fraction of a
# second, and a second at rest is a platform already in trouble.
CLUSTER_SANE_BASELINE = SaneBaseline(ttft_p95_max_s=1.0)


@dataclass
class K8sEnvState:
    """What the runner and the Ray helpers read of a running environment (no file behind it)."""

    env_id: str
    ray_address: str
    dashboard_url: str
    ready: bool
    token: str = field(repr=False, default="")

    def read_token(self) -> str:
        """The Ray auth token (never printed: the runner redacts it from run folders)."""
        return self.token


def _log_progress(message: str) -> None:
    logger.info("%s", message)


class K8sEnvironment:
    """`up()`, `down()`, `status()` and the layer clients of a kind or cluster environment."""

    # The GPUs are on cluster nodes, not on this host: a local device probe would read nothing of theirs.
    local_devices = False

    def __init__(
        self,
        config: K8sEnvConfig,
        progress: Callable[[str], None] | None = None,
        target: K8sTarget | None = None,
    ) -> None:
        self.config = config
        self.name: str = config.env
        self._progress = progress or _log_progress
        self._target = target
        self._token: str | None = None

    @property
    def sane_baseline(self) -> SaneBaseline:
        """The worst a healthy baseline reads here: kind's CPU replicas are slower than a cluster's GPUs."""
        return KIND_SANE_BASELINE if self.name == EnvName.KIND else CLUSTER_SANE_BASELINE

    # -- the kube API -----------------------------------------------------------------------
    @property
    def k8s(self) -> K8sTarget:
        """The kube client fenced by the config's allow-list (what the Kubernetes faults act through)."""
        if self._target is None:
            self._target = self._connect_kube()
        return self._target

    def _connect_kube(self) -> K8sTarget:
        kube, allow = self.config.kube, self.config.k8s_allow()
        if kube.in_cluster:
            return connect_in_cluster(kube.context, allow, runtime=self.config.container_runtime)
        if kube.api_url:
            token = None
            if kube.token_file:
                try:
                    token = Path(kube.token_file).expanduser().read_text().strip()
                except OSError as e:
                    raise ConfigError(f"kube.token_file: cannot read {kube.token_file}: {e}") from e
            return connect_url(
                kube.api_url,
                kube.context,
                allow,
                token=token,
                runtime=self.config.container_runtime,
                ca_file=kube.ca_file,
            )
        config_file = str(Path(kube.kubeconfig).expanduser()) if kube.kubeconfig else None
        return connect_kubeconfig(
            kube.context, allow, runtime=self.config.container_runtime, config_file=config_file
        )

    def close(self) -> None:
        """Close the kube client's connection pool."""
        if self._target is not None:
            self._target.api_client.close()
            self._target = None

    # -- Ray --------------------------------------------------------------------------------
    def load_state(self) -> K8sEnvState:
        """The Ray endpoints and token; EnvironmentNotUp when the token cannot be read."""
        ray = self.config.ray
        if self._token is None:
            self._token = self._read_token()
        return K8sEnvState(
            env_id=f"{self.name}:{self.config.kube.context}:{ray.address}",
            ray_address=ray.address,
            dashboard_url=ray.dashboard_url,
            ready=True,
            token=self._token,
        )

    def _read_token(self) -> str:
        ray = self.config.ray
        if ray.auth_token_file:
            try:
                return Path(ray.auth_token_file).expanduser().read_text().strip()
            except OSError as e:
                raise ConfigError(f"ray.auth_token_file: cannot read {ray.auth_token_file}: {e}") from e
        namespace, name, key = self.config.kube.namespace, str(ray.auth_token_secret), ray.token_key
        from kubernetes.client import CoreV1Api
        from kubernetes.client.exceptions import ApiException

        try:
            secret = CoreV1Api(self.k8s.api_client).read_namespaced_secret(name, namespace)
        except ApiException as e:
            raise EnvironmentNotUp(
                f"could not read the Ray token Secret {namespace}/{name}: HTTP {e.status}"
            ) from e
        except HTTPError as e:
            raise EnvironmentNotUp(
                f"the kube API of context {self.config.kube.context!r} is unreachable: {e}"
            ) from e
        data = secret.data or {}
        if key not in data:
            # Name the keys it does have: a Secret made before KubeRay's "auth_token" often says "token".
            held = ", ".join(sorted(data)) or "none"
            raise EnvironmentNotUp(
                f"the Ray token Secret {namespace}/{name} has no key {key!r} (its keys: {held}); "
                "set ray.auth_token_key to the key that holds the token"
            )
        encoded = data[key]
        if not encoded:
            raise EnvironmentNotUp(f"the Ray token Secret {namespace}/{name} holds an empty {key!r}")
        try:
            return base64.b64decode(encoded).decode().strip()
        except (binascii.Error, UnicodeDecodeError) as e:
            raise EnvironmentNotUp(f"the Secret {namespace}/{name} holds no readable token: {e}") from e

    def connect_ray(self) -> None:
        """Make this process a driver of the environment's Ray cluster (once per process)."""
        connect_driver(self.load_state())

    # -- vLLM -------------------------------------------------------------------------------
    def replica_pods(self) -> list[V1Pod]:
        """The vLLM Pods (``vllm.label_selector``) in the namespace, by name."""
        from kubernetes.client import CoreV1Api
        from kubernetes.client.exceptions import ApiException

        vllm = self.config.vllm
        try:
            pods = CoreV1Api(self.k8s.api_client).list_namespaced_pod(
                self.config.kube.namespace, label_selector=vllm.label_selector
            )
        except ApiException as e:
            raise EnvironmentNotUp(
                f"could not list the vLLM Pods ({vllm.label_selector}): HTTP {e.status}"
            ) from e
        except HTTPError as e:
            raise EnvironmentNotUp(
                f"the kube API of context {self.config.kube.context!r} is unreachable: {e}"
            ) from e
        return sorted(pods.items, key=object_name)

    def replica_url(self, pod: V1Pod) -> str:
        """The replica's own base URL, from ``vllm.replica_url`` and the Pod's addresses and port."""
        status = pod.status
        return self.config.vllm.replica_url.format(
            pod_ip=status.pod_ip if status else None,
            host_ip=status.host_ip if status else None,
            port=self._port(pod),
            name=object_name(pod),
        ).rstrip("/")

    def _port(self, pod: V1Pod) -> int:
        containers = pod.spec.containers if pod.spec else []
        ports = [p for c in containers for p in (c.ports or [])]
        named = [p for p in ports if p.name == self.config.vllm.port_name]
        chosen = named or ports
        return int(chosen[0].container_port) if chosen else DEFAULT_VLLM_PORT

    def replicas(self) -> list[ReplicaStatus]:
        """Every vLLM Pod that has an address, with its /health now; Pending Pods are not replicas yet."""
        replicas = []
        for pod in self.replica_pods():
            status = pod.status
            terminating = pod.metadata is not None and pod.metadata.deletion_timestamp is not None
            if not (status and status.pod_ip) or terminating:
                continue
            url = self.replica_url(pod)
            ready = any(c.type == "Ready" and c.status == "True" for c in status.conditions or [])
            replicas.append(
                ReplicaStatus(
                    name=object_name(pod),
                    url=url,
                    metrics_url=f"{url}/metrics",
                    node_id=(pod.spec.node_name if pod.spec else None) or "",
                    healthy=ready and _answers(f"{url}/health"),
                    state=str(status.phase),
                )
            )
        return replicas

    def _front_door(self) -> tuple[bool, int | None]:
        """Whether the front door serves the model, and the max_model_len it reports."""
        vllm = self.config.vllm
        try:
            response = http.get(f"{vllm.service_url.rstrip('/')}/v1/models", timeout=HTTP_TIMEOUT_S)
        except httpx.HTTPError:
            return False, None
        if response.status_code != 200:
            return False, None
        try:
            models = response.json().get("data", [])
        except ValueError:
            return False, None
        served = [m for m in models if isinstance(m, dict) and m.get("id") == vllm.model]
        return bool(served), served[0].get("max_model_len") if served else None

    # -- the contract -----------------------------------------------------------------------
    def status(self) -> EnvStatus:
        """Live status of every layer; EnvironmentNotUp when the kube API or Ray does not answer."""
        state = self.load_state()
        nodes = list_ray_nodes(state)
        replicas = self.replicas()
        serving, max_model_len = self._front_door()
        return EnvStatus(
            env=self.name,
            up=any(n.alive for n in nodes),
            ray=RayStatus(address=state.ray_address, dashboard_url=state.dashboard_url, nodes=nodes),
            vllm=VllmStatus(replicas=replicas),
            front_door=FrontDoorStatus(url=self.config.vllm.service_url.rstrip("/"), healthy=serving),
            model=ModelStatus(
                name=self.config.vllm.model,
                max_model_len=int(max_model_len or self.config.vllm.max_model_len or 0),
            ),
            prometheus=self._prometheus(),
        )

    def _prometheus(self) -> PrometheusStatus | None:
        settings = self.config.prometheus
        if settings is None:
            return None
        return PrometheusStatus(
            url=settings.url.rstrip("/"),
            replica_label=settings.replica_label,
            matchers=settings.matchers,
            health_matchers=settings.health_matchers,
            rate_window_s=settings.rate_window_s,
            ray_matchers=settings.ray_matchers,
            kube_matchers=settings.kube_matchers,
        )

    def up(self) -> EnvStatus:
        """kind: run up.sh, then check; cluster: only check that every layer answers and serves."""
        if self.name == "kind":
            run_kind_script("up.sh", self._progress)
        status = self.status()
        if not status.up:
            raise EnvironmentNotUp(f"the {self.name} environment's Ray cluster has no ALIVE node")
        if not status.front_door.healthy:
            raise EnvironmentNotUp(
                f"the front door {status.front_door.url} does not serve {self.config.vllm.model!r}"
            )
        return status

    def down(self) -> list[int]:
        """kind: run down.sh (deletes the kind cluster); cluster: nothing, a real cluster is never torn down."""
        if self.name == "kind":
            run_kind_script("down.sh", self._progress)
        else:
            self._progress("the cluster environment is not inferchaos's to take down; nothing done")
        self.close()
        return []


def _answers(url: str) -> bool:
    try:
        return http.get(url, timeout=HTTP_TIMEOUT_S).status_code == 200
    except httpx.HTTPError:
        return False
