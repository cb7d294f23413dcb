"""The experiments that ship with inferchaos, and `inferchaos run NAME` resolving to one.

They are package data beside this module (``experiments/*.yaml`` and their negative controls
in ``experiments/controls/``), so an installed wheel finds them in site-packages and a checkout
in the repository, whatever the current directory. A path always wins: ``kv_flood`` is the
packaged experiment only where no file or folder of that name exists.
"""

from __future__ import annotations

import logging
from pathlib import Path

from inferchaos.errors import ConfigError

logger = logging.getLogger(__name__)

EXPERIMENTS_DIR = (Path(__file__).resolve().parents[1] / "experiments").resolve()
CONTROLS_DIR = "controls"
SUFFIX = ".yaml"
# What names an experiment file rather than a packaged experiment.
SUFFIXES = (".yaml", ".yml")


def packaged_experiments() -> dict[str, Path]:
    """Every packaged experiment by name, then every control as ``controls/<name>``, each sorted."""
    scenarios = {p.stem: p for p in sorted(EXPERIMENTS_DIR.glob(f"*{SUFFIX}")) if p.is_file()}
    controls = {
        f"{CONTROLS_DIR}/{p.stem}": p
        for p in sorted((EXPERIMENTS_DIR / CONTROLS_DIR).glob(f"*{SUFFIX}"))
        if p.is_file()
    }
    return scenarios | controls


def _known_names(packaged: dict[str, Path]) -> str:
    """The packaged names in one short clause: the scenarios, then which of them ship a control."""
    scenarios = [name for name in packaged if "/" not in name]
    # A scenario's further controls are ``controls/<name>.<variant>``.
    controlled = sorted({name.split("/", 1)[1].split(".", 1)[0] for name in packaged if "/" in name})
    variants = [name for name in packaged if "/" in name and "." in name.split("/", 1)[1]]
    if controlled == sorted(scenarios):
        more = f" (and {', '.join(variants)})" if variants else ""
        controls = f"{CONTROLS_DIR}/<name> for the negative control of each{more}"
    else:
        controls = f"negative controls: {', '.join(f'{CONTROLS_DIR}/{name}' for name in controlled)}"
    return f"packaged experiments: {', '.join(scenarios)}; {controls}"


def resolve_experiment(given: Path) -> Path:
    """The file ``given`` names: itself if it exists, else the packaged experiment or control of that name.

    A bare name (``kv_flood``) is ``experiments/kv_flood.yaml`` and ``controls/kv_flood`` its
    control, both from the installed package. A missing ``*.yaml`` is left to load_experiment;
    any other name that is neither is a one-line ConfigError (exit 2) listing the packaged names.
    """
    if given.exists() or given.is_symlink() or given.suffix in SUFFIXES:
        # A file of the user's, even a dangling link or a missing *.yaml: load_experiment says
        # what is wrong with it, and no packaged name is guessed from it.
        return given
    packaged = packaged_experiments()
    found = packaged.get(given.as_posix())
    if found is not None:
        logger.debug("%s is the packaged %s", given, found)
        return found
    raise ConfigError(
        f"{given}: no such experiment file, nor a packaged experiment of that name; {_known_names(packaged)}"
    )
