"""Kubernetes (macro) layer faults; importing this package registers them.

See :mod:`inferchaos.primitives.kube.client` for what an environment must expose,
:mod:`inferchaos.primitives.kube.allowlist` for the blast-radius fence, and
:mod:`inferchaos.ctk.k8s_actions` for the Chaos Toolkit actions.
"""

from inferchaos.faults.k8s import node, pod, scheduler_ledger

__all__ = ["node", "pod", "scheduler_ledger"]
