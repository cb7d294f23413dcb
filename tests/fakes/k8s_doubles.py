"""Test doubles of the Kubernetes-layer tests, at process boundaries the code does not own:
the environment object the faults receive, and a ``docker`` binary for kind's node containers."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from inferchaos.primitives.kube.client import K8sTarget


@dataclass
class KindEnv:
    """The duck-typed environment the faults need: a name and a K8sTarget."""

    name: str
    k8s: K8sTarget


@dataclass
class FakeRuntime:
    """A stand-in ``docker`` binary: records its arguments and keeps each container's running state."""

    binary: Path

    @property
    def state_file(self) -> Path:
        return self.binary.with_suffix(".json")

    def calls(self) -> list[str]:
        log = self.binary.with_suffix(".log")
        return log.read_text().splitlines() if log.exists() else []

    def running(self, container: str) -> bool:
        return json.loads(self.state_file.read_text())[container]

    def set_running(self, containers: dict[str, bool]) -> None:
        """Replace every container's state at once (atomically, as the fake binary does)."""
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(containers))
        tmp.replace(self.state_file)


RUNTIME_SCRIPT = """\
import json, pathlib, sys
me = pathlib.Path(sys.argv[0])
state_file, log = me.with_suffix(".json"), me.with_suffix(".log")
with log.open("a") as f:
    f.write(" ".join(sys.argv[1:]) + "\\n")
state = json.loads(state_file.read_text())
command, name = sys.argv[1], sys.argv[-1]
if name not in state:
    sys.exit(f"Error response from daemon: No such container: {name}")
if command == "inspect":
    print("true" if state[name] else "false")
elif command in ("stop", "start"):
    state[name] = command == "start"
    print(name)
else:
    sys.exit(f"unknown command {command}")
# Replaced atomically: the fake control plane reads this file from another thread, and a
# half-written file read as empty JSON killed that thread (and the node never came back).
tmp = state_file.with_suffix(".tmp")
tmp.write_text(json.dumps(state))
tmp.replace(state_file)
"""
