"""kill -9 of the process that injected each Kubernetes fault, then `inferchaos cleanup`, restores the cluster.

A separate Python process injects the fault against the fake API server (the kube HTTP
boundary) and the fake container runtime, exactly as the runner's fault step does, and is
SIGKILLed once the fault acts: nothing in it gets to revert. `inferchaos cleanup`, a new process
with only the ledger and the environment's config file, must revert every entry: the ledger
empty and the cluster as it was (nodes, the Deployment's spec, the Pods' placement, the worker
containers running). The local faults' cases are in tests/integration/test_crash_cleanup.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from inferchaos.faults.ledger import Ledger
from tests.fakes.apiserver import FakeApiServer, FakeCluster
from tests.fakes.k8s_objects import FAULT_PARAMS, WORKERS
from tests.fakes.k8s_scenario import k8s_env_config, k8s_state

pytestmark = pytest.mark.long_running

INJECT = """
import json, sys, time
from pathlib import Path
from inferchaos.environments.k8s_config import load_k8s_env_config
from inferchaos.environments.k8s_env import K8sEnvironment
from inferchaos.faults.ledger import Ledger
from inferchaos.faults.registry import get_fault

config, fault, params = Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
env = K8sEnvironment(load_k8s_env_config(config, "kind"))
get_fault(fault).inject(env, params, Ledger())
print("acting", flush=True)
time.sleep(600)
"""


# Faults after which the Deployment's Pods may run on other nodes than before: a revert can
# uncordon a drained node or bring a stopped one back, not move Pods back onto it.
MOVES_PODS = frozenset({"k8s.drain_node", "k8s.kill_pods", "k8s.stop_node_container", "k8s.delete_node"})


def _state(cluster: FakeCluster, fault: str) -> dict[str, Any]:
    state = k8s_state(cluster)
    if fault in MOVES_PODS:
        # Where they run aside; and the fake control plane runs no KubeRay operator to re-create
        # a Ray worker Pod drained off its node, as a real cluster's would.
        state["pods"] = sorted(
            (ns, phase, labels) for ns, _, phase, labels in state["pods"] if "ray.io/cluster" not in labels
        )
    return state


def _settled(
    cluster: FakeCluster, fault: str, want: dict[str, Any], timeout_s: float = 30.0
) -> dict[str, Any]:
    """The cluster's state once it equals ``want`` (its controllers re-create what was deleted),
    or as it stands after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    state = _state(cluster, fault)
    while state != want and time.monotonic() < deadline:
        time.sleep(0.2)
        state = _state(cluster, fault)
    return state


@pytest.mark.parametrize("fault", sorted(FAULT_PARAMS))
def test_cleanup_after_kill_9_restores_the_cluster(
    fault: str, fake_server: FakeApiServer, world_cluster: tuple[FakeCluster, Any], home: Path, tmp_path: Path
) -> None:
    cluster, runtime = world_cluster
    config, _ = k8s_env_config(
        tmp_path,
        "kind",
        fake_server.url,
        "127.0.0.1:6379",
        "http://127.0.0.1:1",
        "http://127.0.0.1:1",
        runtime,
    )
    before = _state(cluster, fault)
    env = {**os.environ, "INFERCHAOS_HOME": str(home)}
    injector = subprocess.Popen(
        [sys.executable, "-c", INJECT, str(config), fault, json.dumps(FAULT_PARAMS[fault])],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert injector.stdout is not None
        line = injector.stdout.readline()
        assert line.strip() == "acting", f"the injector did not inject {fault}: {injector.stderr.read()}"
    finally:
        os.killpg(injector.pid, signal.SIGKILL)
        injector.wait(timeout=10)
    assert injector.returncode == -signal.SIGKILL
    ledger = Ledger(home / "ledger")
    (entry,) = ledger.entries()
    assert entry.fault == fault, "the entry is written before the first write to the cluster"
    # The fault is still acting after the kill: something to clean up.
    assert (
        _state(cluster, fault) != before
        or not all(runtime.running(w) for w in WORKERS)
        or fault
        in (
            "k8s.kill_pods",  # the Deployment re-creates what it killed by itself
        )
    )
    result = subprocess.run(
        [sys.executable, "-m", "inferchaos.cli.main", "cleanup", "--config", str(config)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert ledger.is_empty(), result.stdout
    assert _settled(cluster, fault, before) == before
    assert all(runtime.running(w) for w in WORKERS)
    # Idempotent: a second cleanup finds nothing to revert.
    again = subprocess.run(
        [sys.executable, "-m", "inferchaos.cli.main", "cleanup", "--config", str(config)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 0 and "nothing to revert" in again.stdout, again.stdout + again.stderr
