"""inferchaos core: errors and paths shared by every layer.

The package is also a Chaos Toolkit extension: ``chaos discover --no-install inferchaos``
calls :func:`discover`.
"""

from __future__ import annotations

from typing import Any


def discover(discover_system: bool = True) -> dict[str, Any]:
    """Chaos Toolkit's discovery of inferchaos: every fault action, rollback and probe an
    experiment can name, and the local environment's status (inferchaos/ctk/discovery.py)."""
    # Imported here: `import inferchaos` must stay as light as the core modules it holds.
    from inferchaos.ctk.discovery import discover as discover_activities

    return discover_activities(discover_system)
