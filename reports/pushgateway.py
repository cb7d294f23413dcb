"""Pushing a run's verdict metrics (openmetrics.txt's series) to a Prometheus Pushgateway.

Each run is pushed on its own, once it has been judged, to the group ``job="inferchaos"``,
``experiment``, ``env``, with prometheus_client's ``push_to_gateway``: an HTTP PUT, which
replaces the whole group. The gateway then holds the latest run of each experiment on each
environment and nothing of an earlier run (a time to detect the latest run did not measure is
gone, not stale). A game day pushes each of its runs the same way and nothing per day: the
Pushgateway keeps every group until it is deleted, so a group per day would pile up forever;
the day's own openmetrics.txt is in its folder.

A push never changes a verdict: the CLI reports a :class:`PushError` in one line and keeps the
run's exit code.
"""

from __future__ import annotations

import http.client
import logging
from pathlib import Path

from prometheus_client.exposition import push_to_gateway

from inferchaos.reports.load import load_run
from inferchaos.reports.openmetrics import metrics_registry
from inferchaos.reports.report_errors import PushError
from inferchaos.reports.verdict_schema import Verdict
from inferchaos.urls import http_base_url

logger = logging.getLogger(__name__)

JOB = "inferchaos"
# Long enough for a gateway across a network, short enough not to hold up a game day.
PUSH_TIMEOUT_S = 10.0
EXAMPLE_URL = "http://127.0.0.1:9091"


def pushgateway_url(text: str) -> str:
    """``text`` as a Pushgateway's base URL (http or https, a host, an optional port and path
    prefix), without a trailing slash; ConfigError saying what is wrong otherwise. Credentials
    in the URL are refused: prometheus_client's default handler would not send them anyway."""
    return http_base_url(text, EXAMPLE_URL, "the push")


def grouping_key(verdict: Verdict) -> dict[str, str]:
    """The Pushgateway group of a run besides its job: one per experiment and environment."""
    return {"experiment": verdict.experiment, "env": verdict.env}


def push_run(gateway: str, run_dir: Path, timeout_s: float = PUSH_TIMEOUT_S) -> dict[str, str]:
    """Push the series of the run folder ``run_dir`` to ``gateway`` (as :func:`pushgateway_url`
    returns it), replacing its group; the grouping key it pushed to.

    ReportError when the run folder cannot be read, PushError when the gateway does not take it.
    """
    run = load_run(run_dir)
    key = grouping_key(run.verdict)
    try:
        push_to_gateway(
            gateway, job=JOB, registry=metrics_registry([run]), grouping_key=key, timeout=timeout_s
        )
    except (OSError, http.client.HTTPException) as e:
        # urllib's URLError and HTTPError, refused connections and timeouts are all OSError;
        # a malformed answer is an HTTPException.
        raise PushError(f"could not push {run.verdict.experiment} to {gateway}: {e}") from e
    logger.info("pushed %s to %s (job %s, %s)", run_dir, gateway, JOB, key)
    return key
