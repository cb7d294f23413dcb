"""`inferchaos alerts check`: which loaded alerting rules cover which signature, matched by the
metrics they read, and bad input refused in one line with exit 2.

The matching is pure over rule lists; the real Prometheus answering ``/api/v1/rules`` is
tests/integration/test_alerts_check.py's.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from inferchaos.cli.alerts_check import (
    AlertsCheck,
    coverage,
    prometheus_base_url,
    query_reads,
    suite_faults,
)
from inferchaos.cli.main import cli, main
from inferchaos.environments.local.prometheus_server import local_alert_labels
from inferchaos.errors import ConfigError, EnvironmentError_, ProbeError
from inferchaos.primitives.alert_rules import CLUSTER, AlertLabels, alert_rules_document, alerts
from inferchaos.primitives.prometheus_api import PromRule, rules_of

KV_TEAM_RULE = (
    "max by (pod) (vllm:gpu_cache_usage_perc) > 0.95 and on (pod) sum by (pod) (vllm:num_requests_waiting) > 0"
    " or rate(vllm:num_preemptions_total[5m]) > 0"
)


def alerting(name: str, query: str) -> PromRule:
    return PromRule("alerting", name, query, "team")


def recording(name: str, query: str) -> PromRule:
    return PromRule("recording", name, query, "team")


def covered(rules: list[PromRule], signature: str) -> tuple[str, ...]:
    return next(c.covered_by for c in coverage(rules, ()) if c.alert.signature == signature)


def own_rules(labels: AlertLabels) -> list[PromRule]:
    """inferchaos' rules file, as Prometheus would list it once loaded."""
    listed = []
    for group in alert_rules_document(labels)["groups"]:
        for rule in group["rules"]:
            kind, name = ("recording", rule["record"]) if "record" in rule else ("alerting", rule["alert"])
            listed.append(PromRule(kind, name, rule["expr"], group["name"]))
    return listed


def test_names_are_read_as_whole_tokens_outside_strings_and_label_matchers() -> None:
    reads = query_reads(
        'max by (instance) (up{job="ray_tasks"}) == 0 and on () group_left () ray_actors_total > 1'
    )
    assert reads.mentions("up") and reads.mentions("ray_actors_total")
    assert not reads.mentions("ray_actors")  # a prefix of a longer name
    assert not reads.mentions("ray_tasks")  # a label value
    assert not reads.mentions("job")  # a label name


def test_a_name_matcher_reads_the_names_it_selects() -> None:
    reads = query_reads('max({__name__=~"vllm:(kv_cache_usage_perc|gpu_cache_usage_perc)",job="vllm"}) > 0.9')
    assert reads.mentions("vllm:kv_cache_usage_perc") and reads.mentions("vllm:gpu_cache_usage_perc")
    assert not reads.mentions("vllm:kv_cache_usage_perc_other")  # anchored, as Prometheus anchors it
    assert query_reads('{__name__="up", job="ray"} == 0').mentions("up")


@pytest.mark.parametrize("labels", [CLUSTER, local_alert_labels()], ids=["cluster", "local"])
def test_inferchaos_own_rules_cover_every_signature_with_its_own_alert(labels: AlertLabels) -> None:
    found = {c.alert.signature: c.covered_by for c in coverage(own_rules(labels), (), labels)}
    # One entry per signature, covered by each of our alerts for it.
    assert found.keys() == {alert.signature for alert in alerts(labels)}
    assert all(alert.name in found[alert.signature] for alert in alerts(labels)), found


def test_a_rule_reading_vllm_s_older_kv_name_covers_the_kv_signature() -> None:
    assert covered([alerting("KVFull", KV_TEAM_RULE)], "kv_cache_flood") == ("KVFull",)


def test_a_rule_missing_one_of_the_signature_s_metrics_does_not_cover_it() -> None:
    rules = [alerting("KVHigh", "max(vllm:kv_cache_usage_perc) > 0.95"), recording("KVFull", KV_TEAM_RULE)]
    assert covered(rules, "kv_cache_flood") == ()  # a recording rule pages no one


def test_an_alert_on_a_recording_rule_reads_that_rule_s_metrics_one_level_down() -> None:
    p95 = "job:ttft:p95"
    record = recording(
        p95, "histogram_quantile(0.95, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket[5m])))"
    )
    assert covered([record, alerting("SlowTTFT", f"{p95} > 2")], "slow_replica") == ("SlowTTFT",)
    # Two levels down is not followed.
    deeper = recording("job:ttft:p95_max", f"max({p95})")
    assert covered([record, deeper, alerting("SlowTTFT", "job:ttft:p95_max > 2")], "slow_replica") == ()


def test_rules_of_one_name_are_named_once_and_the_suite_s_signatures_marked() -> None:
    rules = [
        alerting(
            "EngineDead", "sum(vllm:num_requests_running) > 0 and rate(vllm:generation_tokens_total[1m]) == 0"
        )
    ] * 2
    found = {c.alert.signature: c for c in coverage(rules, {"vllm.hang_engine"})}
    assert found["engine_hang"].covered_by == ("EngineDead",) and found["engine_hang"].used
    assert not found["kv_cache_flood"].used and found["kv_cache_flood"].covered_by == ()


def test_the_check_names_the_suite_s_uncovered_signatures_only() -> None:
    check = AlertsCheck(
        "http://p:9090",
        "quick",
        1,
        tuple(coverage([alerting("KVFull", KV_TEAM_RULE)], suite_faults("quick"))),
    )
    assert [c.alert.signature for c in check.uncovered] == ["placement_group_stall"]
    assert "placement_group_stall (InferchaosPlacementGroupPendingWithFreeGPUs)" in check.summary()
    assert "kv_cache_flood" not in check.summary()


def test_a_rules_answer_is_read_and_anything_else_refused() -> None:
    payload = {
        "status": "success",
        "data": {
            "groups": [
                {
                    "name": "g",
                    "rules": [
                        {"type": "alerting", "name": "A", "query": "up == 0", "health": "ok"},
                        {"type": "recording", "name": "r:up", "query": "sum(up)"},
                    ],
                }
            ]
        },
    }
    assert rules_of(payload, "http://p") == [
        PromRule("alerting", "A", "up == 0", "g"),
        PromRule("recording", "r:up", "sum(up)", "g"),
    ]
    for other in ({"status": "success", "data": {"resultType": "vector"}}, {"hello": "world"}, [1, 2]):
        with pytest.raises(ProbeError, match="not Prometheus"):
            rules_of(other, "http://p")
    with pytest.raises(ProbeError, match="bad_data: nope"):
        rules_of({"status": "error", "errorType": "bad_data", "error": "nope"}, "http://p")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("prometheus:9090", "http:// or https://"),
        ("ftp://prometheus:9090", "http:// or https://"),
        ("http://", "host"),
        ("http://:9090", "host"),
        ("http://prometheus:99999", "port"),
        ("http://prometheus:9090/?x=1", "query"),
        ("http://prom etheus", "spaces"),
        ("http://admin:secret@prometheus:9090", "credentials"),
    ],
)
def test_a_malformed_url_is_refused_saying_what_is_wrong(text: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem) as refused:
        prometheus_base_url(text)
    assert "secret" not in str(refused.value)


def test_a_good_url_keeps_its_path_prefix_without_a_trailing_slash() -> None:
    assert prometheus_base_url("https://mon.example/prometheus/") == "https://mon.example/prometheus"
    assert prometheus_base_url("http://127.0.0.1:9090") == "http://127.0.0.1:9090"


@pytest.fixture
def cli_logging() -> Iterator[None]:
    """The CLI sends the ``inferchaos`` loggers to stderr, unpropagated; put them back for other tests."""
    log = logging.getLogger("inferchaos")
    saved = (list(log.handlers), log.level, log.propagate)
    yield
    log.handlers[:], log.level, log.propagate = saved


@pytest.mark.usefixtures("cli_logging")
@pytest.mark.parametrize(
    ("args", "error", "words"),
    [
        (["--prometheus", "prometheus.monitoring:9090"], ConfigError, "http:// or https://"),
        (["--prometheus", "http://"], ConfigError, "host"),
        (
            ["--prometheus", "http://127.0.0.1:9", "--suite", "nightly"],
            ConfigError,
            "unknown suite 'nightly'",
        ),
        (["--prometheus", "http://127.0.0.1:9"], EnvironmentError_, "did not answer"),
    ],
    ids=["no-scheme", "no-host", "unknown-suite", "unreachable"],
)
def test_bad_input_stops_with_exit_2_in_one_line(args: list[str], error: type[Exception], words: str) -> None:
    result = CliRunner().invoke(cli, ["alerts", "check", *args])
    # main() maps the error tree onto exit codes; the command raises, so the runner holds the error.
    assert isinstance(result.exception, error), result.output
    assert getattr(result.exception, "exit_code", None) == 2
    assert words in str(result.exception) and "\n" not in str(result.exception)
    assert "signature" not in result.output  # no table before the refusal


@pytest.mark.usefixtures("cli_logging")
def test_the_command_line_exits_2_with_one_line_for_a_malformed_url(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["inferchaos", "alerts", "check", "--prometheus", "ftp://prometheus"])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("inferchaos: invalid input: --prometheus:"), lines


@pytest.mark.usefixtures("cli_logging")
def test_the_help_explains_what_covers_a_signature() -> None:
    result = CliRunner().invoke(cli, ["alerts", "check", "--help"])
    assert result.exit_code == 0
    assert (
        "--prometheus" in result.output
        and "Exit codes" in result.output
        and "recording rule" in result.output
    )
