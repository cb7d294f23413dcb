"""The `inferchaos` command line: the root group, the commands it holds, and ``main``.

Each command group lives in a module of its own (env.py, run.py, gameday.py, observe.py,
cleanup.py, alerts.py, report.py) and is registered here; none of them imports this module.
"""

from __future__ import annotations

import logging
import sys

import click

from inferchaos.cli.alerts import alerts_group
from inferchaos.cli.cleanup import cleanup
from inferchaos.cli.env_commands import env, model_build
from inferchaos.cli.gameday import gameday
from inferchaos.cli.observe import observe_cmd
from inferchaos.cli.report import report
from inferchaos.cli.run_command import run_cmd
from inferchaos.errors import ConfigError, InferchaosError


def _configure_logging(verbose: bool) -> None:
    """Send the ``inferchaos`` logger tree to stderr; third-party loggers stay as they are."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    log = logging.getLogger("inferchaos")
    log.setLevel(logging.INFO if verbose else logging.WARNING)
    log.addHandler(handler)
    log.propagate = False


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", is_flag=True, help="Log what inferchaos does, step by step.")
def cli(verbose: bool) -> None:
    """inferchaos: chaos and fault injection for LLM inference stacks (Kubernetes, Ray, vLLM).

    It injects the failures that take these stacks down, checks steady-state SLOs at every
    layer while they happen, proves recovery, and names the layer at fault.
    """
    _configure_logging(verbose)


cli.add_command(env)
cli.add_command(model_build)
cli.add_command(run_cmd)
cli.add_command(gameday)
cli.add_command(observe_cmd)
cli.add_command(cleanup)
cli.add_command(alerts_group)
cli.add_command(report)


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
