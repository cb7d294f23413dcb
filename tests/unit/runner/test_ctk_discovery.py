"""``chaos discover --no-install inferchaos``: Chaos Toolkit's own command lists what an experiment can name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[3]
CHAOS = Path(sys.executable).with_name("chaos")


def _providers(activities: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {
        (a["provider"]["module"], a["provider"]["func"])
        for a in activities
        if a.get("provider", {}).get("type") == "python"
    }


def _named_by_experiment_files() -> set[tuple[str, str]]:
    named: set[tuple[str, str]] = set()
    for path in [*ROOT.glob("experiments/*.yaml"), *ROOT.glob("experiments/controls/*.yaml")]:
        doc = yaml.safe_load(path.read_text())
        hypothesis = doc.get("steady-state-hypothesis") or {}
        named |= _providers(
            [*hypothesis.get("probes", []), *doc.get("method", []), *doc.get("rollbacks", [])]
        )
    return named


def test_chaos_discover_lists_every_activity_the_experiments_name_and_touches_nothing(tmp_path: Path) -> None:
    out = tmp_path / "discovery.json"
    # A home with no environment in it: discovery must describe that, not start one.
    env = {**os.environ, "INFERCHAOS_HOME": str(tmp_path / "home")}
    done = subprocess.run(
        [str(CHAOS), "discover", "--no-install", "--discovery-path", str(out), "inferchaos"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    discovery = json.loads(out.read_text())
    assert discovery["extension"]["name"] == "inferchaos"
    listed = {(a["mod"], a["name"]): a for a in discovery["activities"]}
    missing = _named_by_experiment_files() - set(listed)
    assert not missing, f"experiment files name activities discovery does not list: {sorted(missing)}"
    flood = listed[("inferchaos.ctk.vllm_actions", "flood_kv_cache")]
    assert flood["type"] == "action" and {"target", "overfill", "configuration"} <= {
        a["name"] for a in flood["arguments"]
    }
    assert listed[("inferchaos.ctk.vllm_actions", "rollback_flood_kv_cache")]["type"] == "action"
    assert listed[("inferchaos.run.hypothesis", "slo_observed")]["type"] == "probe"
    # Helpers that are no activity stay out.
    assert ("inferchaos.run.hypothesis", "value_decides") not in listed
    assert discovery["system"]["local"] is None and "inferchaos env up" in discovery["system"]["reason"]
    assert not (tmp_path / "home" / "env").exists()
