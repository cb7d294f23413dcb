"""`inferchaos report`: render a run folder's reports again from its stored files."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("report")
@click.argument("run_dir", type=click.Path(path_type=Path, exists=True, file_okay=False))
def report(run_dir: Path) -> None:
    """Re-render report.html, junit.xml, summary.md and openmetrics.txt of a run folder from its stored files."""
    from inferchaos.reports.render import render_run

    for path in render_run(run_dir):
        click.echo(str(path))
