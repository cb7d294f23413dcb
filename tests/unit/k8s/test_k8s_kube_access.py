"""How the kind/cluster driver reaches the kube API, each way with a real request to the fake server.

Three ways, one per config: a kubeconfig context; an API URL with a bearer token file; and, in a
Pod, the kube client's own in-cluster loader (``kube.in_cluster``), which reads
``KUBERNETES_SERVICE_HOST``/``_PORT`` and the ServiceAccount's token and CA. The in-cluster loader
only speaks HTTPS, so its tests run the fake API server behind TLS with a certificate made here,
and the loader is pointed at temporary token and CA files in place of
``/var/run/secrets/kubernetes.io/serviceaccount/``.
"""

from __future__ import annotations

import datetime
import shutil
import ssl
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from kubernetes.config import incluster_config

from inferchaos.environments.k8s_config import load_k8s_env_config
from inferchaos.environments.k8s_env import K8sEnvironment
from inferchaos.errors import ConfigError, EnvironmentNotUp
from inferchaos.faults.k8s.configuration import env_from_configuration
from tests.fakes.apiserver import FakeApiServer, FakeCluster
from tests.fakes.k8s_objects import NS
from tests.fakes.k8s_scenario import CONTEXT, TOKEN_SECRET, seed_kind_environment
from tests.skips import require

RAY_TOKEN = "ray-token-for-the-fake-cluster"
SA_TOKEN = "eyJhbGciOiJSUzI1NiJ9.service-account.signature"  # the kubelet writes it without a newline
SECRET_PATH = f"/api/v1/namespaces/{NS}/secrets/{TOKEN_SECRET}"


@dataclass(frozen=True)
class ServiceAccountFiles:
    """What the kubelet mounts into a Pod: the ServiceAccount's token and the cluster's CA."""

    token: Path
    ca: Path


@dataclass(frozen=True)
class TlsApiServer:
    """The fake API server behind TLS, and the certificate it presents."""

    server: FakeApiServer
    cert: Path
    key: Path


def _self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate and key, valid for the address the loader builds from KUBERNETES_SERVICE_HOST."""
    # The fake API server's certificate is made with the openssl command.
    require("openssl", shutil.which("openssl"), "the openssl command")
    cert, key = folder / "apiserver.crt", folder / "apiserver.key"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=kubernetes",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsApiServer]:
    cert, key = _self_signed(tmp_path_factory.mktemp("tls"))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    server = FakeApiServer(ssl_context=context)
    server.start()
    yield TlsApiServer(server, cert, key)
    server.stop()


@pytest.fixture
def seeded_tls(tls_server: TlsApiServer) -> Iterator[FakeCluster]:
    tls_server.server.cluster = seed_kind_environment(FakeCluster(), RAY_TOKEN)
    yield tls_server.server.cluster
    assert tls_server.server.cluster.rejected == []


@pytest.fixture
def in_a_pod(
    tls_server: TlsApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> ServiceAccountFiles:
    """This process as a Pod sees itself: the service env vars and the ServiceAccount's files."""
    files = ServiceAccountFiles(token=tmp_path / "token", ca=tmp_path / "ca.crt")
    files.token.write_text(SA_TOKEN)
    shutil.copy(tls_server.cert, files.ca)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(tls_server.server.port))
    # load_incluster_config reads these module constants when called: the files a kubelet mounts.
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(files.token))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(files.ca))
    return files


def _config(tmp_path: Path, kube: dict[str, object]) -> Path:
    data = {
        "env": "cluster",
        "kube": {"context": CONTEXT, "namespace": NS, **kube},
        "ray": {
            "address": "ray://127.0.0.1:1",
            "dashboard_url": "http://127.0.0.1:1",
            "auth_token_secret": TOKEN_SECRET,
        },
        "vllm": {"service_url": "http://127.0.0.1:1", "model": "tiny-llama", "label_selector": "app=vllm"},
        "allow": {"contexts": [CONTEXT], "namespaces": [NS]},
    }
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _read_ray_token(config_path: Path) -> str:
    env = K8sEnvironment(load_k8s_env_config(config_path, "cluster"))
    try:
        return env.load_state().read_token()
    finally:
        env.close()


def test_in_a_pod_the_in_cluster_loader_reads_the_service_account(
    in_a_pod: ServiceAccountFiles, seeded_tls: FakeCluster, tls_server: TlsApiServer, tmp_path: Path
) -> None:
    config_path = _config(tmp_path, {"in_cluster": True})
    env = K8sEnvironment(load_k8s_env_config(config_path, "cluster"))
    configuration = env.k8s.api_client.configuration
    assert configuration.host == f"https://127.0.0.1:{tls_server.server.port}"  # from the env vars
    assert configuration.ssl_ca_cert == str(in_a_pod.ca) and configuration.verify_ssl
    assert env.k8s.context == CONTEXT  # the allow-list's name for this cluster
    assert env.load_state().read_token() == RAY_TOKEN  # over TLS, the server checked against the CA
    env.close()
    (request,) = seeded_tls.requests
    assert (request.method, request.path, request.authorization) == ("GET", SECRET_PATH, f"bearer {SA_TOKEN}")


def test_the_in_cluster_loader_checks_the_api_server_against_the_pods_ca(
    in_a_pod: ServiceAccountFiles, seeded_tls: FakeCluster, tmp_path: Path
) -> None:
    stranger, _ = _self_signed(tmp_path)  # another cluster's CA: the server's certificate is not its
    shutil.copy(stranger, in_a_pod.ca)
    env = K8sEnvironment(load_k8s_env_config(_config(tmp_path, {"in_cluster": True}), "cluster"))
    with pytest.raises(EnvironmentNotUp, match="CERTIFICATE_VERIFY_FAILED"):
        env.load_state()
    env.close()
    assert seeded_tls.requests == []  # refused in the handshake: no token went to that server


def test_the_in_cluster_loader_picks_up_a_rotated_token(
    in_a_pod: ServiceAccountFiles, seeded_tls: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = K8sEnvironment(load_k8s_env_config(_config(tmp_path, {"in_cluster": True}), "cluster"))
    core = env.k8s.core
    core.read_namespaced_secret(TOKEN_SECRET, NS)
    # The kubelet rotates a bound token in the file; the loader re-reads it once its minute is up.
    in_a_pod.token.write_text("rotated-token")
    later = datetime.datetime.now() + datetime.timedelta(minutes=2)
    clock = SimpleNamespace(now=lambda: later)
    monkeypatch.setattr(
        incluster_config, "datetime", SimpleNamespace(datetime=clock, timedelta=datetime.timedelta)
    )
    core.read_namespaced_secret(TOKEN_SECRET, NS)
    env.close()
    assert [r.authorization for r in seeded_tls.requests] == [f"bearer {SA_TOKEN}", "bearer rotated-token"]


@pytest.mark.parametrize(
    ("unset", "missing", "reason"),
    [
        ("KUBERNETES_SERVICE_HOST", None, "Service host/port is not set."),
        (None, "token", "Service token file does not exist."),
        (None, "ca", "Service certification file does not exist."),
    ],
)
def test_in_cluster_outside_a_pod_is_a_one_line_config_error(
    in_a_pod: ServiceAccountFiles,
    seeded_tls: FakeCluster,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    unset: str | None,
    missing: str | None,
    reason: str,
) -> None:
    if unset:
        monkeypatch.delenv(unset)
    if missing:
        getattr(in_a_pod, missing).unlink()
    env = K8sEnvironment(load_k8s_env_config(_config(tmp_path, {"in_cluster": True}), "cluster"))
    with pytest.raises(ConfigError) as e:
        env.load_state()
    assert str(e.value) == f"kube.in_cluster: cannot load this Pod's ServiceAccount credentials: {reason}"
    assert seeded_tls.requests == []


@pytest.mark.parametrize(
    "other",
    [
        {"api_url": "https://kubernetes.default.svc"},
        {"kubeconfig": "~/.kube/config"},
        {"token_file": "/var/run/secrets/kubernetes.io/serviceaccount/token"},
    ],
)
def test_in_cluster_is_the_only_way_in_its_config(tmp_path: Path, other: dict[str, str]) -> None:
    path = _config(tmp_path, {"in_cluster": True, **other})
    with pytest.raises(ConfigError) as e:
        load_k8s_env_config(path, "cluster")
    (key,) = other
    assert str(e.value) == f"{path}: kube.in_cluster: reads the Pod's ServiceAccount; drop {key}"


def test_a_chaos_toolkit_configuration_in_a_pod_uses_the_in_cluster_loader(
    in_a_pod: ServiceAccountFiles, seeded_tls: FakeCluster, tls_server: TlsApiServer
) -> None:
    allow = {"contexts": [CONTEXT], "namespaces": [NS]}
    env = env_from_configuration({"kube_context": CONTEXT, "kube_in_cluster": True, "k8s_allow": allow}, None)
    assert env.k8s.api_client.configuration.host == tls_server.server.url
    env.k8s.core.read_namespaced_secret(TOKEN_SECRET, NS)
    env.k8s.api_client.close()
    assert [r.authorization for r in seeded_tls.requests] == [f"bearer {SA_TOKEN}"]
    with pytest.raises(ConfigError, match="kube_in_cluster must be true or false, got 'yes'"):
        env_from_configuration({"kube_context": CONTEXT, "kube_in_cluster": "yes", "k8s_allow": allow}, None)


# -- the explicit ways keep working ---------------------------------------------------------------
@pytest.fixture
def seeded(fake_server: FakeApiServer) -> Iterator[FakeCluster]:
    fake_server.cluster = seed_kind_environment(FakeCluster(), RAY_TOKEN)
    yield fake_server.cluster
    assert fake_server.cluster.rejected == []


def test_an_api_url_with_a_token_file_sends_that_token(
    fake_server: FakeApiServer, seeded: FakeCluster, tmp_path: Path
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("a-token-from-a-file\n")
    config_path = _config(tmp_path, {"api_url": fake_server.url, "token_file": str(token_file)})
    assert _read_ray_token(config_path) == RAY_TOKEN
    assert [r.authorization for r in seeded.requests] == ["Bearer a-token-from-a-file"]


def test_a_kubeconfig_context_is_used(
    fake_server: FakeApiServer, seeded: FakeCluster, tmp_path: Path
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "elsewhere",
                "clusters": [
                    {"name": "fake", "cluster": {"server": fake_server.url}},
                    {"name": "other", "cluster": {"server": "http://127.0.0.1:1"}},
                ],
                "users": [{"name": "chaos", "user": {"token": "a-kubeconfig-token"}}],
                "contexts": [
                    {"name": CONTEXT, "context": {"cluster": "fake", "user": "chaos"}},
                    {"name": "elsewhere", "context": {"cluster": "other", "user": "chaos"}},
                ],
            }
        )
    )
    assert _read_ray_token(_config(tmp_path, {"kubeconfig": str(kubeconfig)})) == RAY_TOKEN
    assert [r.authorization for r in seeded.requests] == ["Bearer a-kubeconfig-token"]
