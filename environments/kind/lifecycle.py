"""Run the kind environment's shell scripts (``up.sh``, ``down.sh``) from Python.

The scripts are the source of truth for what the kind environment is; the driver only runs
them with this interpreter's venv, passes their output on, and turns a failure into an
EnvironmentStartError (exit code 2).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from inferchaos.errors import EnvironmentStartError

logger = logging.getLogger(__name__)

# The scripts, manifests and Dockerfile are package data beside this module: found in the
# installed package (or the checkout), never through the current directory.
KIND_DIR = Path(__file__).resolve().parent
SCRIPTS = ("up.sh", "down.sh")


def kind_script(script: str) -> Path:
    """The path of ``environments/kind/<script>`` in this install; EnvironmentStartError if it lacks it."""
    if script not in SCRIPTS:
        raise ValueError(f"unknown kind script {script!r}")
    path = KIND_DIR / script
    if not path.is_file():
        raise EnvironmentStartError(
            f"{path} is missing from this install of inferchaos (the kind scripts are package data): reinstall it"
        )
    return path


def run_kind_script(script: str, progress: Callable[[str], None], timeout_s: float = 3600.0) -> None:
    """Run ``environments/kind/<script>`` to its end, each output line passed to ``progress``.

    It runs in the caller's directory: up.sh's `inferchaos model` keeps the model under that
    directory's ``.inferchaos/``, as every other command does.
    """
    path = kind_script(script)
    # up.sh calls the venv's `inferchaos model` and python: the venv this process runs in.
    env = {**os.environ, "VENV": sys.prefix}
    try:
        proc = subprocess.Popen(
            ["bash", str(path)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        )
    except OSError as e:
        raise EnvironmentStartError(f"could not run {path}: {e}") from e
    assert proc.stdout is not None
    last = ""
    try:
        for line in proc.stdout:
            last = line.rstrip() or last
            progress(last)
        code = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired as e:
        proc.kill()
        proc.wait()
        raise EnvironmentStartError(f"{path} did not finish within {timeout_s:g} s") from e
    if code != 0:
        raise EnvironmentStartError(f"{path} failed (exit {code}): {last}")
    logger.info("%s finished", path)
