"""`inferchaos gameday --env kind|cluster` through the real CLI against the fake cluster.

The Kubernetes layer is real end to end (driver, faults, k8s probe, official client, fake API
server with its control plane); Ray, vLLM and the canary answer from the runner's fakes, as in
test_k8s_experiments.py. The real local environment is never started.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from inferchaos.cli.main import main
from inferchaos.faults.ledger import Ledger
from inferchaos.run.preflight import PreflightReport
from inferchaos.run.probe_set import k8s_probe_of
from inferchaos.run.suites import SUITES
from inferchaos.steady_state.canary import CanaryPace
from inferchaos.steady_state.probe_base import Probe
from tests.fakes.apiserver import FakeApiServer, FakeCluster
from tests.fakes.k8s_objects import CONTROL_PLANE
from tests.fakes.k8s_scenario import EXPERIMENTS, ClusterWithFakeRay, k8s_env_config, k8s_state
from tests.fakes.scripted_world import FakeProbeFactory, World

K8S_SUITE = SUITES["k8s"]
# A folder suite runs in file-name order.
FOLDER_ORDER = sorted(K8S_SUITE)


def _cli(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> int:
    """Run `inferchaos ARGV` in-process; its exit code."""
    monkeypatch.setattr("sys.argv", ["inferchaos", *argv])
    with pytest.raises(SystemExit) as done:
        main()
    return int(done.value.code or 0)


@pytest.fixture
def fake_world(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI builds the real driver with Ray and vLLM faked, and the runner's fake probes plus the k8s probe."""
    fakes = FakeProbeFactory(World())

    def probes(environment: Any, pace: CanaryPace, named: frozenset[str]) -> tuple[list[Probe], Any]:
        built, canary = fakes(environment, pace, named)
        return [*built, k8s_probe_of(environment)], canary

    monkeypatch.setattr("inferchaos.cli.environment.K8sEnvironment", ClusterWithFakeRay)
    monkeypatch.setattr("inferchaos.cli.run_command.build_probes", probes)
    # Ray and vLLM do not answer over HTTP here, so the preflight (test_k8s_preflight.py runs it
    # against every layer) is taken as passed; what it was asked to check is kept.
    monkeypatch.setattr("inferchaos.cli.environment.ensure_preflight_passes", _passed_preflight)


PREFLIGHT_FAULTS: list[list[str]] = []


def _passed_preflight(environment: Any, faults: Any = None) -> PreflightReport:
    PREFLIGHT_FAULTS.append(list(faults or []))
    return PreflightReport(environment.name, ())


@pytest.fixture
def config(fake_server: FakeApiServer, world_cluster: tuple[FakeCluster, Any], tmp_path: Path) -> Path:
    """The cluster config of the fake cluster (its allow-list: the kind namespace and GPU pool)."""
    _, runtime = world_cluster
    path, _ = k8s_env_config(
        tmp_path,
        "cluster",
        fake_server.url,
        "127.0.0.1:6379",
        "http://127.0.0.1:1",
        "http://127.0.0.1:1",
        runtime,
    )
    return path


def _cluster_copies(folder: Path, edits: dict[str, Any] | None = None) -> Path:
    """The k8s suite copied for a cluster (docs/clusters.md: environment.name: cluster), with short windows.

    ``edits`` maps an experiment name to a function changing its mapping before it is written.
    """
    folder.mkdir(parents=True, exist_ok=True)
    for name in K8S_SUITE:
        data = yaml.safe_load((EXPERIMENTS / f"{name}.yaml").read_text())
        data["environment"] = {"name": "cluster"}
        data["baseline"] = {"duration_s": 1.5}
        data["method"][0]["pauses"] = {"after": 4}
        if edits and name in edits:
            edits[name](data)
        (folder / f"{name}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return folder


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


@pytest.fixture
def quiet_cluster(
    fake_server: FakeApiServer, world_cluster: tuple[FakeCluster, Any]
) -> Iterator[FakeCluster]:
    """The seeded cluster with its request log cleared: what a test's command sent, and only that."""
    cluster, _ = world_cluster
    with cluster.lock:
        cluster.requests.clear()
    yield cluster


@pytest.mark.parametrize("env_name", ["kind", "cluster"])
def test_gameday_refuses_without_a_config(
    env_name: str,
    home: Path,
    quiet_cluster: FakeCluster,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _cli(["gameday", "--env", env_name], monkeypatch) == 2
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
    fake_world: None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = tmp_path / "reports"
    assert _cli(["gameday", "--config", str(config), "--out", str(out), *argv], monkeypatch) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert quiet_cluster.requests == []
    assert Ledger().entries() == []
    assert not out.exists()


def test_kind_suite_on_kind_is_the_default_and_matches(
    fake_server: FakeApiServer,
    world_cluster: tuple[FakeCluster, Any],
    home: Path,
    fake_world: None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, runtime = world_cluster
    path, _ = k8s_env_config(
        tmp_path,
        "kind",
        fake_server.url,
        "127.0.0.1:6379",
        "http://127.0.0.1:1",
        "http://127.0.0.1:1",
        runtime,
    )
    assert _cli(["gameday", "--env", "kind", "--config", str(path), "--dry-run"], monkeypatch) == 0
    out = capsys.readouterr().out
    assert [line.split(" — ")[0] for line in out.splitlines() if line.startswith("experiment: ")] == [
        f"experiment: {name}" for name in K8S_SUITE
    ]


def test_dry_run_prints_every_plan_and_touches_nothing(
    config: Path,
    home: Path,
    quiet_cluster: FakeCluster,
    fake_world: None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = k8s_state(quiet_cluster)
    suite = _cluster_copies(tmp_path / "suite")
    out = tmp_path / "reports"
    PREFLIGHT_FAULTS.clear()
    argv = [
        "gameday",
        "--env",
        "cluster",
        "--config",
        str(config),
        "--suite",
        str(suite),
        "--out",
        str(out),
        "--dry-run",
    ]
    assert _cli(argv, monkeypatch) == 0
    printed = capsys.readouterr().out
    for name in K8S_SUITE:
        assert f"experiment: {name}" in printed
    assert printed.count("would touch:") == len(K8S_SUITE)
    assert "dry run: 3 experiment(s) planned, nothing touched" in printed
    # The preflight ran first, for exactly the suite's faults.
    (asked,) = PREFLIGHT_FAULTS
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
    fake_world: None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    suite = _cluster_copies(tmp_path / "suite", {"k8s_node_loss": _control_plane_node})
    out = tmp_path / "reports"
    assert (
        _cli(
            [
                "gameday",
                "--env",
                "cluster",
                "--config",
                str(config),
                "--suite",
                str(suite),
                "--out",
                str(out),
            ],
            monkeypatch,
        )
        == 2
    )
    err = capsys.readouterr().err
    assert CONTROL_PLANE in err and len(err.strip().splitlines()) == 1, err
    assert quiet_cluster.mutating_requests() == []
    assert Ledger().entries() == []
    assert not out.exists()


def test_gameday_runs_the_suite_writes_the_index_and_exits_with_the_worst(
    config: Path,
    home: Path,
    quiet_cluster: FakeCluster,
    fake_world: None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = k8s_state(quiet_cluster)
    # The squat breaches an SLO no cluster can meet: the day fails (1), the others pass.
    suite = _cluster_copies(tmp_path / "suite", {"gpu_ledger_squat": _impossible_slo})
    out = tmp_path / "reports"
    argv = [
        "gameday",
        "--env",
        "cluster",
        "--config",
        str(config),
        "--suite",
        str(suite),
        "--out",
        str(out),
        "--interval",
        "0.25",
    ]
    assert _cli(argv, monkeypatch) == 1

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


def _short_recovery(data: dict[str, Any]) -> None:
    """The fake control plane heals in seconds; a held fault must not make the test wait kind's minutes."""
    data["recovery"]["within_s"] = 6


def test_gameday_controls_pass_the_day_only_when_every_control_fails_for_its_reason(
    config: Path,
    home: Path,
    quiet_cluster: FakeCluster,
    fake_world: None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each k8s scenario passes on the healthy fake cluster and fails, in the k8s layer, under its control."""
    before = k8s_state(quiet_cluster)
    suite = _cluster_copies(tmp_path / "suite", dict.fromkeys(K8S_SUITE, _short_recovery))
    (suite / "controls").mkdir()
    for name in K8S_SUITE:
        # The shipped control, pointed at the cluster copy beside it.
        shipped = yaml.safe_load((EXPERIMENTS / "controls" / f"{name}.yaml").read_text())
        shipped["control"]["of"] = f"../{name}.yaml"
        (suite / "controls" / f"{name}.yaml").write_text(yaml.safe_dump(shipped))
    out = tmp_path / "reports"
    argv = [
        "gameday",
        "--env",
        "cluster",
        "--config",
        str(config),
        "--suite",
        str(suite),
        "--out",
        str(out),
        "--interval",
        "0.25",
        "--controls",
    ]
    code = _cli(argv, monkeypatch)
    printed = capsys.readouterr().out
    verdicts = {
        p.parent.name.split("-", 2)[2]: json.loads(p.read_text())
        for p in out.glob("gameday-*/*/verdict.json")
    }
    # Each run's verdict in a line: a CaptureResult as the message would be cut to 240 characters.
    assert code == 0, "\n".join(
        f"{name}: {v['status']}: {v['reason']} {v.get('control') or ''}"
        for name, v in sorted(verdicts.items())
    )
    for name in K8S_SUITE:
        assert verdicts[name]["status"] == "passed", verdicts[name]["reason"]
        control = verdicts[f"{name}.control"]
        assert control["status"] == "failed", control["reason"]
        assert control["triage"]["layer"] == "k8s"
        assert control["control"]["result"] == "failed_as_expected", control["control"]
    assert printed.count("control: failed as expected") >= len(K8S_SUITE)
    assert Ledger().entries() == []
    assert k8s_state(quiet_cluster) == before
    junit = next(out.glob(f"gameday-*/*-{K8S_SUITE[0]}.control/junit.xml")).read_text()
    assert 'failures="0"' in junit and "fails when" in junit


def test_gameday_controls_refuse_a_scenario_without_a_control_before_anything_runs(
    config: Path,
    home: Path,
    quiet_cluster: FakeCluster,
    fake_world: None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    suite = _cluster_copies(tmp_path / "suite")
    out = tmp_path / "reports"
    argv = [
        "gameday",
        "--env",
        "cluster",
        "--config",
        str(config),
        "--suite",
        str(suite),
        "--out",
        str(out),
        "--controls",
    ]
    assert _cli(argv, monkeypatch) == 2
    err = capsys.readouterr().err
    assert "ships no negative control" in err and len(err.strip().splitlines()) == 1, err
    assert quiet_cluster.mutating_requests() == []
    assert not out.exists()
