"""Network probe: whether the head reaches each worker node's host, and how long a handshake takes.

Read from the head's side (this host, on the bridge's address): a TCP connect to a closed
port of the worker's address is answered by the worker's kernel with a reset, so the reset
proves the link works in both directions without any service listening, and its round trip
is the link's RTT (inferchaos/primitives/netns.py). A partition in either direction leaves the
connect unanswered. A worker node that died leaves its namespace (and kernel) behind, so node
loss does not read as a network fault: ``network.node_reachable`` 0 means a link that carries
nothing.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from inferchaos.layers import Layer
from inferchaos.primitives.netns import handshake_rtt
from inferchaos.steady_state.probe_base import Sample

# Below the sampler's per-read bound (80 % of its 1 s tick), so a cut link reads as 0 rather
# than as a failed read of the whole probe; a link this slow is unusable for Ray anyway.
CONNECT_TIMEOUT_S = 0.5


@dataclass(frozen=True)
class NodeLink:
    """A worker node's address, as the head reaches it."""

    node: str
    address: str


class NetworkProbe:
    """``network.node_reachable{node}`` (1 or 0) and ``network.handshake_rtt_s{node}`` for each worker link."""

    name = "network"
    layer = Layer.NETWORK

    def __init__(self, links: list[NodeLink]) -> None:
        self._links = links

    async def read(self) -> list[Sample]:
        rtts = await asyncio.gather(
            *(
                asyncio.to_thread(handshake_rtt, link.address, timeout_s=CONNECT_TIMEOUT_S)
                for link in self._links
            )
        )
        samples: list[Sample] = []
        for link, rtt in zip(self._links, rtts, strict=True):
            labels = {"node": link.node}
            samples.append(Sample("network.node_reachable", 0.0 if rtt is None else 1.0, dict(labels)))
            if rtt is not None:
                samples.append(Sample("network.handshake_rtt_s", rtt, dict(labels)))
        return samples
