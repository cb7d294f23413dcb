"""kill -9 of the runner while each local fault acts, then `inferchaos cleanup`, restores the environment.

The runner is SIGKILLed (its whole process group: a flood's client threads die with it) once
the ledger shows the fault acting; nothing in the runner gets to revert. `inferchaos cleanup`
must then revert every entry from the ledger alone, and the environment must be whole again:
no ledger entry, no leaked actor or placement group, no stopped (frozen) process, no queue
left in vLLM, no blinded health check, no slowed replica's cgroup, every replica healthy and
every spare GPU free. The actor leak's case is in test_scenarios.py.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from env_checks import skip_unless_on_netns, stopped_processes, wait_until_whole

from inferchaos.environments.local.env import LocalEnvironment
from inferchaos.faults.ledger import Ledger
from inferchaos.primitives import http
from inferchaos.primitives.vllm_metrics import parse_metrics
from tests.skips import host_lacks

pytestmark = pytest.mark.integration

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"
# vllm.slow_engine has no scenario yet: a test experiment with its mechanism left to fill in.
SLOW_ENGINE = Path(__file__).resolve().parents[1] / "fixtures" / "crash_experiments" / "slow_engine.yaml"


# (experiment, the faults whose ledger entries must be acting before the kill).
CASES = {
    "kill_node": ("node_loss.yaml", {"ray.kill_node"}),
    "stall_placement_group": ("strict_pg_stall.yaml", {"ray.stall_placement_group"}),
    # The group that holds the spare GPUs while nothing is PENDING: strict_pg_stall in hog mode.
    "stall_placement_group+hog": ("strict_pg_stall.yaml", {"ray.stall_placement_group"}),
    # The flood alone: its client threads die with the runner, the prompts they sent stay queued.
    "flood_kv_cache": ("kv_flood.yaml", {"vllm.flood_kv_cache"}),
    # A dead engine outlives nothing of the run's, but cleanup must still end its entry and
    # leave the replica to Serve to replace: the environment whole again.
    "kill_engine": ("engine_death.yaml", {"vllm.kill_engine"}),
    "flood_kv_cache+hang_engine": ("controls/kv_flood.yaml", {"vllm.flood_kv_cache", "vllm.hang_engine"}),
    "squat_device_memory": ("gpu_memory_squat.yaml", {"device.squat_device_memory"}),
    "blind_health_check+hang_engine": (
        "controls/engine_hang.yaml",
        {"vllm.blind_health_check", "vllm.hang_engine"},
    ),
    # The crash loop dies with the runner; cleanup must still see the controller back.
    "kill_serve_controller": ("serve_controller_loss.yaml", {"ray.kill_serve_controller"}),
    # A cgroup quota outlives the runner; a duty cycle dies with it, perhaps mid-stop.
    "slow_engine+cgroup": (str(SLOW_ENGINE), {"vllm.slow_engine"}),
    "slow_engine+duty_cycle": (str(SLOW_ENGINE), {"vllm.slow_engine"}),
    # A cut and a delayer outlive the runner; cleanup removes exactly their table, rule, qdisc
    # and process (and replaces the node if Ray declared it DEAD meanwhile).
    "partition_node": ("network_partition_short.yaml", {"network.partition_node"}),
    "degrade_link": ("slow_link.yaml", {"network.degrade_link"}),
}
NETWORK_CASES = {"partition_node", "degrade_link"}
# Long enough for every replica to answer before the fault (the platform's baseline checks).
BASELINE_S = 4


def _link_state(env: LocalEnvironment) -> dict[str, list[str]]:
    """Every worker namespace's nftables tables, mangle rules and qdiscs, and the host's links,
    namespaces and delayer processes: what a network fault may add and cleanup must remove."""
    from inferchaos.primitives.netns import host_names
    from inferchaos.primitives.processes import processes_with_marker

    state: dict[str, list[str]] = {"host": sorted(host_names())}
    for node in env.load_state().nodes:
        # A node lost during the cut keeps its rules only as long as its namespace exists.
        if not node.namespace or (node.lost and node.namespace not in state["host"]):
            continue
        for what, argv in (
            ("nft", ["nft", "list", "tables"]),
            ("mangle", ["iptables-legacy", "-t", "mangle", "-S"]),
            ("qdisc", ["tc", "qdisc", "show", "dev", "eth0"]),
        ):
            done = subprocess.run(
                ["ip", "netns", "exec", node.namespace, *argv], capture_output=True, text=True
            )
            state[f"{node.name} {what}"] = sorted(done.stdout.splitlines())
    state["delayers"] = sorted(
        str(p.pid)
        for p in processes_with_marker(env.load_state().env_id)
        if "link_delay" in " ".join(p.cmdline())
    )
    return state


def _experiment(case: str, name: str, tmp_path: Path) -> Path:
    """The experiment file of ``case``: a shipped one (a control beside its scenario), strict_pg_stall
    in hog mode, or the slow_engine test experiment with the case's mechanism written in; each
    with a short baseline, as the runner is killed once the fault acts and nothing is judged."""
    path = SLOW_ENGINE if Path(name) == SLOW_ENGINE else EXPERIMENTS / name
    if path.parent.name == "controls":
        # The control names its scenario by a relative path: the shortened scenario goes there.
        _shortened(case, EXPERIMENTS / path.name, tmp_path / path.name)
        control = tmp_path / "controls" / path.name
        control.parent.mkdir()
        control.write_text(path.read_text())
        return control
    return _shortened(case, path, tmp_path / f"{case.replace('+', '_')}.yaml")


def _shortened(case: str, path: Path, written: Path) -> Path:
    text = path.read_text()
    if case == "stall_placement_group+hog":
        assert "mode: strict_spread" in text
        text = text.replace("mode: strict_spread", "mode: hog")
    if path == SLOW_ENGINE:
        text = text.replace("MECHANISM", case.split("+", 1)[1])
    text, baselines = re.subn(
        r"^baseline: \{duration_s: \d+\}$", f"baseline: {{duration_s: {BASELINE_S}}}", text, flags=re.M
    )
    assert baselines == 1, f"{path} declares no baseline to shorten"
    written.write_text(text)
    return written


def _slow_groups_left(env: LocalEnvironment) -> list[str]:
    """Cgroups of ``env``'s slowed replicas that still exist (cleanup must remove them).

    Only this environment's: the unit tests slow their stand-in replicas in groups of their own
    environment's name, which a unit run killed half-way can leave behind, and which this
    environment's cleanup must leave alone.
    """
    from inferchaos.primitives.cpu_quota import find_cpu_controller, slow_group_name

    controller = find_cpu_controller()
    if controller is None:
        return []
    return sorted(p.name for p in controller.root.glob(f"{slow_group_name(env.name, '')}*") if p.is_dir())


def _queues_empty(env: LocalEnvironment) -> bool:
    for record in env.replica_records():
        try:
            snapshot = parse_metrics(http.get(record.metrics_url, timeout=2).text)
        except httpx.HTTPError:
            return False
        if snapshot.waiting or snapshot.running:
            return False
    return True


@pytest.mark.parametrize("case", list(CASES))
def test_cleanup_after_kill_9_restores_the_environment(
    case: str, local_env: LocalEnvironment, integration_home: Path, tmp_path: Path
) -> None:
    from ray.util.placement_group import placement_group_table
    from ray.util.state import list_actors

    from inferchaos.faults.ray.actors import LEAK_NAMESPACE
    from inferchaos.primitives.cpu_quota import cpu_quota_available
    from inferchaos.primitives.memory_budget import budgets_available

    name, acting = CASES[case]
    if name == "gpu_memory_squat.yaml" and not budgets_available()[0]:
        host_lacks(f"no replica memory budgets here: {budgets_available()[1]}")
    if case == "slow_engine+cgroup" and cpu_quota_available()[0] is None:
        host_lacks(f"no writable cpu cgroup here: {cpu_quota_available()[1]}")
    if case in NETWORK_CASES:
        skip_unless_on_netns(local_env)
    experiment = _experiment(case, name, tmp_path)
    wait_until_whole(local_env)
    links_before = _link_state(local_env) if case in NETWORK_CASES else {}
    ledger = Ledger(integration_home / "ledger")
    env = {**os.environ, "INFERCHAOS_HOME": str(integration_home)}
    runner = subprocess.Popen(
        [sys.executable, "-m", "inferchaos.cli.main", "run", str(experiment), "--out", str(tmp_path)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            live = {h.fault for h in ledger.entries() if h.injected_at is not None}
            if acting <= live or runner.poll() is not None:
                break
            time.sleep(0.25)
        assert runner.poll() is None, "the runner ended before the fault acted"
        assert acting <= {h.fault for h in ledger.entries()}, ledger.entries()
    finally:
        os.killpg(runner.pid, signal.SIGKILL)
        runner.wait(timeout=30)
    assert not ledger.is_empty(), "a runner killed with -9 cannot have reverted anything"

    cleanup = subprocess.run(
        [sys.executable, "-m", "inferchaos.cli.main", "cleanup"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    print(f"{case}: cleanup rc {cleanup.returncode}: {cleanup.stdout[-1500:]}")
    assert cleanup.returncode == 0, cleanup.stdout + cleanup.stderr
    for fault in acting:
        assert f"reverted {fault}" in cleanup.stdout
    assert ledger.is_empty()
    assert stopped_processes(local_env) == []
    assert _slow_groups_left(local_env) == [], "cleanup must remove a slowed replica's cgroup"
    assert local_env.health_check_in_force() == "progress", "a blinded health check must be restored"
    wait_until_whole(local_env)
    local_env.connect_ray()
    assert [
        a for a in list_actors(filters=[("ray_namespace", "=", LEAK_NAMESPACE)]) if a.state != "DEAD"
    ] == []
    assert [pg for pg in placement_group_table().values() if pg["state"] not in ("REMOVED", "CREATED")] == []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not _queues_empty(local_env):
        time.sleep(1.0)
    assert _queues_empty(local_env), "a killed flood must not leave requests in vLLM"
    if case in NETWORK_CASES:
        after = _link_state(local_env)
        # A node replaced after the cut outlived Ray's node-death budget (the runner was killed
        # mid-cut, and on a slow machine cleanup can come too late for a worker) adds its own
        # namespace, which is the environment's; the lost node's namespace, once removed, can
        # hold nothing.
        kept = {k: v for k, v in after.items() if k in links_before and k != "host"}
        gone = {k for k in links_before if k not in after and k not in ("host", "delayers")}
        assert kept == {k: v for k, v in links_before.items() if k != "host" and k not in gone}, (
            "a rule, qdisc or delayer was left"
        )
        lost = {n.name for n in local_env.load_state().nodes if n.lost}
        assert {k.split(" ")[0] for k in gone} <= lost, (
            f"{sorted(gone)} vanished without their node being lost"
        )
        assert set(links_before["host"]) - set(after["host"]) <= {
            n.namespace for n in local_env.load_state().nodes if n.lost
        }
