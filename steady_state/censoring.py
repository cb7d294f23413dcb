"""Censored latency samples: a failed canary request counted at its timeout.

A request that fails or times out measures no latency, yet leaving it out would compute every
latency percentile over the survivors alone, and a fifth of the requests could time out unseen
by every latency SLO. The canary therefore records such a request at its timeout, the least
the user waited for an answer that never came, and marks the sample ``censored="1"``
(steady_state/canary.py ``result_samples``). SLO percentiles keep it: it is the user's wait.
A reader that needs a measured latency (a reference that scales a detector's threshold, a
median that compares replicas' speed) drops it with :func:`is_censored` and says so.

It imports nothing else of the project, so reports (which may not import the canary's HTTP
client) read the same mark.
"""

from __future__ import annotations

from collections.abc import Mapping

CENSORED_LABEL = "censored"
CENSORED_VALUE = "1"

# The canary's latency probes that carry censored samples; its inter-token latency is only
# ever measured (a failure has no tokens to space).
CENSORED_PROBES: frozenset[str] = frozenset({"canary.ttft_s", "canary.e2e_s"})


def censored_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """``labels`` with the censored mark added: the replica the front door named stays, so an
    SLO that selects that replica still counts the request's failure."""
    return {**labels, CENSORED_LABEL: CENSORED_VALUE}


def is_censored(labels: Mapping[str, str]) -> bool:
    """Whether a sample with ``labels`` stands for a failed request at its timeout."""
    return labels.get(CENSORED_LABEL) == CENSORED_VALUE
