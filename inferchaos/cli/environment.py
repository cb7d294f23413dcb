"""The environment a command acts on: opened from ``--env`` and ``--config``, its run allow-list,
and the preflight that gates ``run`` and ``gameday`` on kind and cluster.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import click

from inferchaos.cli.console import console
from inferchaos.environments.k8s_config import load_k8s_env_config
from inferchaos.environments.k8s_env import K8sEnvironment
from inferchaos.environments.local.env import LocalEnvironment
from inferchaos.errors import ConfigError
from inferchaos.layers import K8S_ENVS
from inferchaos.run.controls import ControlSpec
from inferchaos.run.env_config import AllowList
from inferchaos.run.preflight import PreflightFailed, PreflightReport, ensure_preflight_passes
from inferchaos.run.progress import Progress
from inferchaos.run.spec import ExperimentSpec


def k8s_env(env_name: str, config_file: Path | None, progress: Progress | None = None) -> K8sEnvironment:
    """The kind or cluster environment its config describes; ConfigError without one."""
    if config_file is None:
        raise ConfigError(
            f"--env {env_name} requires --config with an explicit allow-list; there is no default"
        )
    return K8sEnvironment(load_k8s_env_config(config_file, env_name), progress=progress)


def open_env(env_name: str, config_file: Path | None = None) -> LocalEnvironment | K8sEnvironment:
    """The environment ``--env`` names: kind/cluster from their config, or the local one."""
    if env_name in K8S_ENVS:
        return k8s_env(env_name, config_file)
    return LocalEnvironment()


def k8s_run_allow(environment: K8sEnvironment) -> AllowList:
    """The runner's allow-list of a kind/cluster config: the config's own, fenced to its Ray cluster.

    The Kubernetes faults check the full list (nodes too) themselves, in their plans.
    """
    allow = environment.config.allow
    return replace(allow, ray_addresses=allow.ray_addresses or (environment.config.ray.address,))


def faults_of(specs: Sequence[ExperimentSpec], controls: Sequence[ControlSpec] = ()) -> list[str]:
    """Every fault the experiments inject, and the controls (their scenario's and their sabotage)."""
    names = [spec.fault.fault for spec in specs]
    for control in controls:
        names += [control.scenario.fault.fault, *(step.fault for step in control.sabotage)]
    return names


def echo_missing(report: PreflightReport) -> None:
    """Each missing item on a line of its own, then the summary line, on stderr."""
    for item in report.missing:
        click.echo(f"inferchaos: missing: {item.line()}", err=True)
    click.echo(f"inferchaos: {report.summary()}", err=True)


def ensure_preflight(environment: K8sEnvironment, faults: Sequence[str]) -> None:
    """Run the preflight before anything is planned; exit 2 with the missing items when it fails.

    There is no flag to skip it: it only reads, it takes seconds, and what it finds missing
    would fail the run later, after a fault had already been injected.
    """
    try:
        report = ensure_preflight_passes(environment, faults)
    except PreflightFailed as e:
        echo_missing(e.report)
        environment.close()
        sys.exit(e.exit_code)
    console.print(report.summary(), highlight=False)
