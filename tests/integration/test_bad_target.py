"""A target the environment does not have: refused once the environment answers, before anything is injected.

Validation cannot know the replicas (tests/unit/runner/test_runner_bad_input.py shows the file
passes it); the fault's plan asks the running environment and must refuse replica-9 in one
line that names it and the replicas there are, with exit 2, an empty ledger and no run folder.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from env_checks import skip_unless_on_netns

from inferchaos.environments.local.env import LocalEnvironment
from inferchaos.faults.ledger import Ledger

pytestmark = pytest.mark.integration

BAD_TARGET = Path(__file__).resolve().parents[1] / "fixtures" / "bad_experiments" / "unknown_target.yaml"


def test_run_on_an_unknown_target_exits_2_naming_it_and_the_known_replicas(
    local_env: LocalEnvironment, integration_home: Path, tmp_path: Path
) -> None:
    ledger = Ledger(integration_home / "ledger")
    assert ledger.is_empty(), "an earlier test left the ledger non-empty; this test cannot judge it"
    known = sorted(replica.name for replica in local_env.status().vllm.replicas)
    assert known and "replica-9" not in known, known
    out = tmp_path / "runs"
    result = subprocess.run(
        [sys.executable, "-m", "inferchaos.cli.main", "run", str(BAD_TARGET), "--out", str(out)],
        env={**os.environ, "INFERCHAOS_HOME": str(integration_home)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout, result.stderr[-2000:]
    assert len(lines) == 1, f"expected one line on stderr, got:\n{result.stderr}"
    assert f"{BAD_TARGET}: method[0].provider.arguments: " in lines[0], lines[0]
    assert "replica-9" in lines[0], lines[0]
    for name in known:
        assert name in lines[0], f"the line must name the replicas there are ({known}): {lines[0]}"
    assert ledger.is_empty(), "nothing may be injected for an unknown target"
    assert not out.exists(), "a refused experiment must not leave a run folder"


UNKNOWN_WORKER = BAD_TARGET.with_name("unknown_worker.yaml")


def test_a_partition_of_a_worker_that_does_not_exist_exits_2_and_makes_nothing(
    local_env: LocalEnvironment, integration_home: Path, tmp_path: Path
) -> None:
    from inferchaos.primitives.netns import host_names

    skip_unless_on_netns(local_env)
    workers = sorted(n.name for n in local_env.load_state().nodes if not n.is_head and not n.lost)
    before = sorted(host_names())
    out = tmp_path / "runs"
    result = subprocess.run(
        [sys.executable, "-m", "inferchaos.cli.main", "run", str(UNKNOWN_WORKER), "--out", str(out)],
        env={**os.environ, "INFERCHAOS_HOME": str(integration_home)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr[-2000:]
    assert len(lines) == 1, f"expected one line on stderr, got:\n{result.stderr}"
    assert (
        f"network.partition_node: no live worker node named 'worker-9'; workers: {', '.join(workers)}"
        in lines[0]
    )
    assert Ledger(integration_home / "ledger").is_empty()
    assert not out.exists()
    assert sorted(host_names()) == before, "a refused partition must make no namespace, link or rule"
