"""The kind/cluster environment driver against the fake API server, and its config file."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import yaml

from inferchaos.cli.main import main
from inferchaos.environments.k8s_config import load_k8s_env_config
from inferchaos.environments.k8s_env import K8sEnvironment
from inferchaos.errors import ConfigError, EnvironmentNotUp
from inferchaos.run.probe_set import build_probes, k8s_probe_of
from tests.fakes.apiserver import FakeApiServer, FakeCluster
from tests.fakes.k8s_objects import GPU_POOL, NS, WORKERS
from tests.fakes.k8s_scenario import (
    CONTEXT,
    TOKEN_SECRET,
    faked_layers_config,
    make_runtime,
    seed_kind_environment,
    token_secret,
)

TOKEN = "ray-token-for-the-fake-cluster"


@pytest.fixture
def closed_ports() -> list[int]:
    """Three distinct ports the OS just handed out and nothing listens on any more."""
    sockets = [socket.socket() for _ in range(3)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


@pytest.fixture
def seeded(fake_server: FakeApiServer, closed_ports: list[int]) -> FakeCluster:
    fake_server.cluster = seed_kind_environment(FakeCluster(), TOKEN, closed_ports)
    return fake_server.cluster


@pytest.fixture
def config_path(fake_server: FakeApiServer, seeded: FakeCluster, tmp_path: Path) -> Path:
    path, _ = faked_layers_config(tmp_path, "cluster", fake_server.url, make_runtime(tmp_path))
    return path


def _edit(path: Path, change: dict[str, object], drop: tuple[str, ...] = ()) -> Path:
    data = yaml.safe_load(path.read_text())
    data.update(change)
    for key in drop:
        data.pop(key)
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_driver_reads_every_layer_from_the_kube_api(
    config_path: Path, seeded: FakeCluster, closed_ports: list[int]
) -> None:
    env = K8sEnvironment(load_k8s_env_config(config_path, "cluster"))
    assert env.name == "cluster" and env.k8s.context == CONTEXT
    assert env.load_state().read_token() == TOKEN  # from the ray-auth-token Secret
    assert [env.replica_url(p) for p in env.replica_pods()] == [f"http://127.0.0.1:{p}" for p in closed_ports]
    readings = {
        s.probe: s.value for s in k8s_probe_of(env).read_now() if not s.labels or "deployment" in s.labels
    }
    assert readings["k8s.nodes_ready"] == 3 and readings["k8s.deployment_ready_replicas"] == 3
    # Nothing answers at the replicas' URLs here: listed, not healthy.
    assert [(r.node_id, r.healthy) for r in env.replicas()] == [(w, False) for w in WORKERS]
    assert seeded.mutating_requests() == []
    env.close()


def test_a_missing_token_secret_is_an_environment_error(config_path: Path, seeded: FakeCluster) -> None:
    seeded.remove("secrets", "ray-auth-token", NS)
    env = K8sEnvironment(load_k8s_env_config(config_path, "cluster"))
    with pytest.raises(EnvironmentNotUp, match="ray-auth-token: HTTP 404"):
        env.load_state()


def _ray_block(config_path: Path, **keys: str) -> dict[str, str]:
    ray = yaml.safe_load(config_path.read_text())["ray"]
    return {**ray, **keys}


def test_the_token_is_read_from_the_auth_token_key_by_default(config_path: Path, seeded: FakeCluster) -> None:
    # A Secret as KubeRay's docs make it: `kubectl create secret generic ... --from-literal=auth_token=...`.
    assert list(seeded.get("secrets", TOKEN_SECRET, NS)["data"]) == ["auth_token"]
    config = load_k8s_env_config(config_path, "cluster")
    assert config.ray.auth_token_key is None and config.ray.token_key == "auth_token"
    assert K8sEnvironment(config).load_state().read_token() == TOKEN
    assert [r.path for r in seeded.requests] == [f"/api/v1/namespaces/{NS}/secrets/{TOKEN_SECRET}"]


def test_a_custom_token_key_is_read(config_path: Path, seeded: FakeCluster) -> None:
    seeded.remove("secrets", TOKEN_SECRET, NS)
    seeded.add(token_secret("a-token-under-another-key", key="ray.token"))
    _edit(config_path, {"ray": _ray_block(config_path, auth_token_key="ray.token")})
    env = K8sEnvironment(load_k8s_env_config(config_path, "cluster"))
    assert env.load_state().read_token() == "a-token-under-another-key"


def test_a_secret_without_the_key_is_a_one_line_error_naming_the_secret_and_the_key(
    config_path: Path, seeded: FakeCluster
) -> None:
    # A Secret from before KubeRay's convention: the token under "token".
    seeded.remove("secrets", TOKEN_SECRET, NS)
    seeded.add(token_secret(TOKEN, key="token"))
    env = K8sEnvironment(load_k8s_env_config(config_path, "cluster"))
    with pytest.raises(EnvironmentNotUp) as e:
        env.load_state()
    assert str(e.value) == (
        f"the Ray token Secret {NS}/{TOKEN_SECRET} has no key 'auth_token' (its keys: token); "
        "set ray.auth_token_key to the key that holds the token"
    )
    assert TOKEN not in str(e.value)


def test_the_probe_set_adds_kubernetes_and_leaves_out_this_hosts_devices(config_path: Path) -> None:
    env = K8sEnvironment(load_k8s_env_config(config_path, "cluster"))
    env.status = lambda: _status()  # type: ignore[method-assign]  # Ray and vLLM are not up in unit tests
    probes, _ = build_probes(env)
    assert {p.name for p in probes} == {"canary", "ray", "ray@serve", "k8s"}


def test_with_prometheus_the_ray_probe_reads_the_clusters_ray_series_through_it(config_path: Path) -> None:
    from inferchaos.primitives.env_status import PrometheusStatus
    from inferchaos.steady_state.prometheus_ray import PrometheusRayProbe

    settings = {"url": "http://127.0.0.1:9/", "ray_matchers": 'ray_io_cluster="raycluster-a"'}
    env = K8sEnvironment(load_k8s_env_config(_edit(config_path, {"prometheus": settings}), "cluster"))
    prometheus = env._prometheus()
    assert isinstance(prometheus, PrometheusStatus)
    env.status = lambda: _status(prometheus)  # type: ignore[method-assign]  # Ray and vLLM are not up in unit tests
    probes, _ = build_probes(env)
    ray = next(p for p in probes if p.name == "ray")
    assert isinstance(ray, PrometheusRayProbe) and ray.source.url == "http://127.0.0.1:9"
    assert all('ray_io_cluster="raycluster-a"' in q for q in ray.selector.queries().values())


def test_with_prometheus_the_k8s_probe_reads_kube_state_metrics_through_it(config_path: Path) -> None:
    from inferchaos.primitives.env_status import PrometheusStatus
    from inferchaos.steady_state.k8s import K8sProbe
    from inferchaos.steady_state.prometheus_k8s import (
        NODES_READY,
        POD_PHASES,
        PrometheusK8sProbe,
        PromKubeSelector,
    )

    env = K8sEnvironment(load_k8s_env_config(config_path, "cluster"))
    env.status = lambda: _status()  # type: ignore[method-assign]  # Ray and vLLM are not up in unit tests
    assert isinstance(next(p for p in build_probes(env)[0] if p.name == "k8s"), K8sProbe)

    settings = {"url": "http://127.0.0.1:9/", "kube_matchers": 'job="kube-state-metrics"'}
    env = K8sEnvironment(load_k8s_env_config(_edit(config_path, {"prometheus": settings}), "cluster"))
    prometheus = env._prometheus()
    assert isinstance(prometheus, PrometheusStatus) and prometheus.kube_matchers == 'job="kube-state-metrics"'
    env.status = lambda: _status(prometheus)  # type: ignore[method-assign]
    k8s = next(p for p in build_probes(env)[0] if p.name == "k8s")
    assert isinstance(k8s, PrometheusK8sProbe) and k8s.source.url == "http://127.0.0.1:9"
    # Scoped as the API probe is: the config's namespace, and the allow-list's node pool.
    assert k8s.selector == PromKubeSelector(NS, 'job="kube-state-metrics"', GPU_POOL)
    queries = k8s.selector.queries()
    assert all('job="kube-state-metrics"' in q for q in queries.values())
    assert f'namespace="{NS}"' in queries[POD_PHASES]
    assert queries[NODES_READY].endswith(
        'and on (node) kube_node_labels{job="kube-state-metrics",label_inferchaos_io_pool="gpu"}'
    )


def test_kube_matchers_are_optional_and_add_no_matcher() -> None:
    from inferchaos.environments.k8s_config import PrometheusSettings

    assert PrometheusSettings("http://prom:9090").kube_matchers == ""


def _status(prometheus=None):  # the smallest EnvStatus the probe builder reads
    from inferchaos.primitives.env_status import (
        EnvStatus,
        FrontDoorStatus,
        ModelStatus,
        RayStatus,
        VllmStatus,
    )

    return EnvStatus(
        "cluster",
        True,
        RayStatus("127.0.0.1:6379", "http://127.0.0.1:1"),
        VllmStatus(),
        FrontDoorStatus("http://127.0.0.1:1", True),
        ModelStatus("tiny-llama", 2048),
        prometheus=prometheus,
    )


@pytest.mark.parametrize(
    ("change", "drop", "message"),
    [
        ({}, ("allow",), "allow: required for the cluster environment; there is no default"),
        (
            {"allow": {"contexts": ["prod"], "namespaces": [NS]}},
            (),
            "kube.context: 'kind-inferchaos' is not in allow.contexts",
        ),
        (
            {"allow": {"contexts": [CONTEXT], "namespaces": []}},
            (),
            "allow.namespaces: must name at least one namespace",
        ),
        (
            {"allow": {"contexts": [CONTEXT], "namespaces": [NS], "max_targets": 0}},
            (),
            "allow.max_targets: must be at least 1, got 0",
        ),
        (
            {"allow": {"contexts": [CONTEXT], "namespaces": [NS], "max_targets": "2"}},
            (),
            "key 'allow.max_targets' must be int, got '2'",
        ),
        (
            {"allow": {"contexts": [CONTEXT], "kube_contexts": [CONTEXT], "namespaces": [NS]}},
            (),
            "kube_contexts is the old name of contexts",
        ),
        ({"extra": 1}, (), "unknown key(s) extra; known: env, kube, ray"),
        ({"env": "kind"}, (), "env: the file is for 'kind' but --env is 'cluster'"),
        ({"env": "local"}, (), "env: must be one of kind, cluster, got 'local'"),
        (
            {"ray": {"address": "x", "dashboard_url": "y"}},
            (),
            "ray.auth_token_secret: needs exactly one of auth_token_secret",
        ),
        (
            {"ray": {"address": "x", "dashboard_url": "y", "auth_token_secret": "s", "auth_token_key": ""}},
            (),
            "ray.auth_token_key: must be a Secret data key (letters, digits, '-', '_', '.'), got ''",
        ),
        (
            {
                "ray": {
                    "address": "x",
                    "dashboard_url": "y",
                    "auth_token_secret": "s",
                    "auth_token_key": "a/b",
                }
            },
            (),
            "ray.auth_token_key: must be a Secret data key (letters, digits, '-', '_', '.'), got 'a/b'",
        ),
        (
            {"ray": {"address": "x", "dashboard_url": "y", "auth_token_secret": "s", "auth_token_key": 7}},
            (),
            "key 'ray.auth_token_key' must be",
        ),
        (
            {
                "ray": {
                    "address": "x",
                    "dashboard_url": "y",
                    "auth_token_file": "/t",
                    "auth_token_key": "auth_token",
                }
            },
            (),
            "ray.auth_token_key: names a key of auth_token_secret; set that Secret too",
        ),
        ({"vllm": {"service_url": "u", "model": "m"}}, (), "missing required key(s) vllm.label_selector"),
        (
            {"prometheus": {"url": "u", "kube_matchers": '{job="ksm"}'}},
            (),
            "prometheus.kube_matchers: must be PromQL label matchers without the braces (the probe adds them)",
        ),
        (
            {"prometheus": {"url": "u", "kube_matchers": 'job="ksm", namespace="monitoring"'}},
            (),
            "prometheus.kube_matchers: must not match on namespace: the probe scopes by kube.namespace",
        ),
        ({"prometheus": {"url": "u", "kube_matchers": 7}}, (), "key 'prometheus.kube_matchers' must be"),
    ],
)
def test_bad_configs_are_one_line_errors(config_path: Path, change: dict, drop: tuple, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        load_k8s_env_config(_edit(config_path, change, drop), "cluster")
    assert str(e.value).startswith(f"{config_path}: ")
    assert message in str(e.value) and "\n" not in str(e.value)


def test_the_old_name_of_allow_contexts_still_reads(
    config_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _edit(config_path, {"allow": {"kube_contexts": [CONTEXT], "namespaces": [NS], "max_targets": 2}})
    config = load_k8s_env_config(config_path, "cluster")
    assert config.allow.contexts == (CONTEXT,) and config.allow.max_targets == 2
    assert "kube_contexts is deprecated; call it contexts" in caplog.text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "experiments/gpu_ledger_squat.yaml", "--env", "kind"], "--env kind requires --config"),
        (["env", "status", "--env", "cluster"], "--env cluster requires --config"),
        (["gameday", "--env", "kind"], "--env kind requires --config"),
    ],
)
def test_kind_and_cluster_refuse_to_start_without_a_config(
    args: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
    cluster: FakeCluster,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("sys.argv", ["inferchaos", *args])
    with pytest.raises(SystemExit) as done:
        main()
    assert done.value.code == 2
    assert message in capsys.readouterr().err
    assert cluster.requests == []
