"""Advertise fake ``nvidia.com/gpu`` on kind nodes.

kind has no GPUs, but the Kubernetes scheduler never looks at cards: it reads the numbers in
each node's status. Writing them through the node *status* subresource (a JSON patch, as the
Kubernetes docs advertise extended resources) gives the GPU ledger the macro-layer faults need.

    python -m environments.kind.fake_gpus --context kind-inferchaos --selector inferchaos.io/pool=gpu --count 2
"""

from __future__ import annotations

import argparse
import logging
import sys

from kubernetes.client import ApiClient, CoreV1Api
from kubernetes.client.exceptions import ApiException
from kubernetes.config import new_client_from_config
from kubernetes.config.config_exception import ConfigException
from urllib3.exceptions import HTTPError

from inferchaos.errors import ConfigError, EnvironmentStartError, InferchaosError
from inferchaos.primitives.kube.api import object_name

logger = logging.getLogger(__name__)


def _pointer(*parts: str) -> str:
    """A JSON pointer; ``nvidia.com/gpu`` must be escaped as ``nvidia.com~1gpu``."""
    return "/" + "/".join(p.replace("~", "~0").replace("/", "~1") for p in parts)


def advertise_fake_gpus(
    api_client: ApiClient, label_selector: str, count: int, resource: str = "nvidia.com/gpu"
) -> list[str]:
    """Set capacity and allocatable ``resource`` to ``count`` on every node ``label_selector`` picks.

    Returns the node names; EnvironmentStartError when none matches or the API refuses.
    """
    core = CoreV1Api(api_client)
    value = str(count)
    patch = [
        {"op": "add", "path": _pointer("status", "capacity", resource), "value": value},
        # The kubelet derives allocatable from capacity on its next status update; set it now.
        {"op": "add", "path": _pointer("status", "allocatable", resource), "value": value},
    ]
    try:
        names = [object_name(n) for n in core.list_node(label_selector=label_selector).items]
        if not names:
            raise EnvironmentStartError(f"no node matches {label_selector!r}: nothing to give fake GPUs to")
        for name in names:
            core.patch_node_status(name, patch)
            logger.info("node %s now advertises %s %s", name, value, resource)
    except (ApiException, HTTPError) as e:
        raise EnvironmentStartError(f"could not advertise fake {resource}: {e}") from e
    return names


def main(argv: list[str] | None = None) -> int:
    """Command line of :func:`advertise_fake_gpus`; exit 2 on failure, as environment errors do."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--context", required=True, help="kube context of the kind cluster")
    parser.add_argument("--selector", required=True, help="label selector of the nodes to equip")
    parser.add_argument("--count", type=int, default=2, help="GPUs per node")
    parser.add_argument("--resource", default="nvidia.com/gpu")
    args = parser.parse_args(argv)
    try:
        try:
            api_client = new_client_from_config(context=args.context, persist_config=False)
        except (ConfigException, OSError) as e:
            raise ConfigError(f"could not load kube context {args.context!r}: {e}") from e
        with api_client:
            names = advertise_fake_gpus(api_client, args.selector, args.count, args.resource)
    except InferchaosError as e:
        print(f"fake_gpus: {e}", file=sys.stderr)
        return e.exit_code
    print(f"{args.count} {args.resource} on {', '.join(names)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
