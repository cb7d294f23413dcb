"""Network-layer faults as Chaos Toolkit actions: ``<verb>`` and ``rollback_<verb>`` for each fault ``network.<verb>``.

Generated from the registry by :func:`inferchaos.ctk.fault_adapter.populate`; see :mod:`inferchaos.ctk.fault_adapter` for
what an action and a rollback do and which ``configuration`` keys they read.
"""

from __future__ import annotations

from inferchaos.ctk.fault_adapter import populate
from inferchaos.layers import Layer

__all__ = populate(globals(), Layer.NETWORK)
