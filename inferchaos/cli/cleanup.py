"""`inferchaos cleanup`: revert every injection the ledger still holds, on whichever environment
it was made.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from inferchaos.cli.environment import k8s_env
from inferchaos.cli.options import CONFIG_OPTION
from inferchaos.environments.k8s_env import K8sEnvironment
from inferchaos.environments.local.env import LocalEnvironment
from inferchaos.errors import ConfigError, FaultError
from inferchaos.faults.ledger import Ledger
from inferchaos.faults.registry import get_fault
from inferchaos.layers import K8S_ENVS, EnvName


@click.command("cleanup")
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
                k8s_envs[handle.env] = k8s_env(handle.env, config_file)
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
        click.echo(
            f"inferchaos: cleanup incomplete: {len(left)} entry(ies) left in {ledger.folder}: "
            f"{', '.join(left)}",
            err=True,
        )
        sys.exit(1)
