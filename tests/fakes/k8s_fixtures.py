"""Fixtures of the Kubernetes-layer tests: one fake API server per session, a fresh kind-like
cluster per test, the real ``kubernetes`` client pointed at it over loopback; and, for the
whole-experiment tests, the kind environment seeded with its control plane running.

Every test ends by asserting that no request body failed the Kubernetes schema check.
"""

from __future__ import annotations

import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiClient, Configuration

from inferchaos.faults.ledger import Ledger
from inferchaos.primitives.kube.allowlist import AllowList
from inferchaos.primitives.kube.client import K8sTarget
from tests.fakes.apiserver import FakeApiServer, FakeCluster
from tests.fakes.k8s_doubles import RUNTIME_SCRIPT, FakeRuntime, KindEnv
from tests.fakes.k8s_objects import GPU_POOL, NS, WORKERS, kind_cluster
from tests.fakes.k8s_scenario import control_plane, make_runtime, seed_kind_environment

CONTEXT = "kind-inferchaos"


@pytest.fixture(scope="session")
def fake_server() -> Iterator[FakeApiServer]:
    server = FakeApiServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def cluster(fake_server: FakeApiServer) -> Iterator[FakeCluster]:
    """A fresh kind-like cluster behind the server; fails the test if any request was schema-invalid."""
    fake_server.cluster = kind_cluster(FakeCluster())
    yield fake_server.cluster
    assert fake_server.cluster.rejected == [], "the code sent objects the Kubernetes schema rejects"


@pytest.fixture
def api_client(fake_server: FakeApiServer, cluster: FakeCluster) -> Iterator[ApiClient]:
    client = ApiClient(Configuration(host=fake_server.url))
    yield client
    client.close()


@pytest.fixture
def allow() -> AllowList:
    return AllowList(contexts=[CONTEXT], namespaces=[NS], node_selector=GPU_POOL, max_targets=3)


@pytest.fixture
def fake_runtime(tmp_path: Path) -> FakeRuntime:
    binary = tmp_path / "bin" / "docker"
    binary.parent.mkdir()
    binary.write_text(f"#!{sys.executable}\n{RUNTIME_SCRIPT}")
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    runtime = FakeRuntime(binary)
    runtime.set_running(dict.fromkeys(WORKERS, True))
    return runtime


@pytest.fixture
def env(api_client: ApiClient, allow: AllowList, fake_runtime: FakeRuntime) -> KindEnv:
    return KindEnv("kind", K8sTarget(api_client, allow, runtime=str(fake_runtime.binary), context=CONTEXT))


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    return Ledger(tmp_path / "ledger")


@pytest.fixture
def unwritable_ledger() -> Ledger:
    """A ledger whose folder exists but refuses new files, even to root (sysfs creates none)."""
    folder = Path("/sys")
    if not folder.is_dir():
        pytest.skip("needs Linux sysfs for a folder nobody can write")
    return Ledger(folder)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private INFERCHAOS_HOME for a whole-experiment test."""
    monkeypatch.setenv("INFERCHAOS_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture
def world_cluster(
    fake_server: FakeApiServer, tmp_path: Path, home: Path
) -> Iterator[tuple[FakeCluster, Any]]:
    """The kind environment seeded behind the fake server, its controllers running; and its runtime."""
    fake_server.cluster = seed_kind_environment(FakeCluster(), "token")
    runtime = make_runtime(tmp_path)
    controllers = control_plane(lambda: fake_server.cluster, runtime)
    controllers.start()
    yield fake_server.cluster, runtime
    controllers.stop()
    assert fake_server.cluster.rejected == []
