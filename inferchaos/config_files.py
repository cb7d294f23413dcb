"""Reading the YAML config files users write (environment configs), with one-line errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from inferchaos.errors import ConfigError


def read_config_mapping(path: Path) -> dict[str, Any]:
    """The mapping at the top of the YAML file ``path``; ConfigError naming the file otherwise."""
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError as e:
        raise ConfigError(f"{path}: no such config file") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: YAML syntax error: {str(e).splitlines()[0]}") from e
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config must be a mapping")
    return data
