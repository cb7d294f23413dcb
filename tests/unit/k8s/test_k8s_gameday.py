"""`inferchaos gameday --env kind|cluster` through the real CLI against the fake cluster.

The Kubernetes layer is real end to end (driver, faults, k8s probe, official client, fake API
server with its control plane); Ray, vLLM and the canary answer from the runner's fakes, as in
test_k8s_experiments.py (fixtures: conftest.py; helpers: tests/fakes/k8s_gameday.py). The real local environment is
never started. The game day of the controls is test_k8s_gameday_controls.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from inferchaos.faults.ledger import Ledger
from tests.fakes.apiserver import FakeApiServer, FakeCluster
from tests.fakes.k8s_gameday import K8S_SUITE, cluster_copies, cluster_gameday, gameday_cli
from tests.fakes.k8s_objects import CONTROL_PLANE
from tests.fakes.k8s_scenario import faked_layers_config, k8s_state

pytestmark = pytest.mark.long_running


def _impossible_slo(data: dict[str, Any]) -> None:
    data["slos"].append(
        {
            "name": "impossible",
            "probe": "k8s.nodes_ready",
            "agg": "min",
            "op": ">=",
            "threshold": 99,
            "phase": "during",
        }
    )


def _control_plane_node(data: dict[str, Any]) -> None:
    """Aim the node loss at the control plane, which the allow-list's node_selector leaves out."""
    data["method"][0]["provider"]["arguments"]["node"] = CONTROL_PLANE


@pytest.mark.parametrize("env_name", ["kind", "cluster"])
def test_gameday_refuses_without_a_config(
    env_name: str,
    home: Path,
    quiet_cluster: FakeCluster,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert gameday_cli(["gameday", "--env", env_name], monkeypatch) == 2
    err = capsys.readouterr().err
    assert f"--env {env_name} requires --config" in err and len(err.strip().splitlines()) == 1
    assert quiet_cluster.requests == []
    assert Ledger().entries() == []


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--env", "cluster"],
            "suite k8s: gpu_ledger_squat.yaml: environment.name is 'kind' but --env is 'cluster'; "
            "for a cluster, copy the experiments",
        ),
        (
            ["--env", "cluster", "--suite", "default"],
            "suite default: kv_flood.yaml: environment.name is 'local'",
        ),
        (["--env", "cluster", "--suite", "nope"], "unknown suite 'nope'"),
        (["--env", "cluster", "--workers", "3"], "--workers applies to the local environment only"),
        (["--env", "cluster", "--interval", "0.1"], "--interval must be at least 0.25 s"),
    ],
)
def test_bad_suites_and_options_exit_2_before_anything_is_touched(
    argv: list[str],
    message: str,
    config: Path,
    home: Path,
    quiet_cluster: FakeCluster,
    fake_world: list[list[str]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = tmp_path / "reports"
    assert gameday_cli(["gameday", "--config", str(config), "--out", str(out), *argv], monkeypatch) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert quiet_cluster.requests == []
    assert Ledger().entries() == []
    assert not out.exists()


def test_kind_suite_on_kind_is_the_default_and_matches(
    fake_server: FakeApiServer,
    world_cluster: tuple[FakeCluster, Any],
    home: Path,
    fake_world: list[list[str]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, runtime = world_cluster
    path, _ = faked_layers_config(tmp_path, "kind", fake_server.url, runtime)
    assert gameday_cli(["gameday", "--env", "kind", "--config", str(path), "--dry-run"], monkeypatch) == 0
    out = capsys.readouterr().out
    assert [line.split(" — ")[0] for line in out.splitlines() if line.startswith("experiment: ")] == [
        f"experiment: {name}" for name in K8S_SUITE
    ]


def test_dry_run_prints_every_plan_and_touches_nothing(
    config: Path,
    home: Path,
    quiet_cluster: FakeCluster,
    fake_world: list[list[str]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = k8s_state(quiet_cluster)
    suite = cluster_copies(tmp_path / "suite")
    out = tmp_path / "reports"
    argv = cluster_gameday(config, suite, out, "--dry-run")
    assert gameday_cli(argv, monkeypatch) == 0
    printed = capsys.readouterr().out
    for name in K8S_SUITE:
        assert f"experiment: {name}" in printed
    assert printed.count("would touch:") == len(K8S_SUITE)
    assert "dry run: 3 experiment(s) planned, nothing touched" in printed
    # The preflight ran first, for exactly the suite's faults.
    (asked,) = fake_world
    assert sorted(asked) == [
        "k8s.force_anti_affinity_deadlock",
        "k8s.squat_gpu_ledger",
        "k8s.stop_node_container",
    ]
    assert quiet_cluster.mutating_requests() == []
    assert k8s_state(quiet_cluster) == before
    assert Ledger().entries() == []
    assert not out.exists()


def test_a_suite_refused_at_its_last_experiment_injects_nothing(
    config: Path,
    home: Path,
    quiet_cluster: FakeCluster,
    fake_world: list[list[str]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    suite = cluster_copies(tmp_path / "suite", {"k8s_node_loss": _control_plane_node})
    out = tmp_path / "reports"
    assert gameday_cli(cluster_gameday(config, suite, out), monkeypatch) == 2
    err = capsys.readouterr().err
    assert CONTROL_PLANE in err and len(err.strip().splitlines()) == 1, err
    assert quiet_cluster.mutating_requests() == []
    assert Ledger().entries() == []
    assert not out.exists()


def test_gameday_runs_the_suite_writes_the_index_and_exits_with_the_worst(
    config: Path,
    home: Path,
    quiet_cluster: FakeCluster,
    fake_world: list[list[str]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = k8s_state(quiet_cluster)
    # The squat breaches an SLO no cluster can meet: the day fails (1), the others pass.
    suite = cluster_copies(tmp_path / "suite", {"gpu_ledger_squat": _impossible_slo})
    out = tmp_path / "reports"
    argv = cluster_gameday(config, suite, out, "--interval", "0.25")
    assert gameday_cli(argv, monkeypatch) == 1

    verdicts = {
        p.parent.name.split("-", 2)[2]: json.loads(p.read_text())
        for p in out.glob("gameday-*/*/verdict.json")
    }
    assert {name: v["status"] for name, v in verdicts.items()} == {
        "anti_affinity_pending": "passed",
        "gpu_ledger_squat": "failed",
        "k8s_node_loss": "passed",
    }
    assert all(v["env"] == "cluster" and v["triage"]["layer"] == "k8s" for v in verdicts.values())
    index = (out / "index.html").read_text()
    assert all(name in index for name in K8S_SUITE)
    assert "game-day index" in capsys.readouterr().out
    assert Ledger().entries() == []
    assert k8s_state(quiet_cluster) == before
