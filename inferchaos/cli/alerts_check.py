"""`inferchaos alerts check`: whether the alerting rules a team's Prometheus evaluates cover the
signatures the suite's faults show.

Each signature of the playbook is one alert of primitives/alert_rules.py, and each names the
metrics it reads (:attr:`Alert.reads`). Alerting rules differ from team to team in their
thresholds, windows and labels, but not in what they read: so a loaded alerting rule covers a
signature when its query reads every one of those metrics, vLLM's older name of a metric
standing for today's (primitives/vllm_metrics.py ``OLDER_NAMES``). An alert that reads a
recording rule reads what that rule's query reads, one level down, as inferchaos' own slow
replica alert reads its TTFT quantile.

The check reads what Prometheus evaluates (``/api/v1/rules``), not a rules file: what was
written may not be what was loaded.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from inferchaos.errors import ConfigError, EnvironmentError_, ProbeError
from inferchaos.primitives import http
from inferchaos.primitives.alert_rules import CLUSTER, Alert, AlertLabels, alerts
from inferchaos.primitives.prometheus_api import PromRule, loaded_rules
from inferchaos.primitives.vllm_metrics import OLDER_NAMES
from inferchaos.run.spec import load_and_validate
from inferchaos.run.suites import suite_paths
from inferchaos.urls import http_base_url

logger = logging.getLogger(__name__)

# Long enough for a Prometheus across a network; the answer is one small JSON document.
RULES_TIMEOUT_S = 10.0
EXAMPLE_URL = "http://prometheus.monitoring:9090"
# A PromQL string: double- or single-quoted with backslash escapes, or a raw backtick string.
_STRING = r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`'
_STRING_RE = re.compile(_STRING)
# A matcher on the metric name itself: {__name__=~"vllm:(kv|gpu)_cache_usage_perc"}.
_NAME_MATCHER = re.compile(r"__name__\s*(=~|=)\s*(" + _STRING + ")")
# A label matcher list; once strings are blanked none holds a brace.
_BRACES = re.compile(r"\{[^{}]*\}")
# A metric name, or a recording rule's (colons allowed); as a whole token, so ``up`` is not
# found inside ``group_left`` nor ``ray_actors`` inside ``ray_actors_total``.
_NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


@dataclass(frozen=True)
class QueryReads:
    """The metric names a PromQL expression reads: its name tokens, and the patterns of its
    ``__name__`` regex matchers."""

    names: frozenset[str]
    name_patterns: tuple[re.Pattern[str], ...] = ()

    def mentions(self, metric: str) -> bool:
        """Whether the expression reads ``metric``."""
        return metric in self.names or any(p.fullmatch(metric) for p in self.name_patterns)

    def union(self, others: Iterable[QueryReads]) -> QueryReads:
        """What this expression and ``others`` read together."""
        names, patterns = set(self.names), list(self.name_patterns)
        for other in others:
            names |= other.names
            patterns += other.name_patterns
        return QueryReads(frozenset(names), tuple(patterns))


def _string_value(literal: str) -> str:
    """A PromQL string literal's value (a raw string keeps its backslashes)."""
    body = literal[1:-1]
    return body if literal.startswith("`") else re.sub(r"\\(.)", r"\1", body)


def query_reads(query: str) -> QueryReads:
    """What ``query`` reads: every name token outside strings and label matchers, and the names
    its ``__name__`` matchers select."""
    names: set[str] = set()
    patterns: list[re.Pattern[str]] = []
    for op, literal in _NAME_MATCHER.findall(query):
        value = _string_value(literal)
        if op == "=":
            names.add(value)
            continue
        try:
            patterns.append(re.compile(value))  # Prometheus anchors it: mentions() uses fullmatch
        except re.error:
            # RE2 syntax Python's re does not take; the rule then reads no name by this matcher.
            logger.debug("cannot read the __name__ regex %r of %r", value, query)
    # Label values and label names are not metric names.
    outside = _BRACES.sub(" ", _STRING_RE.sub('""', query))
    names.update(_NAME.findall(outside))
    return QueryReads(frozenset(names), tuple(patterns))


def alerting_reads(rules: Sequence[PromRule]) -> list[tuple[PromRule, QueryReads]]:
    """Each alerting rule with what it reads, the recording rules its query names resolved once."""
    recorded: dict[str, list[QueryReads]] = {}
    for rule in rules:
        if rule.kind == "recording":
            # Two groups may record one name (per cluster, per job): it reads what either reads.
            recorded.setdefault(rule.name, []).append(query_reads(rule.query))
    found = []
    for rule in rules:
        if rule.kind != "alerting":
            continue
        direct = query_reads(rule.query)
        via = [reads for name in sorted(direct.names & recorded.keys()) for reads in recorded[name]]
        found.append((rule, direct.union(via)))
    return found


def accepted_names(metric: str) -> tuple[str, ...]:
    """``metric`` and the older names vLLM exposed it by."""
    return (metric, *OLDER_NAMES.get(metric, ()))


def covers(reads: QueryReads, alert: Alert) -> bool:
    """Whether a rule reading ``reads`` reads every metric ``alert``'s signature is seen by."""
    return bool(alert.reads) and all(
        any(reads.mentions(name) for name in accepted_names(metric)) for metric in alert.reads
    )


@dataclass(frozen=True)
class Coverage:
    """One signature: its alert, the loaded alerting rules covering it, and whether the suite shows it."""

    alert: Alert
    covered_by: tuple[str, ...]
    used: bool


def coverage(
    rules: Sequence[PromRule], used_faults: Iterable[str], labels: AlertLabels = CLUSTER
) -> list[Coverage]:
    """Each signature of :func:`alerts` and the names of the alerting rules among ``rules`` that cover it."""
    used = frozenset(used_faults)
    readers = alerting_reads(rules)
    # A signature some of our alerts see in different metrics (a hung engine: vLLM's counters,
    # or Serve's requests in flight) is covered by a rule reading what any one of them reads.
    by_signature: dict[str, list[Alert]] = {}
    for alert in alerts(labels):
        by_signature.setdefault(alert.signature, []).append(alert)
    result = []
    for variants in by_signature.values():
        # One name once, though several groups may carry an alert of that name.
        names = tuple(
            dict.fromkeys(rule.name for rule, reads in readers if any(covers(reads, a) for a in variants))
        )
        faults = {fault for a in variants for fault in a.faults}
        result.append(Coverage(variants[0], names, not used.isdisjoint(faults)))
    return result


def prometheus_base_url(text: str) -> str:
    """``text`` as a Prometheus base URL (http or https, a host, an optional port and path
    prefix), without a trailing slash; ConfigError saying what is wrong otherwise."""
    try:
        return http_base_url(text, EXAMPLE_URL, "the check")
    except ConfigError as e:
        raise ConfigError(f"--prometheus: {e}") from e


def suite_faults(suite: str) -> frozenset[str]:
    """The faults suite ``suite`` injects (a built-in name or a folder); ConfigError for neither."""
    return frozenset(load_and_validate(path).fault.fault for path in suite_paths(suite))


@dataclass(frozen=True)
class AlertsCheck:
    """What `alerts check` found at one Prometheus for one suite."""

    prometheus: str
    suite: str
    alerting_rules: int
    coverage: tuple[Coverage, ...]

    @property
    def uncovered(self) -> tuple[Coverage, ...]:
        """The signatures the suite shows that no loaded alerting rule covers."""
        return tuple(c for c in self.coverage if c.used and not c.covered_by)

    def summary(self) -> str:
        """One line: all covered, or which of the suite's signatures are not."""
        if not self.uncovered:
            return f"every signature suite {self.suite} shows is covered by an alerting rule at {self.prometheus}"
        named = ", ".join(f"{c.alert.signature} ({c.alert.name})" for c in self.uncovered)
        none = " (it evaluates no alerting rule)" if self.alerting_rules == 0 else ""
        return f"not covered by the alerting rules at {self.prometheus}{none}, though suite {self.suite} shows them: {named}"


def check_alerts(prometheus: str, suite: str, timeout_s: float = RULES_TIMEOUT_S) -> AlertsCheck:
    """Read the rules Prometheus at ``prometheus`` evaluates and match them against every signature.

    ConfigError for a malformed URL or an unknown suite (both before any request);
    EnvironmentError_ when Prometheus does not answer, or something else answers.
    """
    base = prometheus_base_url(prometheus)
    used = suite_faults(suite)
    try:
        with http.client() as client:
            rules = loaded_rules(client, base, timeout_s)
    except ProbeError as e:
        # One line, whatever the transport's message holds.
        raise EnvironmentError_(" ".join(str(e).split())) from e
    alerting = sum(1 for rule in rules if rule.kind == "alerting")
    logger.info("%s evaluates %d rule(s), %d alerting", base, len(rules), alerting)
    return AlertsCheck(base, suite, alerting, tuple(coverage(rules, used)))
