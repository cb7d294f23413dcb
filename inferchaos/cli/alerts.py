"""`inferchaos alerts check`: the command and its table; the check itself is in alerts_check.py."""

from __future__ import annotations

import sys

import click
from rich.table import Table
from rich.text import Text

from inferchaos.cli.alerts_check import AlertsCheck, check_alerts
from inferchaos.cli.console import console
from inferchaos.run.suites import SUITES


def _print_alerts_check(check: AlertsCheck) -> None:
    covered = sum(1 for c in check.coverage if c.covered_by)
    table = Table(
        title=f"inferchaos alerts check: {check.prometheus}, suite {check.suite} "
        f"({covered} of {len(check.coverage)} signatures covered)"
    )
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


@click.group("alerts")
def alerts_group() -> None:
    """Check a Prometheus' alerting rules against the signatures inferchaos' faults show."""


@alerts_group.command("check")
@click.option(
    "--prometheus",
    "prometheus_url",
    metavar="URL",
    required=True,
    help="The team's Prometheus (http or https, optionally with a path prefix), e.g. "
    "http://prometheus.monitoring:9090; its /api/v1/rules is read.",
)
@click.option(
    "--suite",
    default="default",
    show_default=True,
    help=f"The suite whose signatures must be covered ({', '.join(sorted(SUITES))} or a folder of "
    "experiment files).",
)
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
