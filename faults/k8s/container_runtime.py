"""The container runtime (docker or podman) that runs kind's node containers.

kind names each node's container after the node, so stopping that container is a whole
machine disappearing: kubelet, containerd and every Pod on it stop at once.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from dataclasses import dataclass

from inferchaos.errors import ConfigError
from inferchaos.primitives.kube.kube_errors import K8sError

logger = logging.getLogger(__name__)

KNOWN_RUNTIMES = ("docker", "podman")
COMMAND_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class ContainerRuntime:
    """A resolved runtime binary."""

    binary: str

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(
                [self.binary, *args], capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            raise K8sError(f"could not run {self.binary} {' '.join(args)}: {e}") from e

    def is_running(self, container: str) -> bool:
        """Whether ``container`` runs now; K8sError when there is no such container."""
        done = self._run("inspect", "--format", "{{.State.Running}}", container)
        if done.returncode != 0:
            raise K8sError(f"{self.binary} has no container {container!r}: {done.stderr.strip()}")
        return done.stdout.strip() == "true"

    def stop(self, container: str, grace_s: int) -> None:
        """Stop ``container``, killing it after ``grace_s`` seconds."""
        logger.info("stopping node container %s with %s (grace %d s)", container, self.binary, grace_s)
        done = self._run("stop", "-t", str(grace_s), container)
        if done.returncode != 0:
            raise K8sError(f"{self.binary} stop {container} failed: {done.stderr.strip()}")

    def start(self, container: str) -> None:
        """Start ``container``; starting a running container is a no-op."""
        logger.info("starting node container %s with %s", container, self.binary)
        done = self._run("start", container)
        if done.returncode != 0:
            raise K8sError(f"{self.binary} start {container} failed: {done.stderr.strip()}")


def resolve_runtime(preferred: str) -> ContainerRuntime:
    """The ``preferred`` runtime (a name on PATH or a path), else the other known one.

    ConfigError when none is found, so a plan fails before anything is injected. ``"none"``
    says the environment has no node containers (a real cluster).
    """
    if preferred == "none":
        raise ConfigError(
            "this environment's nodes are not containers (runtime 'none'): stop_node_container is for kind"
        )
    candidates = [preferred, *(r for r in KNOWN_RUNTIMES if r != preferred)]
    for candidate in candidates:
        binary = shutil.which(candidate)
        if binary:
            return ContainerRuntime(binary)
    raise ConfigError(
        f"no container runtime found (tried {', '.join(candidates)}): install docker or podman, "
        "or set the environment's runtime to the binary that runs the kind node containers"
    )
