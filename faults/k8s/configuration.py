"""Build the environment the faults need from a Chaos Toolkit ``configuration`` and ``secrets``.

Keys read from ``configuration`` (``secrets`` holds only the token)::

    inferchaos_env: kind              # the name recorded in ledger entries (default "chaostoolkit")
    inferchaos_ledger: .inferchaos/ledger   # optional; default: inferchaos_home's, else the state folder's
    kube_context: kind-inferchaos     # required: the context to use, checked against the allow-list
    kubeconfig: ~/.kube/config        # optional; default: $KUBECONFIG or ~/.kube/config
    kube_api_url: https://host:6443   # optional: talk to this URL instead of reading a kubeconfig
    kube_ca_file: /path/ca.crt        # optional, with kube_api_url
    kube_in_cluster: true             # optional: inside a Pod, the client's in-cluster loader (its ServiceAccount)
    container_runtime: docker         # or podman: runs kind's node containers
    k8s_allow:                        # required: see inferchaos.primitives.kube.allowlist.AllowList
      contexts: [kind-inferchaos]
      namespaces: [inferchaos]
      node_selector: inferchaos.io/pool=gpu
      max_targets: 1

    secrets: {kube_token: ...}        # bearer token, with kube_api_url
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from inferchaos.errors import ConfigError
from inferchaos.primitives.kube.allowlist import AllowList
from inferchaos.primitives.kube.client import K8sTarget, connect_in_cluster, connect_kubeconfig, connect_url

# As Chaos Toolkit passes them to every activity: YAML mappings, or None where the experiment has none.
Configuration = dict[str, Any] | None
Secrets = dict[str, Any] | None


@dataclass
class ChaosToolkitEnv:
    """The duck-typed environment (``name``, ``k8s``) the faults act through."""

    name: str
    k8s: K8sTarget


def env_from_configuration(configuration: Configuration, secrets: Secrets) -> ChaosToolkitEnv:
    """The environment described by a Chaos Toolkit configuration; ConfigError when incomplete."""
    config = configuration or {}
    context = config.get("kube_context")
    if not context:
        raise ConfigError("configuration needs kube_context: the kube context the faults may act on")
    allow_block = config.get("k8s_allow")
    if not isinstance(allow_block, dict):
        raise ConfigError(
            "configuration needs a k8s_allow block (contexts, namespaces, node_selector, max_targets)"
        )
    allow = AllowList.from_dict(allow_block)
    runtime = str(config.get("container_runtime", "docker"))
    in_cluster = config.get("kube_in_cluster", False)
    if not isinstance(in_cluster, bool):
        raise ConfigError(f"configuration: kube_in_cluster must be true or false, got {in_cluster!r}")
    if in_cluster:
        if config.get("kube_api_url") or config.get("kubeconfig"):
            raise ConfigError(
                "configuration: kube_in_cluster reads the Pod's ServiceAccount; drop kube_api_url and kubeconfig"
            )
        target = connect_in_cluster(context, allow, runtime=runtime)
    elif config.get("kube_api_url"):
        token = (secrets or {}).get("kube_token")
        target = connect_url(
            str(config["kube_api_url"]),
            context,
            allow,
            token=token,
            runtime=runtime,
            ca_file=config.get("kube_ca_file"),
        )
    else:
        kubeconfig = config.get("kubeconfig")
        target = connect_kubeconfig(
            context,
            allow,
            runtime=runtime,
            config_file=os.path.expanduser(kubeconfig) if kubeconfig else None,
        )
    return ChaosToolkitEnv(name=str(config.get("inferchaos_env", "chaostoolkit")), k8s=target)
