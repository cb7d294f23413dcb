"""`inferchaos gameday`: a suite of experiments run in sequence against one environment.

Every experiment is validated and planned against the live environment before the first one
injects anything (``_plan_suite``); the runs then go one after another into one game-day
folder (``_run_suite``), each started on a whole environment (``wait_until_whole``).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import click
from click.core import ParameterSource

from inferchaos.cli.console import console
from inferchaos.cli.environment import ensure_preflight, faults_of, k8s_env, k8s_run_allow
from inferchaos.cli.options import (
    CONFIG_OPTION,
    FAIL_FAST_OPTION,
    INTERVAL_OPTION,
    LOAD_OPTION,
    OUT_OPTION,
    PUSHGATEWAY_OPTION,
    STRICT_OPTION,
    build_config,
    env_options,
)
from inferchaos.cli.run_command import new_run_dir, run_one
from inferchaos.environments.k8s_env import K8sEnvironment
from inferchaos.environments.local.env import LocalEnvironment
from inferchaos.errors import ConfigError, InferchaosError, Unsupported
from inferchaos.faults.base import FaultPlan
from inferchaos.layers import K8S_ENVS
from inferchaos.primitives.openai_stream import replicas_served
from inferchaos.reports.verdict_schema import EXIT_INTERRUPTED, EXIT_STRICT_SKIP, Status, Verdict
from inferchaos.run.controls import ControlSpec, controls_of, load_control
from inferchaos.run.env_config import AllowList, ensure_plan_is_allowed, load_env_config
from inferchaos.run.progress import Progress
from inferchaos.run.runner import describe_plan, plan_run, plan_sabotage
from inferchaos.run.spec import ExperimentSpec, load_and_validate
from inferchaos.run.suites import (
    SUITES,
    default_suite,
    ensure_suite_fits_env,
    ensure_suite_matches_env,
    suite_paths,
)

logger = logging.getLogger(__name__)


# Options of the embedded local environment that mean nothing on kind or a cluster.
LOCAL_ONLY_OPTIONS = (
    "workers",
    "gpus_per_worker",
    "replicas",
    "kv_cache_tokens",
    "front_door_port",
    "health_check",
    "gcs_ft",
    "prometheus",
    "network",
    "subnet",
    "layers",
    "hidden_size",
    "max_model_len",
    "keep_up",
)


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


def _plan_suite(
    specs: list[ExperimentSpec],
    environment: LocalEnvironment | K8sEnvironment,
    allow: AllowList | None,
    controls: Sequence[ControlSpec] = (),
) -> list[_PlannedRun]:
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
            if not isinstance(environment, LocalEnvironment):
                return
            # A replica Serve has just replaced answers /health before the front door routes to
            # it: a run started then would see the other replica take its whole baseline.
            expected = {r.name for r in status.vllm.replicas}
            served = replicas_served(
                status.front_door.url, status.model.name, expected, min(deadline, time.monotonic() + 10.0)
            )
            missing = sorted(expected - served)
            if not missing:
                # Each replica's latest Serve health check passed: one that failed checks while it
                # was broken (a frozen engine) is not replaced under the next run's plan.
                checked = environment.wait_for_passing_health_checks(
                    expected, min(deadline, time.monotonic() + 10.0)
                )
                missing = sorted(expected - checked)
                if not missing:
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


def _run_suite(
    planned: list[_PlannedRun],
    environment: LocalEnvironment | K8sEnvironment,
    out_dir: Path,
    interval: float,
    allow: AllowList | None,
    load: str | None,
    pushgateway: str | None = None,
    strict: bool = False,
    fail_fast: bool = False,
) -> int:
    """Run the planned experiments in order into one game-day folder, write the day's summary.json,
    junit.xml and openmetrics.txt there, index the reports; the worst exit code. With
    ``fail_fast`` each run that has already failed ends without its recovery phase.

    A negative control counts as 0 when its scenario failed as expected and 1 when it did not.
    A skipped run (this host cannot hold it) counts 0, or EXIT_STRICT_SKIP with ``strict``.
    """
    from inferchaos.reports.render import DayRun, render_day, render_index
    from inferchaos.reports.report_errors import ReportError

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
        run_dir = new_run_dir(day, run.spec.name)
        error = ""
        try:
            code, verdict = run_one(
                run.spec,
                environment,
                day,
                interval,
                False,
                allow,
                load,
                run.control,
                run_dir=run_dir,
                pushgateway=pushgateway,
                strict=strict,
                fail_fast=fail_fast,
            )
        except InferchaosError as e:
            # One experiment that cannot run is a finding of the day; the others still run.
            click.echo(f"inferchaos: {run.spec.name}: {e}", err=True)
            code, error = e.exit_code, str(e)
        if verdict is not None and verdict.status is Status.SKIPPED:
            skips.append((run.spec.name, verdict.reason))
        elif run.control is not None and code in (0, 1):
            outcome = verdict.control if verdict is not None else None
            proven = outcome is not None and outcome.proven
            proofs.append((run.spec.name, proven, outcome.message if outcome else "control left no verdict"))
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
        console.print(
            f"game-day summary: {day / 'summary.json'} (junit.xml, openmetrics.txt beside it)",
            highlight=False,
        )
    except ReportError as e:
        logger.error("could not write the game day's files into %s: %s", day, e)
    try:
        console.print(f"game-day index: {render_index(out_dir)}", highlight=False)
    except ReportError as e:
        logger.error("could not write the game-day index of %s: %s", out_dir, e)
    return worst


@click.command("gameday")
@env_options
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
@FAIL_FAST_OPTION
@click.pass_context
def gameday(
    ctx: click.Context,
    env_name: str,
    config_file: Path | None,
    suite: str | None,
    out_dir: Path,
    interval: float,
    dry_run: bool,
    keep_up: bool,
    with_controls: bool,
    load: str | None,
    pushgateway: str | None,
    strict: bool,
    fail_fast: bool,
    health_check: str,
    network: str,
    subnet: str,
    **knobs: int,
) -> None:
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
        k8s_environment = k8s_env(env_name, config_file)  # reads the config; connects to nothing yet
    suite_name = suite or default_suite(env_name)
    paths = suite_paths(suite_name)
    specs = [load_and_validate(path) for path in paths]
    ensure_suite_matches_env(suite_name, specs, env_name)
    controls = [load_control(path) for path in controls_of(paths)] if with_controls else []
    if k8s_environment is not None:
        ensure_preflight(k8s_environment, faults_of(specs, controls))
        allow = k8s_run_allow(k8s_environment)
        try:
            planned = _plan_suite(specs, k8s_environment, allow, controls)
            if dry_run:
                sys.exit(_print_plans(planned, strict))
            sys.exit(
                _run_suite(
                    planned, k8s_environment, out_dir, interval, allow, load, pushgateway, strict, fail_fast
                )
            )
        finally:
            k8s_environment.close()
    config = build_config(health_check, network, subnet, **knobs)
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
        worst = _run_suite(
            planned, environment, out_dir, interval, local_allow, load, pushgateway, strict, fail_fast
        )
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
