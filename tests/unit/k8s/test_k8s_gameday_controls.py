"""`inferchaos gameday --controls --env cluster` against the fake cluster: each k8s scenario passes
on the healthy cluster and fails, in the k8s layer, under its shipped control.

Its own file, so that this game day of six runs and the suite's in test_k8s_gameday.py run
on different test workers. Fixtures: conftest.py; helpers: tests/fakes/k8s_gameday.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from inferchaos.faults.ledger import Ledger
from tests.fakes.apiserver import FakeCluster
from tests.fakes.k8s_gameday import K8S_SUITE, cluster_copies, cluster_gameday, gameday_cli
from tests.fakes.k8s_scenario import EXPERIMENTS, k8s_state

pytestmark = pytest.mark.long_running


def _short_recovery(data: dict[str, Any]) -> None:
    """The fake control plane heals in seconds; a held fault must not make the test wait kind's minutes."""
    data["recovery"]["within_s"] = 6


def test_gameday_controls_pass_the_day_only_when_every_control_fails_for_its_reason(
    config: Path,
    home: Path,
    quiet_cluster: FakeCluster,
    fake_world: list[list[str]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each k8s scenario passes on the healthy fake cluster and fails, in the k8s layer, under its control."""
    before = k8s_state(quiet_cluster)
    suite = cluster_copies(tmp_path / "suite", dict.fromkeys(K8S_SUITE, _short_recovery))
    (suite / "controls").mkdir()
    for name in K8S_SUITE:
        # The shipped control, pointed at the cluster copy beside it.
        shipped = yaml.safe_load((EXPERIMENTS / "controls" / f"{name}.yaml").read_text())
        shipped["control"]["of"] = f"../{name}.yaml"
        (suite / "controls" / f"{name}.yaml").write_text(yaml.safe_dump(shipped))
    out = tmp_path / "reports"
    argv = cluster_gameday(config, suite, out, "--interval", "0.25", "--controls")
    code = gameday_cli(argv, monkeypatch)
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
    fake_world: list[list[str]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    suite = cluster_copies(tmp_path / "suite")
    out = tmp_path / "reports"
    argv = cluster_gameday(config, suite, out, "--controls")
    assert gameday_cli(argv, monkeypatch) == 2
    err = capsys.readouterr().err
    assert "ships no negative control" in err and len(err.strip().splitlines()) == 1, err
    assert quiet_cluster.mutating_requests() == []
    assert not out.exists()
