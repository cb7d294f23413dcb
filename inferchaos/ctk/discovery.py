"""What ``chaos discover --no-install inferchaos`` reports: every activity an experiment file can
name, and the environment it would act on.

Chaos Toolkit imports the package named on its command line and calls its ``discover``
(inferchaos/__init__.py hands over to :func:`discover` here); ``chaos init`` then builds an
experiment from the activities listed. Each provider module lists its activities in
``__all__``, which is what chaoslib's discovery reads.
"""

from __future__ import annotations

import logging
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from chaoslib.discovery.discover import discover_actions, discover_probes, initialize_discovery_result

from inferchaos.ctk import k8s_probes, live, providers
from inferchaos.errors import InferchaosError
from inferchaos.faults.registry import action_modules
from inferchaos.run import hypothesis

logger = logging.getLogger(__name__)

EXTENSION = "inferchaos"
PROBE_MODULES = (providers.__name__, hypothesis.__name__, live.__name__, k8s_probes.__name__)


def _version() -> str:
    try:
        return version(EXTENSION)
    except PackageNotFoundError:
        return "unknown"


def discover(discover_system: bool = True) -> dict[str, Any]:
    """chaoslib's discovery document: the fault actions, their rollbacks and the probes, and,
    with ``discover_system``, the local environment's status (``None``, with the reason, when
    none is up: discovery never starts or changes anything)."""
    discovery: dict[str, Any] = initialize_discovery_result(EXTENSION, _version(), "inferchaos")
    for module in action_modules():
        discovery["activities"].extend(discover_actions(module))
    for module in PROBE_MODULES:
        discovery["activities"].extend(discover_probes(module))
    if discover_system:
        try:
            discovery["system"] = {"local": providers.environment_status()}
        except InferchaosError as e:
            logger.info("no local environment to describe: %s", e)
            discovery["system"] = {"local": None, "reason": str(e)}
    return discovery
