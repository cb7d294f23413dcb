"""Where inferchaos keeps its state on this machine.

State lives under ``.inferchaos/`` in the working directory (or ``$INFERCHAOS_HOME``) so that
other processes — the CLI, tests, a later ``inferchaos cleanup`` — can attach to it.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def state_root() -> Path:
    """The ``.inferchaos`` folder that holds every piece of local state."""
    override = os.environ.get("INFERCHAOS_HOME")
    root = Path(override) if override else Path.cwd() / ".inferchaos"
    return root.resolve()


def model_cache_dir() -> Path:
    """Folder of generated tiny models, one sub-folder per size configuration."""
    return state_root() / "models"


def local_env_dir() -> Path:
    """State of the running embedded local environment."""
    return state_root() / "env" / "local"


def short_scratch_dir(tag: str) -> Path:
    """A short path under /tmp unique to this state root.

    Ray puts Unix sockets under its temp dir and Unix socket paths are limited to 107
    bytes, so a deep checkout cannot host them; the hash keeps two checkouts apart.
    """
    digest = hashlib.sha1(str(state_root()).encode()).hexdigest()[:8]
    return Path("/tmp") / f"ic-{digest}-{tag}"
