"""What a command costs before it does anything: the kubernetes client is loaded only to talk to
a cluster.

Importing it takes seconds, and every `inferchaos` command, every `chaos run` of an experiment
and every game day's run pays its imports in a process of its own. A run against the local
environment, and `--help`, never talk to a cluster.
"""

from __future__ import annotations

import subprocess
import sys

# Every command, the Chaos Toolkit providers and probes, and every registered fault and its
# provider module (the Kubernetes faults included: they reach the client only when they act).
LOCAL_RUN = """
import importlib
import sys
import inferchaos.cli.main
import inferchaos.ctk.live
import inferchaos.ctk.providers
from inferchaos.faults.registry import action_modules, fault_names, get_fault
for name in fault_names():
    get_fault(name)
for module in action_modules():
    importlib.import_module(module)
print(" ".join(sorted(m for m in sys.modules if m.split(".")[0] == "kubernetes")))
"""


def test_no_command_nor_fault_loads_the_kubernetes_client_until_it_talks_to_a_cluster() -> None:
    done = subprocess.run([sys.executable, "-c", LOCAL_RUN], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == [], f"imported at start-up: {done.stdout[:300]}"


def test_a_cluster_command_still_finds_the_client_where_it_calls_it() -> None:
    """The lazy imports name real parts of the client: building a target and its APIs works."""
    code = """
from inferchaos.primitives.kube.allowlist import AllowList
from inferchaos.primitives.kube.client import connect_url
target = connect_url("https://127.0.0.1:1", "ctx", AllowList(contexts=("ctx",)))
print(type(target.core).__name__, type(target.apps).__name__, type(target.custom).__name__)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["CoreV1Api", "AppsV1Api", "CustomObjectsApi"]
