"""The platform steady state: what "steady" means for the whole platform as its users meet it.

Declared once here and shared by every scenario (README "What steady means"). A scenario adds
its own SLOs to it and may declare what its fault is allowed to take out while it acts
(:class:`PlatformAllowance`, the experiment's ``platform.allows``); it never drops the rest.

The platform's parts are read off the run's own baseline, so the same declaration fits the
local environment, a kind cluster and a real one: every replica seen at baseline (a ``replica``
label on a vLLM or canary reading, or on a failed read of a replica's server), Ray's node count,
Serve's RUNNING replicas, and, where the environment has a kube API, Kubernetes' Ready nodes,
each Deployment's ready replicas and the Pending Pods.

- **Baseline**: the front door serves, every replica answers its own server, and no request
  waits toward its timeout. A platform that is not steady before the fault fails the run: the
  failure was not injected, and the run names it.
- **During the fault**: every replica the scenario does not allow out keeps serving its share
  of users' requests and keeps answering its own server.
- **Recovery**: the front door serves, every replica seen at baseline serves again and answers
  its server, Ray's nodes, Serve's RUNNING replicas, Kubernetes' Ready nodes and each
  Deployment's ready replicas are back to their baseline counts, no Pod is Pending, and no
  slow-failure detector fires (:func:`detector_evolution`). The hold lasts at least one canary
  request timeout, so a request sent into a hung replica has time to fail inside it.
"""

from __future__ import annotations

import bisect
import logging
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from inferchaos.errors import ConfigError
from inferchaos.layers import TRIAGE_ORDER, Layer
from inferchaos.steady_state.detectors import DetectorConfig, stall_threshold_s
from inferchaos.steady_state.evaluation import (
    Judgement,
    PhaseWindow,
    SloResult,
    evaluate_slo,
    phase_windows,
    recover,
)
from inferchaos.steady_state.slo import BaselineScale, Op, Phase, RecoverySpec, Slo, SloSpec
from inferchaos.steady_state.timeline import Mark, Row, Timeline
from inferchaos.steady_state.triage import RULES, Condition, Match, Rule, TriageResult, match_rule, triage

logger = logging.getLogger(__name__)

# Every platform SLO's name starts with this, so a verdict, a report and triage tell the shared
# steady state from the scenario's own SLOs.
PREFIX = "platform."
# The recovery steady entry that no slow-failure detector fires (not an SLO of a probe).
NO_DETECTOR_FIRING = f"{PREFIX}no_detector_firing"
# Probes whose ``replica`` label names one of the platform's replicas.
_REPLICA_PROBES = ("vllm.", "canary.success", "canary.ttft_s")
# A replica's own server answers at least this share of its reads in every window while it
# serves: a busy replica misses a read or two under a flood; a frozen one answers none.
ANSWERS_FLOOR = 0.25
# Share of its own server's reads a replica answers at baseline and once recovered: a busy
# replica under load misses one read in a few (1 of 9 at a Locust-loaded baseline), a frozen,
# dead or restarting one answers none.
SERVER_FLOOR = 0.5
# Share of front-door requests that must succeed at baseline and once recovered (one miss in a
# window of twenty is a blip; a replica that fails every request it is sent is not).
FRONT_DOOR_FLOOR = 0.9
# Failed reads of a replica's server beyond which it stopped answering (triage's own bound).
MISSED_READS = 2
# A baseline request waiting longer than this share of its timeout for a first token is stuck.
BASELINE_STALL_SHARE = 0.25


@dataclass(frozen=True)
class PlatformAllowance:
    """What a scenario's fault may take out while it acts (the experiment's ``platform.allows``).

    ``replicas``: replicas that may stop serving during the fault (the one on a lost node, the
    one whose engine was killed). ``unread``: replicas that keep serving, judged by their users'
    requests, but whose own server the suite may fail to read while the fault acts (one behind
    a slowed link answers a read later than the probe waits). Everything else of the platform
    steady state still holds.
    """

    replicas: frozenset[str] = frozenset()
    unread: frozenset[str] = frozenset()


@dataclass(frozen=True)
class PlatformSteadyState:
    """The shared steady state as one run judges it."""

    request_timeout_s: float
    allows: PlatformAllowance = field(default_factory=PlatformAllowance)
    # The share of users' requests the scenario promises during its fault (its availability).
    availability: float = FRONT_DOOR_FLOOR
    detectors: DetectorConfig = field(default_factory=DetectorConfig)

    def hold_s(self, declared: float) -> float:
        """The recovery hold: the scenario's own, and at least one canary request timeout."""
        return max(declared, self.request_timeout_s)


PLATFORM_KEYS = ("allows",)
ALLOWS_KEYS = ("replicas", "unread")


def ensure_platform_is_valid(value: object) -> PlatformAllowance:
    """The experiment's ``platform`` key: ``{allows: {replicas: [replica-1]}}``; ConfigError
    led by the key path at the first problem."""
    if value is None:
        return PlatformAllowance()
    if not isinstance(value, Mapping):
        raise ConfigError(f"platform: must be a mapping with allows, got {type(value).__name__}")
    for key in value:
        if key not in PLATFORM_KEYS:
            raise ConfigError(f"platform.{key}: unknown key; use one of {', '.join(PLATFORM_KEYS)}")
    allows = value.get("allows") or {}
    if not isinstance(allows, Mapping):
        raise ConfigError(f"platform.allows: must be a mapping, got {type(allows).__name__}")
    for key in allows:
        if key not in ALLOWS_KEYS:
            raise ConfigError(f"platform.allows.{key}: unknown key; use one of {', '.join(ALLOWS_KEYS)}")
    names: dict[str, frozenset[str]] = {}
    for key in ALLOWS_KEYS:
        replicas = allows.get(key, [])
        if not isinstance(replicas, list) or not all(isinstance(r, str) and r for r in replicas):
            raise ConfigError(f"platform.allows.{key}: must be a list of replica names, got {replicas!r}")
        names[key] = frozenset(replicas)
    return PlatformAllowance(replicas=names["replicas"], unread=names["unread"])


def _replica_of(row: Row) -> str | None:
    if not row.probe.startswith(_REPLICA_PROBES):
        return None
    return row.labels.get("replica") or None


def baseline_replicas(timeline: Timeline) -> list[str]:
    """Every replica the baseline saw: a reading or a failed read that names it, in name order."""
    window = phase_windows(timeline).get(Phase.BASELINE)
    if window is None:
        return []
    seen = {name for row in timeline.rows if window.contains(row.t) and (name := _replica_of(row))}
    return sorted(seen)


def baseline_deployments(timeline: Timeline) -> list[str]:
    """Every Deployment whose ready replicas the baseline read, in name order."""
    window = phase_windows(timeline).get(Phase.BASELINE)
    if window is None:
        return []
    seen = {
        name
        for row in timeline.rows
        if row.probe == "k8s.deployment_ready_replicas"
        and row.ok
        and window.contains(row.t)
        and (name := row.labels.get("deployment"))
    }
    return sorted(seen)


def _back_to_baseline(name: str, probe: str, labels: dict[str, str] | None = None) -> Slo:
    """``platform.<name>``: the least reading of ``probe`` over the recovery's last 3 s is at
    least what the baseline read (a count of nodes or replicas back where it was)."""
    return Slo(
        f"{PREFIX}{name}",
        probe,
        "min",
        Op.GE,
        math.nan,
        Phase.RECOVERY,
        labels or {},
        window_s=3,
        scale=BaselineScale(times=1.0),
    )


def _has(timeline: Timeline, probe: str, window: PhaseWindow) -> bool:
    return any(row.probe == probe and row.ok and window.contains(row.t) for row in timeline.rows)


def _server_read(timeline: Timeline, replica: str, window: PhaseWindow) -> bool:
    """Whether the baseline read ``replica``'s own server at all (an answer or a failed read):
    an environment that cannot reach a replica's server is not judged on it."""
    return any(
        window.contains(row.t)
        and row.labels.get("replica") == replica
        and (row.probe == "vllm.healthy" or (row.error and row.probe.startswith("vllm")))
        for row in timeline.rows
    )


def platform_slos(timeline: Timeline, state: PlatformSteadyState) -> tuple[Slo, ...]:
    """The platform SLOs for this run, from the parts its baseline saw (none before a baseline)."""
    window = phase_windows(timeline).get(Phase.BASELINE)
    if window is None:
        return ()
    w = state.request_timeout_s
    slos: list[Slo] = []
    canary = _has(timeline, "canary.success", window)
    if canary:
        slos += [
            Slo(
                f"{PREFIX}front_door_before",
                "canary.success",
                "mean",
                Op.GE,
                FRONT_DOOR_FLOOR,
                Phase.BASELINE,
            ),
            Slo(
                f"{PREFIX}front_door_after",
                "canary.success",
                "mean",
                Op.GE,
                FRONT_DOOR_FLOOR,
                Phase.RECOVERY,
                window_s=w,
            ),
        ]
    if _has(timeline, "canary.oldest_wait_s", window):
        slos.append(
            Slo(
                f"{PREFIX}no_stuck_request_before",
                "canary.oldest_wait_s",
                "max",
                Op.LE,
                BASELINE_STALL_SHARE * w,
                Phase.BASELINE,
            )
        )
    served = {
        row.labels["replica"]
        for row in timeline.rows
        if row.probe == "canary.success"
        and row.ok
        and row.value == 1
        and "replica" in row.labels
        and window.contains(row.t)
    }
    for replica in baseline_replicas(timeline):
        labels = {"replica": replica}
        server = _server_read(timeline, replica, window)
        # Every replica that served at baseline must serve again; one the router sent nothing
        # then is judged by its own server alone.
        serves = replica in served
        if server:
            slos += [
                Slo(
                    f"{PREFIX}{replica}.answers_before",
                    "vllm.healthy",
                    "mean",
                    Op.GE,
                    SERVER_FLOOR,
                    Phase.BASELINE,
                    labels,
                ),
                Slo(
                    f"{PREFIX}{replica}.answers_after",
                    "vllm.healthy",
                    "mean",
                    Op.GE,
                    SERVER_FLOOR,
                    Phase.RECOVERY,
                    labels,
                    window_s=3,
                ),
            ]
        if serves:
            # Per request, not per window: the last request it answered before the hold
            # succeeded and none failed through it. A replica the router sends nothing for a
            # while is not failing; one whose every request times out is.
            slos.append(
                Slo(
                    f"{PREFIX}{replica}.serves_after",
                    "canary.success",
                    "min",
                    Op.GE,
                    1,
                    Phase.RECOVERY,
                    labels,
                )
            )
        if replica in state.allows.replicas:
            continue
        if server and replica not in state.allows.unread:
            slos.append(
                Slo(
                    f"{PREFIX}{replica}.answers_during",
                    "vllm.healthy",
                    "mean",
                    Op.GE,
                    ANSWERS_FLOOR,
                    Phase.DURING,
                    labels,
                    window_s=w,
                )
            )
        if serves:
            # Its own requests only: a request refused before any replica took it belongs to
            # the replica the fault took out as much as to this one.
            slos.append(
                Slo(
                    f"{PREFIX}{replica}.serves_during",
                    "canary.success",
                    "mean",
                    Op.GE,
                    state.availability,
                    Phase.DURING,
                    labels,
                    attributed_only=True,
                )
            )
    if _has(timeline, "ray.nodes_alive", window):
        slos.append(_back_to_baseline("nodes_after", "ray.nodes_alive"))
    if _has(timeline, "ray.serve_replicas", window):
        slos.append(_back_to_baseline("serve_replicas_after", "ray.serve_replicas", {"state": "RUNNING"}))
    if _has(timeline, "k8s.pods_pending", window):
        slos.append(
            Slo(
                f"{PREFIX}pods_pending_after", "k8s.pods_pending", "max", Op.LE, 0, Phase.RECOVERY, window_s=3
            )
        )
    # A node lost for good as the platform recovers leaves nothing Pending where no Pod wanted
    # it, and a scenario that did not touch nodes declares no SLO on them: the platform does.
    if _has(timeline, "k8s.nodes_ready", window):
        slos.append(_back_to_baseline("k8s_nodes_after", "k8s.nodes_ready"))
    # A Pod that runs but never passes its readiness again is not Pending either.
    for deployment in baseline_deployments(timeline):
        slos.append(
            _back_to_baseline(
                f"{deployment}.ready_after", "k8s.deployment_ready_replicas", {"deployment": deployment}
            )
        )
    return tuple(slos)


def with_platform(spec: SloSpec, timeline: Timeline, state: PlatformSteadyState) -> SloSpec:
    """``spec`` with the platform SLOs added, recovery judged on them too, held at least one
    request timeout. Before the baseline has been sampled it is ``spec`` as declared."""
    extra = platform_slos(timeline, state)
    if not extra:
        return spec
    own = {slo.name for slo in spec.slos}
    extra = tuple(slo for slo in extra if slo.name not in own)
    steady = tuple(slo.name for slo in extra if slo.phase is Phase.RECOVERY)
    rec = spec.recovery or RecoverySpec(within_s=30.0, hold_s=0.0, steady=())
    recovery = replace(rec, steady=(*rec.steady, *steady), hold_s=state.hold_s(rec.hold_s))
    return SloSpec(slos=(*spec.slos, *extra), recovery=recovery)


def promised_availability(slos: Sequence[Slo]) -> float:
    """The share of users' requests a scenario promises while its fault acts: its front-door
    availability SLO (the strictest reading of it where it declares several), else the front
    door's own floor."""
    promised = [
        slo.threshold
        for slo in slos
        if slo.phase is Phase.DURING
        and slo.probe == "canary.success"
        and not slo.labels
        and slo.agg == "mean"
        and slo.op is Op.GE
        and slo.after_s is None
        and slo.scale is None
    ]
    return min(promised, default=FRONT_DOOR_FLOOR)


def platform_failures(
    timeline: Timeline, spec: SloSpec, state: PlatformSteadyState, phases: Collection[Phase]
) -> tuple[str, ...]:
    """What of the platform steady state failed over ``timeline`` in ``phases``, one line each
    (``name: reason``): its SLOs of those phases and, where recovery is among them, a recovery
    that the whole steady state never confirmed because of the platform's own entries (a
    detector still firing, say). Empty: it held.

    For a judge that sees only the timeline (a plain `chaos run`); the runner's verdict names
    the failure with :func:`platform_failure` instead.
    """
    judged = with_platform(spec, timeline, state)
    windows = phase_windows(timeline)
    recovery = (
        recover(
            timeline,
            judged,
            windows,
            extra={NO_DETECTOR_FIRING: detector_evolution(timeline)[0]},
            judged_again=judged_again(judged),
        )
        if Phase.RECOVERY in phases and Phase.RECOVERY in windows
        else None
    )
    steady = set(judged.recovery.steady) if judged.recovery else set()
    failures = [
        f"{result.name}: {result.reason}"
        for slo in judged.slos
        if is_platform(slo.name)
        and slo.phase in phases
        and not (result := evaluate_slo(timeline, slo, windows, recovery, slo.name in steady)).ok
    ]
    if recovery is not None and not recovery.recovered and any(is_platform(n) for n in recovery.blocked_by):
        # Kept from holding by the platform's own entries, not only by the scenario's.
        failures.append(f"recovery: {recovery.reason}")
    return tuple(failures)


def judged_again(spec: SloSpec) -> tuple[str, ...]:
    """The platform's steady entries, judged again at the run's last sample (evaluation.recover)."""
    names = spec.recovery.steady if spec.recovery else ()
    return (*(name for name in names if is_platform(name)), NO_DETECTOR_FIRING)


def declaration(slo: Slo) -> dict[str, Any]:
    """``slo`` as an experiment would declare it: what a journal's probe replays it from."""
    entry: dict[str, Any] = {
        "name": slo.name,
        "probe": slo.probe,
        "agg": slo.agg,
        "op": slo.op.value,
        "phase": slo.phase.value,
    }
    entry["threshold"] = {"times_baseline": slo.scale.times} if slo.scale is not None else slo.threshold
    if slo.labels:
        entry["labels"] = dict(slo.labels)
    if slo.window_s is not None:
        entry["window_s"] = slo.window_s
    if slo.attributed_only:
        entry["attributed_only"] = True
    return entry


def is_platform(name: str) -> bool:
    """Whether an SLO (or recovery steady entry) is the shared platform steady state's."""
    return name.startswith(PREFIX)


# -- detectors -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Firing:
    """A slow-failure detector firing at one moment, for reasons."""

    t: float
    detector: str
    message: str


def _points(timeline: Timeline, probe: str, window: PhaseWindow) -> list[tuple[float, float, str]]:
    return sorted(
        (row.t, row.value, row.label_text())
        for row in timeline.rows
        if row.probe == probe and row.ok and window.contains(row.t)
    )


def detectors_firing(
    timeline: Timeline, window: PhaseWindow, config: DetectorConfig | None = None
) -> list[Firing]:
    """Each moment in ``window`` where a slow-failure detector fires (steady_state/detectors.py):

    - ``stalled_request``: the oldest canary request in flight has waited for its first token
      past the detector's threshold (its baseline's TTFT p95 times a factor, at least a floor);
    - ``placement_group_stall``: a placement group PENDING past its threshold while GPUs are free;
    - ``tasks_pending_with_free_gpus``: tasks waiting for a node while GPUs are free, for
      longer than the detector's duration.
    """
    config = config or DetectorConfig()
    firing: list[Firing] = []
    threshold = stall_threshold_s(timeline, config)
    for t, wait, _ in _points(timeline, "canary.oldest_wait_s", window):
        if wait >= threshold:
            firing.append(
                Firing(
                    t,
                    "stalled_request",
                    f"a request has waited {wait:.1f} s for its first token (threshold {threshold:.2f} s)",
                )
            )
    gpus = [(t, v) for t, v, _ in _points(timeline, "ray.gpus_available", window)]
    gpu_times = [t for t, _ in gpus]

    def free_gpus(t: float) -> float:
        at = bisect.bisect_right(gpu_times, t) - 1
        return gpus[at][1] if at >= 0 and t - gpus[at][0] <= 5.0 else 0.0

    for t, age, labels in _points(timeline, "ray.pg_pending_age_s", window):
        if age >= config.pg_min_pending_s and free_gpus(t) > 0:
            firing.append(
                Firing(
                    t,
                    "placement_group_stall",
                    f"placement group {{{labels}}} PENDING {age:g} s while {free_gpus(t):g} GPU(s) are free",
                )
            )
    since: float | None = None
    for t, pending, _ in _points(timeline, "ray.tasks_pending_node_assignment", window):
        if pending > 0 and free_gpus(t) > 0:
            since = t if since is None else since
            if t - since >= config.tasks_min_duration_s:
                firing.append(
                    Firing(
                        t,
                        "tasks_pending_with_free_gpus",
                        f"{pending:g} task(s) pending node assignment for {t - since:g} s with GPUs free",
                    )
                )
        else:
            since = None
    return sorted(firing, key=lambda f: f.t)


def detector_evolution(
    timeline: Timeline, config: DetectorConfig | None = None
) -> tuple[list[Judgement], list[Firing]]:
    """Recovery's view of the detectors: a judgement at every sample time after the revert, ok
    where none fires, and the firings themselves (for the reason recovery gives)."""
    window = phase_windows(timeline).get(Phase.RECOVERY)
    if window is None:
        return [], []
    firing = detectors_firing(timeline, window, config)
    fired_at = {f.t for f in firing}
    times = sorted({row.t for row in timeline.rows if window.contains(row.t)})
    return [Judgement(t, 0.0 if t not in fired_at else 1.0, t not in fired_at) for t in times], firing


# -- naming a failure the scenario did not inject ------------------------------------------------


@dataclass(frozen=True)
class PlatformFailure:
    """The first failure of the platform steady state that the scenario's fault does not explain.

    ``replica`` is the replica it concerns (None: the platform as a whole), ``phase`` where it
    showed, ``at`` its first sign in the timeline.
    """

    slo: str
    phase: str
    replica: str | None
    at: float
    reason: str

    def traced_to(self, result: TriageResult) -> PlatformFailure:
        """This failure, with the replica its triage found where it named none: a request stuck
        at the front door belongs to the replica whose own reading showed the cause."""
        labels = result.evidence.get("labels")
        replica = labels.get("replica") if isinstance(labels, dict) else None
        if self.replica is not None or not isinstance(replica, str) or not replica:
            return self
        return replace(self, replica=replica)

    def to_dict(self) -> dict[str, Any]:
        """The verdict.json ``platform.failure`` object."""
        return {
            "slo": self.slo,
            "phase": self.phase,
            "replica": self.replica,
            "at": self.at,
            "reason": self.reason,
        }


def _own_sign(timeline: Timeline, replica: str | None, window: PhaseWindow) -> float | None:
    """The first reading in ``window`` showing trouble with ``replica`` itself (for None, with
    the front door: any reading), or None where there is none."""
    for row in sorted(timeline.rows, key=lambda r: r.t):
        if not window.contains(row.t):
            continue
        own = replica is None or row.labels.get("replica") == replica or row.probe.endswith(f"@{replica}")
        if not own:
            continue
        if row.error and row.probe.startswith("vllm"):
            return row.t
        if row.ok and row.probe in ("canary.success", "vllm.healthy") and row.value == 0:
            return row.t
    return None


def _first_sign(timeline: Timeline, replica: str | None, window: PhaseWindow) -> float:
    """The first reading in ``window`` showing trouble with ``replica`` (or the front door)."""
    at = _own_sign(timeline, replica, window)
    return window.start if at is None else at


def platform_failure(
    timeline: Timeline,
    spec: SloSpec,
    results: Sequence[SloResult],
    state: PlatformSteadyState,
    recovery_failed: Iterable[str],
) -> PlatformFailure | None:
    """The first failed platform SLO (baseline, then during, then recovery) whose subject the
    scenario does not allow out; a failed recovery counts where a platform steady SLO was still
    failing. A replica the scenario allows out is the fault's own business in every phase."""
    windows = phase_windows(timeline)
    failing_steady = set(recovery_failed)
    order = {Phase.BASELINE.value: 0, Phase.DURING.value: 1, Phase.RECOVERY.value: 2}
    # Before the injection nothing was injected: any SLO failing there, the scenario's own too.
    candidates = [
        r
        for r in results
        if (is_platform(r.name) or r.phase == Phase.BASELINE.value) and (not r.ok or r.name in failing_steady)
    ]

    def replica_of(result: SloResult) -> str | None:
        return spec.by_name(result.name).labels.get("replica")

    def rank(result: SloResult) -> tuple[int, bool, bool]:
        # Within a phase, a failure that names its replica says more than the front door's, and
        # one with a sign of its own more than one failed only by requests no replica answered
        # for (those count against every replica: evaluation.UNATTRIBUTED_FAILURES).
        replica, window = replica_of(result), windows.get(Phase(result.phase))
        unsigned = replica is not None and window is not None and _own_sign(timeline, replica, window) is None
        return order.get(result.phase, 3), replica is None, unsigned

    for result in sorted(candidates, key=rank):
        replica = replica_of(result)
        if replica is not None and replica in state.allows.replicas:
            continue
        window = windows.get(Phase(result.phase))
        if window is None:
            continue
        at = _first_sign(timeline, replica, window)
        return PlatformFailure(result.name, result.phase, replica, at, result.reason)
    return None


def stop_condition_failure(
    timeline: Timeline, stop_condition: str, reason: str, state: PlatformSteadyState
) -> PlatformFailure | None:
    """A stop condition that fired while the fault may take out only some replicas: more went
    down than the fault explains. Where one replica is left that the fault may not take out,
    the failure is that replica's (the survivor beside a lost node that hung too); None where
    the fault may take out every replica, or none (the scenario's own triage names it then).

    Requests are sampled when they end: one sent into a hung survivor ends at its timeout,
    often after the stop condition has already ended the fault window, so the survivor's own
    SLOs of that window may never see it fail.
    """
    window = phase_windows(timeline).get(Phase.DURING)
    if window is None or not state.allows.replicas:
        return None
    kept = [replica for replica in baseline_replicas(timeline) if replica not in state.allows.replicas]
    if not kept:
        return None
    replica = kept[0] if len(kept) == 1 else None
    return PlatformFailure(
        stop_condition, Phase.DURING.value, replica, _first_sign(timeline, replica, window), reason
    )


def healed_replicas(timeline: Timeline, state: PlatformSteadyState, steady_at: float) -> dict[str, float]:
    """Replicas the scenario did not allow out that failed after the injection and before the
    platform was steady again (a request of theirs failed, or their server stopped answering):
    the platform replaced or healed them within the window. By replica, the first failure."""
    injected = phase_windows(timeline).get(Phase.DURING)
    if injected is None:
        return {}
    healed: dict[str, float] = {}
    missed: dict[str, list[float]] = {}
    for row in sorted(timeline.rows, key=lambda r: r.t):
        replica = row.labels.get("replica")
        if not replica or replica in state.allows.replicas or not injected.start <= row.t < steady_at:
            continue
        if row.error and row.probe.startswith("vllm"):
            if replica in state.allows.unread:
                # The fault may leave its server unread (a slowed link): its requests judge it.
                continue
            # A busy replica misses a read or two; one that stopped answering misses more in a
            # row (an answered read in between starts the count again).
            missed.setdefault(replica, []).append(row.t)
            if len(missed[replica]) > MISSED_READS:
                healed.setdefault(replica, missed[replica][0])
        elif row.ok and row.probe in ("canary.success", "vllm.healthy") and row.value == 0:
            healed.setdefault(replica, row.t)
        elif row.ok and row.probe == "vllm.healthy":
            missed.pop(replica, None)
    return healed


def failure_beside(timeline: Timeline, state: PlatformSteadyState, until: float) -> PlatformFailure | None:
    """The first replica the scenario does not allow out that failed after the injection (its
    server stopped answering, or a request of its failed), though every platform SLO judged
    held: the platform put it right before a window judged it, or the run ended (--fail-fast)
    before one could. A run that failed names it as the failure the scenario did not inject."""
    failed = healed_replicas(timeline, state, until)
    during = phase_windows(timeline).get(Phase.DURING)
    if not failed or during is None:
        return None
    replica, at = min(failed.items(), key=lambda item: item[1])
    phase = Phase.DURING if during.contains(at) else Phase.RECOVERY
    return PlatformFailure(
        f"{PREFIX}{replica}.answers_{'during' if phase is Phase.DURING else 'after'}",
        phase.value,
        replica,
        at,
        f"{replica} stopped answering or serving at +{at - during.start:.1f} s, outside what the fault may take out",
    )


@dataclass(frozen=True)
class FaultSymptom:
    """The reading that named the scenario's own fault: a rule's probe and condition on one series."""

    probe: str
    condition: str
    labels: Mapping[str, str] = field(default_factory=dict)

    def explains(self, match: Match) -> bool:
        """Whether ``match`` is this same symptom (same rule, same series). Ray's DEAD and ALIVE
        node counts are one series read twice: a lost node moves both."""
        if self.probe in NODE_LOSS_PROBES and match.rule.probe in NODE_LOSS_PROBES:
            return True
        return (match.rule.probe, match.rule.condition.value) == (self.probe, self.condition) and dict(
            match.labels
        ) == dict(self.labels)

    @classmethod
    def of(cls, result: TriageResult) -> FaultSymptom | None:
        """The symptom a triage result named, or None where no rule matched."""
        own = result.evidence
        if "probe" not in own or "condition" not in own:
            return None
        labels = own.get("labels")
        return cls(str(own["probe"]), str(own["condition"]), dict(labels) if isinstance(labels, dict) else {})


def fault_symptoms(
    timeline: Timeline,
    fault_layer: str,
    start: float,
    end: float,
    thresholds: Mapping[str, float],
    named: TriageResult | None,
    lost_a_node: bool = False,
) -> tuple[FaultSymptom, ...]:
    """The readings that show the scenario's own fault between ``start`` (its injection) and
    ``end``: the first of its own layer's triage rules to match, and what the scenario's triage
    named where that is the fault's layer. A triage that named another layer named a failure
    the fault did not cause (a replica that hung beside a lost node): leaving that out of
    :func:`triage_failure` would hide the very failure it is asked about.

    ``lost_a_node``: the fault's own evidence saw Ray mark the node it acted on DEAD (a
    partition longer than Ray's node-death budget). Ray's node counts are then the fault's
    symptom too, whatever layer the fault is in; and only then: a Ray fault that leaks actors or
    stalls a placement group loses no node, and a node Ray marks DEAD meanwhile is a failure
    beside it, even where it is the first of Ray's readings to move."""
    own_rules = [
        rule
        for rule in RULES
        if rule.layer.value == fault_layer and (lost_a_node or rule.probe not in NODE_LOSS_PROBES)
    ]
    found = triage(
        timeline,
        start,
        since=start,
        lookback_s=0.0,
        lookahead_s=max(end - start, 0.0),
        thresholds=thresholds,
        rules=own_rules,
    )
    symptoms = [s for s in (FaultSymptom.of(found),) if s is not None]
    if (
        named is not None
        and named.layer == fault_layer
        and (symptom := FaultSymptom.of(named)) is not None
        and (lost_a_node or symptom.probe not in NODE_LOSS_PROBES)
    ):
        symptoms.append(symptom)
    if lost_a_node:
        symptoms.append(FaultSymptom(NODE_LOSS_PROBES[0], Condition.RISING.value))
    return tuple(symptoms)


# Ray's own readings of a node lost: the node under a replica, not the replica, failed.
NODE_LOSS_PROBES = ("ray.nodes_dead", "ray.nodes_alive")
# Seconds after a failure's first sign in which its triage looks for the cause.
TRIAGE_LOOKAHEAD_S = 15.0


def _about(match: Match, replica: str) -> bool:
    return replica in (match.labels.get("replica"), match.labels.get("instance"))


def _about_others(row: Row, replica: str) -> bool:
    """Whether ``row`` speaks of something other than ``replica``: another replica, or a
    device, whose readings name no replica (a device that runs short while a replica holds it
    is its normal state, and says nothing of a replica that hung)."""
    if row.probe.startswith("device"):
        return True
    named = row.labels.get("replica") or (
        row.probe.partition("@")[2] if row.probe.startswith("vllm@") else ""
    )
    return bool(named) and named != replica


def _more_nodes_dead_than_the_fault_lost(
    timeline: Timeline, end: float, fault_symptoms: Sequence[FaultSymptom]
) -> bool:
    """Whether Ray counted more nodes DEAD by ``end`` than at the injection plus the one node the
    fault lost itself (where its symptoms say it lost one)."""
    injected = timeline.marks.get(Mark.INJECTED)
    if injected is None:
        return False
    lost = 1 if any(s.probe in NODE_LOSS_PROBES for s in fault_symptoms) else 0
    dead = [(r.t, r.value) for r in timeline.rows if r.probe == NODE_LOSS_PROBES[0] and r.ok]
    before = [value for t, value in dead if t <= injected]
    after = [value for t, value in dead if injected < t <= end]
    if not before or not after:
        return False
    return max(after) > before[-1] + lost


def triage_failure(
    timeline: Timeline,
    failure: PlatformFailure,
    thresholds: Mapping[str, float],
    fault_symptoms: Sequence[FaultSymptom] = (),
) -> TriageResult:
    """The layer at fault for a failure the scenario did not inject: triage over what the
    timeline says of its replica (and of the platform as a whole) from just before its first
    sign, so that the fault's own standing symptoms, already there, do not answer for it.

    ``fault_symptoms`` are the readings that show the scenario's own fault (:func:`fault_symptoms`):
    the fault explains those series, not a replica it did not touch, so they are left out here
    (a lost node's DEAD count says nothing of the survivor's hung engine). The same rule on
    another series (another node's slowed link) still counts.
    """
    view = Timeline()
    rows = [r for r in timeline.rows if failure.replica is None or not _about_others(r, failure.replica)]
    view.append_tick(rows)
    for name, t in timeline.marks.items():
        view.mark(name, t)
    start, end = failure.at - 1.0, failure.at + TRIAGE_LOOKAHEAD_S
    first = timeline.rows[0].t if timeline.rows else start

    def since(rule: Rule) -> float:
        # A link that has crawled since before the failure still carries the replica's
        # requests: standing is no excuse for it (slow_link's control slows the other link
        # before the fault, and its replica stops answering only in recovery). The fault's
        # own link is left out by ``fault_symptoms``.
        return first if rule.layer is Layer.NETWORK else start

    def window_start(rule: Rule) -> float:
        # A node lost while the fault acted still holds its replica out where the replica's
        # failed SLO is a later phase's (the recovery): a node DEAD since the injection answers
        # for it, unless the fault lost it itself (``fault_symptoms``).
        if rule.probe in NODE_LOSS_PROBES:
            return min(timeline.marks.get(Mark.INJECTED, start), start)
        return start

    explained = fault_symptoms
    if _more_nodes_dead_than_the_fault_lost(timeline, end, fault_symptoms):
        # The fault lost one node; Ray counts more DEAD since it began: a node lost beside it.
        explained = [s for s in fault_symptoms if s.probe not in NODE_LOSS_PROBES]
    matches = [
        m
        for rule in RULES
        if (m := match_rule(rule, view, window_start(rule), end, since(rule), thresholds))
        and not any(symptom.explains(m) for symptom in explained)
    ]
    order = {layer: index for index, layer in enumerate(TRIAGE_ORDER)}

    def rank(match: Match) -> tuple[int, bool, int]:
        # A failure outside the fault is told by its own replica first: a cut link or a lost
        # node under it, then what its own server and requests say, then the rest (Serve
        # re-placing the replica it lost grows Ray's actors: a consequence, not the cause).
        if match.rule.layer is Layer.NETWORK or match.rule.probe in NODE_LOSS_PROBES:
            tier = 0
        elif failure.replica is not None and _about(match, failure.replica):
            tier = 1
        else:
            tier = 2
        return tier, match.rule.symptom, order.get(match.rule.layer, len(order))

    ranked = sorted(matches, key=rank)
    if ranked:
        top = ranked[0]
        return TriageResult(
            top.rule.layer.value,
            top.reason,
            {
                "probe": top.rule.probe,
                "condition": top.rule.condition.value,
                "value": top.value,
                "t": top.t,
                "labels": dict(top.labels),
                "window": [start, end],
                "also": [f"{m.rule.layer.value}: {m.reason}" for m in ranked[1:]],
            },
        )
    if failure.replica is None:
        return TriageResult("unknown", f"no triage rule matched between {start:.3f} and {end:.3f}", {})
    # Nothing else showed: a replica that stopped serving on its own is its engine's failure.
    return TriageResult("vllm", f"{failure.replica} stopped serving: {failure.reason}", {"slo": failure.slo})
