"""Game-day suites: which scenarios run, in what order, and on which environment.

A suite is either a built-in name (:data:`SUITES`) or a folder of experiment files, run in
file-name order. The folder form is for real clusters: the built-in Kubernetes experiments
name the kind environment (its namespace, Deployment and nodes), so a cluster runs copies
made for it (docs/clusters.md, "A safe game day on a real GPU cluster").
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from inferchaos.errors import ConfigError
from inferchaos.layers import EnvName
from inferchaos.run.packaged import EXPERIMENTS_DIR

# Faults that change the environment's shape (a node replaced, a replica restarted) run last.
SUITES: dict[str, tuple[str, ...]] = {
    "default": (
        "kv_flood",
        "actor_leak",
        "strict_pg_stall",
        "serve_controller_loss",
        "engine_hang",
        "slow_replica",
        # The network scenarios need `env up --network netns` (the default where it works);
        # on loopback they are skipped with the reason.
        "network_partition_short",
        "slow_link",
        "engine_death",
        "node_loss",
        "network_partition_long",
        "gpu_memory_squat",
    ),
    "quick": ("kv_flood", "strict_pg_stall"),
    "k8s": ("gpu_ledger_squat", "anti_affinity_pending", "k8s_node_loss"),
    # High availability of Ray's control plane: needs `env up --gcs-ft`.
    "ha": ("gcs_loss",),
}
# Suites whose faults need GCS fault tolerance in the local environment.
GCS_FT_SUITES: frozenset[str] = frozenset({"ha"})

# The suite a game day runs when --suite is not given.
DEFAULT_SUITE: dict[EnvName, str] = {EnvName.LOCAL: "default", EnvName.KIND: "k8s", EnvName.CLUSTER: "k8s"}


class _NamesEnvironment(Protocol):
    """What the environment check reads of a validated experiment (inferchaos.run.spec.ExperimentSpec)."""

    @property
    def path(self) -> Path: ...

    @property
    def env(self) -> str: ...


def default_suite(env_name: str) -> str:
    """The suite a game day on ``env_name`` runs by default."""
    try:
        return DEFAULT_SUITE[EnvName(env_name)]
    except ValueError as e:
        known = sorted(str(name) for name in DEFAULT_SUITE)
        raise ConfigError(f"no default suite for environment {env_name!r}; known: {known}") from e


def suite_paths(name: str) -> list[Path]:
    """The experiment files of suite ``name``: a built-in suite, or a folder's ``*.yaml`` files by name."""
    if name in SUITES:
        return [EXPERIMENTS_DIR / f"{scenario}.yaml" for scenario in SUITES[name]]
    folder = Path(name)
    if folder.is_dir():
        # ConfigMap volumes hold hidden ``..data`` entries beside the keys; the glob skips dotfiles.
        paths = sorted(p for p in folder.glob("*.y*ml") if p.suffix in (".yaml", ".yml") and p.is_file())
        if not paths:
            raise ConfigError(f"suite {name}: the folder holds no experiment files (*.yaml, *.yml)")
        return paths
    raise ConfigError(f"unknown suite {name!r}; known: {sorted(SUITES)}, or a folder of experiment files")


def ensure_suite_matches_env(suite: str, specs: Sequence[_NamesEnvironment], env_name: str) -> None:
    """Every experiment of ``suite`` must name ``env_name``, as `inferchaos run` requires of one."""
    for spec in specs:
        if spec.env != env_name:
            hint = (
                "; for a cluster, copy the experiments with environment.name: cluster and pass their folder as --suite"
                if env_name == EnvName.CLUSTER
                else ""
            )
            raise ConfigError(
                f"suite {suite}: {spec.path.name}: environment.name is {spec.env!r} but --env is {env_name!r}{hint}"
            )


def ensure_suite_fits_env(suite: str, gcs_ft: bool) -> None:
    """A suite that needs GCS fault tolerance refuses, in one line, an environment without it."""
    if suite in GCS_FT_SUITES and not gcs_ft:
        raise ConfigError(
            f"suite {suite} needs an environment started with --gcs-ft: run `inferchaos env up --gcs-ft` "
            f"(after `inferchaos env down`), or `inferchaos gameday --suite {suite} --gcs-ft` with no environment up"
        )
