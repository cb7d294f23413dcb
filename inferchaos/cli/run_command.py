"""`inferchaos run`: one experiment (or negative control), and ``run_one``, which a game day
calls for each of its runs: the run, its printed verdict and its optional Pushgateway push.
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

import click

from inferchaos.cli.console import console
from inferchaos.cli.environment import ensure_preflight, faults_of, k8s_env, k8s_run_allow
from inferchaos.cli.options import (
    CONFIG_OPTION,
    ENV_OPTION,
    FAIL_FAST_OPTION,
    INTERVAL_OPTION,
    LOAD_OPTION,
    OUT_OPTION,
    PUSHGATEWAY_OPTION,
    STRICT_OPTION,
)
from inferchaos.environments.k8s_env import K8sEnvironment
from inferchaos.environments.local.env import LocalEnvironment
from inferchaos.errors import ConfigError, Unsupported
from inferchaos.layers import K8S_ENVS
from inferchaos.load.locust_runner import load_probe_factory
from inferchaos.reports.verdict_schema import EXIT_INTERRUPTED, EXIT_STRICT_SKIP, Status, Verdict
from inferchaos.run.controls import ControlSpec, is_control_file, load_control
from inferchaos.run.env_config import AllowList, load_env_config
from inferchaos.run.packaged import resolve_experiment
from inferchaos.run.probe_set import build_probes
from inferchaos.run.progress import Progress
from inferchaos.run.runner import RunOptions, run_experiment
from inferchaos.run.spec import ExperimentSpec, load_and_validate
from inferchaos.steady_state.detection import noticed_line

logger = logging.getLogger(__name__)


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
        console.print(
            f"  time to detect {ttd}, time to recover {ttr}; triage: {verdict.triage.layer} "
            f"({verdict.triage.reason})",
            highlight=False,
        )
    if verdict.detection:
        console.print(f"  {noticed_line(verdict.detection)}", highlight=False)
    if verdict.control is not None:
        proven = verdict.control.proven
        console.print(f"  [bold {'green' if proven else 'red'}]{verdict.control.message}[/]", highlight=False)
    console.print(f"  run folder: {run_dir}", highlight=False)


def _load_run(path: Path) -> tuple[ExperimentSpec, ControlSpec | None]:
    """An experiment file, or a control file with the scenario it runs."""
    if is_control_file(path):
        control = load_control(path)
        return control.run_spec(), control
    return load_and_validate(path), None


def _push_run(gateway: str, run_dir: Path) -> None:
    """Push a judged run's metrics; a failure is one line on stderr and leaves the verdict as it is."""
    from inferchaos.reports.pushgateway import push_run
    from inferchaos.reports.report_errors import PushError, ReportError

    try:
        key = push_run(gateway, run_dir)
    except (PushError, ReportError) as e:
        # The one line is the report; the log keeps the cause chain for -v.
        logger.info("push of %s failed", run_dir, exc_info=e)
        click.echo(f"inferchaos: pushgateway: {e}; the verdict and exit code stand", err=True)
        return
    console.print(f"  pushed to {gateway} ({', '.join(f'{k}={v}' for k, v in key.items())})", highlight=False)


def new_run_dir(out: Path, name: str) -> Path:
    """The folder of a run of ``name`` starting now, under ``out``."""
    return out / f"{time.strftime('%Y%m%d-%H%M%S')}-{name}"


def run_one(
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
    fail_fast: bool = False,
) -> tuple[int, Verdict | None]:
    """Run one experiment (or control) into ``out``: its exit code and verdict (None for a dry run).

    ``run_dir`` is its run folder, by default a new one under ``out``. With ``pushgateway`` its
    metrics are pushed there once it is judged; the push cannot change the exit code. A run
    this host cannot hold is skipped: exit 0, or EXIT_STRICT_SKIP with ``strict``. With
    ``fail_fast`` a run whose SLOs already failed before its recovery ends without it.
    """
    # Named here, so that Locust's CSVs (with --load) land in the run folder too.
    run_dir = run_dir or new_run_dir(out, spec.name)
    options = RunOptions(
        out_dir=out,
        interval_s=interval,
        dry_run=dry_run,
        allow=allow,
        run_dir=run_dir,
        control=control,
        fail_fast=fail_fast,
    )
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


@click.command("run")
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
@FAIL_FAST_OPTION
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
    fail_fast: bool,
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
        environment = k8s_env(env_name, config_file)
        allow = k8s_run_allow(environment)
    else:
        environment = LocalEnvironment()
        if config_file is not None:
            allow = load_env_config(config_file, env_name).allow
    if spec.env != env_name:
        raise ConfigError(f"{experiment}: environment.name is {spec.env!r} but --env is {env_name!r}")
    if isinstance(environment, K8sEnvironment):
        ensure_preflight(environment, faults_of([spec], [control] if control else []))
    sys.exit(
        run_one(
            spec,
            environment,
            out_dir,
            interval,
            dry_run,
            allow,
            load,
            control,
            pushgateway=pushgateway,
            strict=strict,
            fail_fast=fail_fast,
        )[0]
    )
