"""The shipped scenarios are valid for both the Chaos Toolkit (`chaos validate`) and inferchaos."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from inferchaos.errors import ConfigError
from inferchaos.faults.base import TypedFault
from inferchaos.faults.registry import fault_names, get_fault
from inferchaos.run.spec import ensure_experiment_is_valid, load_and_validate

pytestmark = pytest.mark.long_running

REPO = Path(__file__).resolve().parents[3]
CHAOS = REPO / ".venv" / "bin" / "chaos"
SCENARIOS = sorted((REPO / "experiments").glob("*.yaml"))


# The Kubernetes scenarios run on the kind environment (tests/unit/k8s/test_k8s_experiments.py).
K8S_SCENARIOS = {"anti_affinity_pending", "gpu_ledger_squat", "k8s_node_loss"}


def test_there_are_sixteen_scenarios() -> None:
    assert [p.stem for p in SCENARIOS] == [
        "actor_leak",
        "anti_affinity_pending",
        "engine_death",
        "engine_hang",
        "gcs_loss",
        "gpu_ledger_squat",
        "gpu_memory_squat",
        "k8s_node_loss",
        "kv_flood",
        "network_partition_long",
        "network_partition_short",
        "node_loss",
        "serve_controller_loss",
        "slow_link",
        "slow_replica",
        "strict_pg_stall",
    ]


@pytest.mark.skipif(not CHAOS.is_file(), reason="the Chaos Toolkit CLI is not installed in .venv")
@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_chaos_validate_accepts_the_scenario(path: Path, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "HOME": str(tmp_path)}
    done = subprocess.run(
        [
            str(CHAOS),
            "--no-version-check",
            "--no-log-file",
            "--settings",
            str(tmp_path / "settings.yaml"),
            "validate",
            str(path),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "experiment syntax and semantic look valid" in done.stdout + done.stderr


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_load_and_validate_accepts_the_scenario(path: Path) -> None:
    spec = load_and_validate(path)
    assert spec.name == path.stem
    assert spec.env == ("kind" if path.stem in K8S_SCENARIOS else "local")
    assert spec.fault.duration_s > 0 and spec.baseline_s > 0
    assert spec.slos.slos, "a scenario without SLOs judges nothing"
    assert spec.raw["method"][spec.fault.index]["provider"]["func"] == spec.fault.func


def test_every_fault_parameter_is_settable_from_yaml() -> None:
    # The Chaos Toolkit action of `<layer>.<verb>` is `<verb>` in inferchaos.ctk.<layer>_actions,
    # and it takes exactly the fault's parameters, so chaoslib accepts each one in a YAML.
    for name in fault_names():
        fault = get_fault(name)
        if not isinstance(fault, TypedFault):
            continue  # a test's stand-in
        layer, verb = name.split(".", 1)
        module = importlib.import_module(f"inferchaos.ctk.{layer}_actions")
        action, rollback = getattr(module, verb), getattr(module, f"rollback_{verb}")
        wanted = {f.name for f in dataclasses.fields(fault.params_type)} | {"configuration", "secrets"}
        assert set(inspect.signature(action).parameters) == wanted, name
        assert set(inspect.signature(rollback).parameters) == set(fault.rollback_keys) | {
            "configuration",
            "secrets",
        }


def _kv_flood_with(**arguments: object) -> dict:
    raw = yaml.safe_load((REPO / "experiments" / "kv_flood.yaml").read_text())
    # method[0] is the sampler a plain `chaos run` runs beside the fault: the flood is method[1].
    raw["method"][1]["provider"]["arguments"].update(arguments)
    return raw


def test_parameters_the_old_wrappers_dropped_are_accepted() -> None:
    spec = ensure_experiment_is_valid(_kv_flood_with(saturate_timeout_s=45), Path("kv_flood.yaml"))
    assert spec.fault.fault == "vllm.flood_kv_cache"
    assert spec.fault.params["saturate_timeout_s"] == 45


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            {"concurrency": "lots"},
            r"kv_flood.yaml: method\[1\].provider.arguments.concurrency: .*must be int",
        ),
        ({"concurency": 4}, r"kv_flood.yaml: method\[1\].provider.arguments.concurency: unknown argument"),
        (
            {"prompt_fraction": 0.95},
            r"kv_flood.yaml: method\[1\].provider.arguments: .*prompt_fraction must be",
        ),
    ],
)
def test_bad_fault_arguments_are_one_line_naming_the_key(arguments: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as refused:
        ensure_experiment_is_valid(_kv_flood_with(**arguments), Path("kv_flood.yaml"))
    assert "\n" not in str(refused.value)
