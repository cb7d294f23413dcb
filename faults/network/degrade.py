"""Degraded link: latency (± jitter), loss and a bandwidth limit on one worker node's link.

The kernels here have no netem, so the link is degraded the way inferchaos/primitives/link_delay.py
explains: every packet the worker sends is queued (an iptables NFQUEUE rule in its namespace's
egress) to a delayer process that releases it after its drawn delay or drops it, and a TBF
qdisc limits the rate. Each round trip across the link crosses that egress once, so
``delay_ms`` is what every round trip gains. The rule, the queue and the qdisc are named
after the injection and written to the ledger before they exist, and the delayer's pid and
start time once it runs, so revert (and `inferchaos cleanup` after a crash) removes exactly
them. If the delayer dies, the rule lets packets through untouched (``--queue-bypass``).

Evidence: the round trip of TCP handshakes from the head to the worker, and how many went
unanswered, measured just before and just after the link is degraded.
"""

from __future__ import annotations

import logging
import os
import statistics
import time
from dataclasses import asdict, dataclass

from inferchaos.errors import ConfigError
from inferchaos.faults.base import Evidence, FaultHandle, JsonObject, Planned, TypedFault, set_times
from inferchaos.faults.ledger import Ledger
from inferchaos.faults.network.worker_links import open_network, require_links, target_worker
from inferchaos.faults.registry import register
from inferchaos.layers import Layer
from inferchaos.params import InvalidValue
from inferchaos.primitives.capabilities import NetworkEnvironment
from inferchaos.primitives.link_delay import (
    AppliedDegradation,
    LinkDegradation,
    apply_link_degradation,
    missing_tools,
    nfqueue_commands,
    queue_number,
    revert_link_degradation,
    tbf_commands,
)
from inferchaos.primitives.netns import handshake_rtt
from inferchaos.primitives.processes import ENV_MARKER

logger = logging.getLogger(__name__)

NAME = "network.degrade_link"
# Handshakes per measurement: enough for a median, and for a loss of a few percent to show.
PROBES = 10
# A handshake slower than this is counted lost: the longest delay asked must fit under it.
PROBE_TIMEOUT_S = 3.0


@dataclass
class DegradeLinkParams:
    """Which worker (by name, or by the replica it hosts), and what its link suffers."""

    node: str | None = None
    replica: int | str | None = None
    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    loss_pct: float = 0.0
    rate_kbit: int | None = None
    allow_total_outage: bool = False

    def __post_init__(self) -> None:
        if self.node is not None and self.replica is not None:
            raise InvalidValue("node", "name the node or the replica it hosts, not both")
        degradation = self.degradation()
        if not degradation.needs_delayer and degradation.rate_kbit is None:
            raise InvalidValue(
                "delay_ms", "nothing to degrade: set delay_ms, jitter_ms, loss_pct or rate_kbit"
            )
        if self.delay_ms + self.jitter_ms > PROBE_TIMEOUT_S * 1000 / 2:
            raise InvalidValue("delay_ms", f"delay_ms + jitter_ms must be at most {PROBE_TIMEOUT_S * 500:g}")

    def degradation(self) -> LinkDegradation:
        """The link's degradation, validated (ConfigError in one line for a value out of range)."""
        return LinkDegradation(self.delay_ms, self.jitter_ms, self.loss_pct, self.rate_kbit)


@dataclass(frozen=True)
class Handshakes:
    """A burst of TCP handshakes with the worker: the median round trip and the share unanswered."""

    median_ms: float | None
    lost: float

    @classmethod
    def measure(cls, address: str) -> Handshakes:
        rtts = [handshake_rtt(address, timeout_s=PROBE_TIMEOUT_S) for _ in range(PROBES)]
        answered = [rtt * 1000 for rtt in rtts if rtt is not None]
        median = round(statistics.median(answered), 2) if answered else None
        return cls(median, round(1 - len(answered) / PROBES, 3))


@register
class DegradeLink(TypedFault[DegradeLinkParams, NetworkEnvironment]):
    """Slow, lossy or narrow link between one Ray worker node and the rest, until revert."""

    name = NAME
    layer = Layer.NETWORK
    params_type = DegradeLinkParams

    def _open(self, env: object) -> NetworkEnvironment:
        return open_network(self.name, env)

    def _plan(self, env: NetworkEnvironment, params: DegradeLinkParams) -> Planned:
        require_links(self.name, env)
        if missing := missing_tools():
            raise ConfigError(f"{self.name}: install {', '.join(missing)} (the distribution's packages)")
        record = target_worker(self.name, env, params.node, params.replica)
        hosted = {n.node_id for n in env.ray_nodes() if n.name == record.name}
        replicas = env.replica_records()
        hit = [r.name for r in replicas if r.node_id in hosted]
        d = params.degradation()
        parts = [f"{d.delay_ms:g} ms" + (f" ± {d.jitter_ms:g} ms" if d.jitter_ms else "") + " latency"]
        if d.loss_pct:
            parts.append(f"{d.loss_pct:g} % loss")
        if d.rate_kbit:
            parts.append(f"{d.rate_kbit} kbit/s")
        description = (
            f"degrade the link of worker node {record.name} ({record.address}, netns {record.namespace}): "
            f"{', '.join(parts)} on everything it sends, hosting {', '.join(hit) or 'no replica'}"
        )
        state: JsonObject = {
            "node_name": record.name,
            "namespace": record.namespace,
            "node_address": record.address,
            "replicas": list(hit),
        }
        return Planned(description, [f"netns:{record.namespace}", f"link:{record.name}"], state)

    def _act(
        self, env: NetworkEnvironment, params: DegradeLinkParams, handle: FaultHandle, ledger: Ledger
    ) -> None:
        s = handle.state
        d = params.degradation()
        s["before"] = asdict(Handshakes.measure(s["node_address"]))
        # What will exist, named after this injection, in the ledger before any of it does.
        s["iptables_rule"] = nfqueue_commands(s["namespace"], handle.id)[0] if d.needs_delayer else None
        s["queue"] = queue_number(handle.id) if d.needs_delayer else None
        s["tbf"] = tbf_commands(s["namespace"], handle.id, d.rate_kbit)[0] if d.rate_kbit else None
        ledger.record(handle)
        log_path = env.load_state().logs_dir / f"link-delayer-{handle.id}.log"
        applied = apply_link_degradation(
            s["namespace"], handle.id, d, log_path, {**os.environ, ENV_MARKER: env.load_state().env_id}
        )
        handle.injected_at = time.time()
        s["applied"] = asdict(applied)
        ledger.record(handle)
        s["during"] = asdict(Handshakes.measure(s["node_address"]))
        ledger.record(handle)
        logger.info("degraded %s's link: %s -> %s", s["node_name"], s["before"], s["during"])

    def _undo(
        self, env: NetworkEnvironment, params: DegradeLinkParams, handle: FaultHandle, ledger: Ledger
    ) -> None:
        s = handle.state
        d = params.degradation()
        applied = (
            AppliedDegradation(**s["applied"])
            if s.get("applied")
            else AppliedDegradation(s["namespace"], handle.id, d.rate_kbit)
        )
        revert_link_degradation(applied)
        s["after"] = asdict(Handshakes.measure(s["node_address"]))

    def _evidence(self, env: NetworkEnvironment, params: DegradeLinkParams, handle: FaultHandle) -> Evidence:
        s = handle.state
        before, during = s.get("before") or {}, s.get("during") or {}
        d = params.degradation()
        shown = []
        if d.delay_ms > 0 and before.get("median_ms") is not None and during.get("median_ms") is not None:
            added = during["median_ms"] - before["median_ms"]
            shown.append(added >= d.delay_ms / 2)
        if d.loss_pct > 0:
            shown.append(during.get("lost", 0) > before.get("lost", 0))
        if d.rate_kbit and not d.needs_delayer:
            shown.append(bool(s.get("applied")))
        bit = bool(shown) and any(shown)
        symptoms = {
            "node": s["node_name"],
            "asked": {
                "delay_ms": d.delay_ms,
                "jitter_ms": d.jitter_ms,
                "loss_pct": d.loss_pct,
                "rate_kbit": d.rate_kbit,
            },
            "handshake_median_ms_before": before.get("median_ms"),
            "handshake_median_ms_during": during.get("median_ms"),
            "handshakes_lost_before": before.get("lost"),
            "handshakes_lost_during": during.get("lost"),
            "handshake_median_ms_after": (s.get("after") or {}).get("median_ms"),
            "replicas_on_the_link": s["replicas"],
        }
        reason = (
            f"handshakes with {s['node_name']} took {during.get('median_ms')} ms (median) against "
            f"{before.get('median_ms')} ms before, {during.get('lost', 0):.0%} unanswered"
        )
        if not bit:
            reason = f"the link of {s['node_name']} did not degrade as asked: {reason}"
        return Evidence(
            bit=bit,
            reason=reason,
            symptoms=symptoms,
            timestamps=set_times({"injected_at": handle.injected_at}),
        )
