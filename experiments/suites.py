"""Game-day suites: which scenarios run, in what order."""

from __future__ import annotations

from pathlib import Path

from inferchaos.errors import ConfigError

EXPERIMENTS_DIR = Path(__file__).resolve().parent

# Faults that change the environment's shape (a node replaced, a replica restarted) run last.
SUITES: dict[str, tuple[str, ...]] = {
    "default": ("kv_flood", "actor_leak", "strict_pg_stall", "node_loss", "gpu_memory_squat"),
    "quick": ("kv_flood", "strict_pg_stall"),
}


def suite_paths(name: str) -> list[Path]:
    """The experiment files of suite ``name``."""
    if name not in SUITES:
        raise ConfigError(f"unknown suite {name!r}; known: {sorted(SUITES)}")
    return [EXPERIMENTS_DIR / f"{scenario}.yaml" for scenario in SUITES[name]]
