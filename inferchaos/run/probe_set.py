"""The probes a run samples, built from what the environment says about its layers."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from inferchaos.environments.k8s_env import K8sEnvironment
from inferchaos.errors import EnvironmentNotUp
from inferchaos.primitives.alert_rules import CLUSTER, alerts
from inferchaos.primitives.capabilities import Environment, RayProcessEnvironment
from inferchaos.primitives.env_status import EnvStatus
from inferchaos.steady_state.canary import CanaryConfig, CanaryPace, CanaryProbe
from inferchaos.steady_state.cold_start import ColdStartProbe
from inferchaos.steady_state.device import device_probe_for
from inferchaos.steady_state.k8s import K8sProbe
from inferchaos.steady_state.network_probe import NetworkProbe, NodeLink
from inferchaos.steady_state.probe_base import Canary, ClosableProbe, Probe
from inferchaos.steady_state.prometheus_alerts import PrometheusAlertsProbe
from inferchaos.steady_state.prometheus_k8s import PrometheusK8sProbe, PromKubeSelector
from inferchaos.steady_state.prometheus_ray import PrometheusRayProbe, PromRaySelector
from inferchaos.steady_state.prometheus_vllm import (
    EVERY_REPLICA_UP_TO,
    Focus,
    PrometheusVllmOutliersProbe,
    PrometheusVllmProbe,
    PrometheusVllmSource,
    PromVllmSelector,
)
from inferchaos.steady_state.ray import RayProbe
from inferchaos.steady_state.serve import ServeProbe
from inferchaos.steady_state.slo import Slo
from inferchaos.steady_state.vllm import VllmProbe

# (env, canary pace, the replicas the SLOs name) -> (every probe to sample, the canary among
# them, which must be started)
ProbeFactory = Callable[[Environment, CanaryPace, frozenset[str]], tuple[list[Probe], Canary]]


DEFAULT_PACE = CanaryPace()


def slo_replicas(slos: Sequence[Slo]) -> frozenset[str]:
    """The replicas ``slos`` select by name (``labels: {replica: ...}``): a fleet too large to
    read every replica of each tick still reads these (see :func:`vllm_probes`)."""
    return frozenset(slo.labels["replica"] for slo in slos if "replica" in slo.labels)


def build_probes(
    env: Environment, pace: CanaryPace = DEFAULT_PACE, named: frozenset[str] = frozenset()
) -> tuple[list[Probe], CanaryProbe]:
    """Every probe for ``env``: the vLLM replicas' (``named`` the replicas the SLOs name), the
    canary, Ray and Serve, the device if known, Kubernetes if any."""
    status = env.status()
    probes: list[Probe] = vllm_probes(status, replica_locator(env), named)
    canary = CanaryProbe(
        CanaryConfig(
            base_url=status.front_door.url,
            model=status.model.name,
            rate_per_s=pace.rate_per_s,
            request_timeout_s=pace.request_timeout_s,
            max_in_flight=pace.max_in_flight,
        )
    )
    probes.append(canary)
    # The embedded environment's replicas publish their start-ups: the cold start that recovery
    # windows may be sized by (steady_state/cold_start.py).
    if isinstance(env, RayProcessEnvironment):
        probes.append(ColdStartProbe(env.replica_records))
    state = env.load_state()
    # Through the environment's Prometheus where it has one, as its vLLM probes are read.
    if status.prometheus is not None:
        ray_selector = PromRaySelector(status.prometheus.ray_matchers)
        probes.append(PrometheusRayProbe(status.prometheus.url, ray_selector))
        # Whether the platform's own alerting would have caught the fault, and how early.
        # It also says which metrics inferchaos' alerts read are not there: why one could not fire.
        reads = [metric for alert in alerts(CLUSTER) for metric in alert.reads]
        probes.append(PrometheusAlertsProbe(status.prometheus.url, metrics=reads))
    else:
        probes.append(RayProbe(state.dashboard_url, env.connect_ray))
    # Serve's replica states, through the same dashboard: the platform's own view of its replicas.
    probes.append(ServeProbe(state.dashboard_url, state.read_token))
    # An environment whose GPUs are on cluster nodes says so: this host's devices are not theirs.
    if env.local_devices:
        probes.append(device_probe_for(env))
    # Worker nodes on hosts of their own (`env up --network netns`): the links to them.
    links = [NodeLink(n.name, n.address) for n in status.ray.nodes if n.namespace and n.alive]
    if links:
        probes.append(NetworkProbe(links))
    # Environments with a kube API (kind, cluster) get the Kubernetes-layer probe: through their
    # Prometheus (kube-state-metrics' series) where they have one, as Ray and vLLM are read.
    if isinstance(env, K8sEnvironment):
        if status.prometheus is not None:
            kube_selector = PromKubeSelector(
                env.config.kube.namespace, status.prometheus.kube_matchers, env.config.allow.node_selector
            )
            probes.append(PrometheusK8sProbe(status.prometheus.url, kube_selector))
        else:
            probes.append(k8s_probe_of(env))
    return probes, canary


Locator = Callable[[str], Callable[[], str | None]]


def replica_locator(env: Environment) -> Locator | None:
    """Where each replica of the embedded environment runs now, read from its published records;
    None elsewhere (a Pod's Service address does not move)."""
    if not isinstance(env, RayProcessEnvironment):
        return None
    local = env

    def locator(name: str) -> Callable[[], str | None]:
        def locate() -> str | None:
            try:
                return next((r.url for r in local.replica_records() if r.name == name), None)
            except EnvironmentNotUp:
                return None

        return locate

    return locator


def vllm_probes(
    status: EnvStatus, locator: Locator | None = None, named: frozenset[str] = frozenset()
) -> list[Probe]:
    """One probe per replica: through the environment's Prometheus where it has one, else its /metrics
    (followed to wherever ``locator`` says the replica runs now).

    Through Prometheus, a fleet of more than :data:`EVERY_REPLICA_UP_TO` replicas is read in
    focus (:class:`Focus`): a probe for each replica of ``named``, and one for the others'
    extremes (``vllm@outliers``), so that a tick costs the same at any fleet size.
    """
    replicas = sorted(status.vllm.replicas, key=lambda r: r.name)
    prometheus = status.prometheus
    if prometheus is None:
        return [
            VllmProbe(
                r.name,
                r.metrics_url,
                r.url.rstrip("/") + "/health",
                locate=locator(r.name) if locator else None,
            )
            for r in replicas
        ]
    selector = PromVllmSelector(
        replica_label=prometheus.replica_label,
        matchers=prometheus.matchers,
        health_matchers=prometheus.health_matchers,
        window_s=prometheus.rate_window_s,
    )
    if len(replicas) <= EVERY_REPLICA_UP_TO:
        source = PrometheusVllmSource(prometheus.url, selector)
        return [PrometheusVllmProbe(r.name, source) for r in replicas]
    # A name no replica has is no replica's: a fleet read in full would not read it either.
    read_each = named & {r.name for r in replicas}
    focused = PrometheusVllmSource(prometheus.url, selector, focus=Focus(read_each))
    return [
        *(PrometheusVllmProbe(name, focused) for name in sorted(read_each)),
        PrometheusVllmOutliersProbe(focused, read_each),
    ]


async def close_probes(probes: list[Probe]) -> None:
    """Close the probes that hold connections (the canary's client, Prometheus sessions)."""
    for probe in probes:
        if isinstance(probe, ClosableProbe):
            await probe.aclose()


def k8s_probe_of(env: K8sEnvironment) -> K8sProbe:
    """The Kubernetes-layer probe of a kind or cluster environment, scoped by its config."""
    return K8sProbe(env.k8s.api_client, env.config.kube.namespace, env.config.allow.node_selector)
