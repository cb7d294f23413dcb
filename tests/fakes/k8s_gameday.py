"""Helpers of the `inferchaos gameday --env kind|cluster` tests against the fake cluster (their
fixtures: tests/unit/k8s/conftest.py).

The Kubernetes layer is real end to end (driver, faults, k8s probe, official client, fake API
server with its control plane); Ray, vLLM and the canary answer from the runner's fakes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from inferchaos.cli.main import main
from inferchaos.run.suites import SUITES
from tests.fakes.k8s_scenario import EXPERIMENTS

K8S_SUITE = SUITES["k8s"]


def gameday_cli(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> int:
    """Run `inferchaos ARGV` in-process; its exit code."""
    monkeypatch.setattr("sys.argv", ["inferchaos", *argv])
    with pytest.raises(SystemExit) as done:
        main()
    return int(done.value.code or 0)


def cluster_gameday(config: Path, suite: Path, out: Path, *extra: str) -> list[str]:
    """The arguments of `inferchaos gameday` on the cluster of ``config``, ``suite`` into ``out``."""
    return [
        "gameday",
        "--env",
        "cluster",
        "--config",
        str(config),
        "--suite",
        str(suite),
        "--out",
        str(out),
        *extra,
    ]


def cluster_copies(folder: Path, edits: dict[str, Callable[[dict[str, Any]], None]] | None = None) -> Path:
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
