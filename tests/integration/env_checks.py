"""What the integration tests ask of the live environment, in one place."""

from __future__ import annotations

import httpx

from inferchaos.environments.local.env import LocalEnvironment
from inferchaos.primitives import http
from inferchaos.primitives.openai_stream import replicas_served
from tests.skips import host_lacks, require


def healthy_replica_names(env: LocalEnvironment) -> set[str]:
    """Replicas that published "healthy" and whose own vLLM answers /health with 200 now."""
    healthy = set()
    for record in env.replica_records():
        try:
            if record.state == "healthy" and http.get(f"{record.url}/health", timeout=2).status_code == 200:
                healthy.add(record.name)
        except httpx.HTTPError:
            continue
    return healthy


def free_gpus(env: LocalEnvironment) -> float:
    """Logical GPUs free now, per the GCS."""
    import ray

    env.connect_ray()
    return float(ray.available_resources().get("GPU", 0.0))


def wait_until_whole(env: LocalEnvironment, timeout_s: float = 240.0) -> None:
    """Every replica healthy, serving through the front door, passing Serve's health checks
    again, and every logical GPU not held by a replica free again.

    A control reverts its break only after its run is judged (a replacement node, a replica
    that Serve restarts): the next run must start on the whole environment, as a game day's does.
    """
    import time

    expected = {f"replica-{i}" for i in range(env.config.replicas)}
    spare = env.config.workers * env.config.gpus_per_worker - env.config.replicas
    deadline = time.monotonic() + timeout_s
    while True:
        while not (healthy_replica_names(env) >= expected and free_gpus(env) >= spare):
            if time.monotonic() >= deadline:
                raise AssertionError(
                    f"the environment did not become whole within {timeout_s:g} s: healthy "
                    f"{sorted(healthy_replica_names(env))}, free GPUs {free_gpus(env):g} (want {spare})"
                )
            time.sleep(0.5)
        # A replica Serve just started answers /health before the front door's router sends it
        # anything: a run started then would see one replica take its whole baseline.
        status = env.status()
        served = replicas_served(status.front_door.url, status.model.name, expected, deadline)
        assert served >= expected, (
            f"the front door sent nothing to {sorted(expected - served)} within {timeout_s:g} s"
        )
        # A replica that answers again after a control froze it may still owe Serve failed
        # health checks: whole once each one's latest check passed (else Serve replaces it).
        if env.wait_for_passing_health_checks(expected, min(deadline, time.monotonic() + 10.0)) == expected:
            return
        assert time.monotonic() < deadline, f"Serve's health checks did not pass within {timeout_s:g} s"


def stopped_processes(env: LocalEnvironment) -> list[int]:
    """Pids of replica processes in state T (stopped): a hang that was never resumed."""
    import psutil

    stopped = []
    for record in env.replica_records():
        try:
            group = [
                psutil.Process(record.vllm_pid),
                *psutil.Process(record.vllm_pid).children(recursive=True),
            ]
        except psutil.NoSuchProcess:
            continue
        for process in group:
            try:
                if process.status() == psutil.STATUS_STOPPED:
                    stopped.append(process.pid)
            except psutil.NoSuchProcess:
                continue
    return stopped


def skip_unless_on_netns(env: LocalEnvironment) -> None:
    """Skip a test that needs worker namespaces where the environment runs on loopback: naming the
    packages CI installs where they are missing (tests/skips.py), else as what this host lacks."""
    network = env.network()
    if network.mode == "netns":
        return
    from inferchaos.primitives.netns import missing_tools

    missing = tuple(missing_tools())
    require(missing, not missing, f"what worker namespaces need ({', '.join(missing)})")
    host_lacks(f"the environment is on loopback: {network.reason}")


def skip_unless_it_can_run(scenario: str, env: LocalEnvironment) -> None:
    """Skip, with the reason, a scenario this machine or environment cannot run: gpu_memory_squat
    without replica memory budgets, a network scenario on loopback."""
    from inferchaos.primitives.memory_budget import budgets_available

    if scenario == "gpu_memory_squat" and not budgets_available()[0]:
        host_lacks(f"no replica memory budgets here: {budgets_available()[1]}")
    if scenario.startswith("network_"):
        skip_unless_on_netns(env)
