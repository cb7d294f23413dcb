"""inferchaos/load/locustfile.py run headless against fake OpenAI servers: metrics, model, shapes."""

from __future__ import annotations

import re
import subprocess
import sys

from inferchaos.load.locust_runner import LOAD_PROFILES
from tests.fakes.locust_runs import FLAKY_MODEL, LOCUSTFILE, REPO, Runs
from tests.fakes.openai_server import FAKE_MODEL, FakeBehaviour, FakeOpenAIServer

FIRST_DELAY_MS = 50.0
DELAY_MS = 20.0
CHUNKS = 5


def test_every_stream_records_ttft_itl_and_e2e(runs: Runs) -> None:
    assert runs.steady.proc.returncode == 0, runs.steady.output
    counts = {name: int(runs.steady.last_row(name)["Total Request Count"]) for name in ("ttft", "itl", "e2e")}
    assert counts["e2e"] >= 8, counts
    assert counts["ttft"] == counts["itl"] == counts["e2e"], counts
    assert all(int(runs.steady.last_row(n)["Total Failure Count"]) == 0 for n in counts)


def test_latencies_follow_the_server_timing(runs: Runs) -> None:
    ttft = runs.steady.last_row("ttft")
    itl = runs.steady.last_row("itl")
    e2e = runs.steady.last_row("e2e")
    # The server sleeps 50 ms before the first chunk and 20 ms before each later one.
    assert float(ttft["Total Min Response Time"]) >= FIRST_DELAY_MS
    assert FIRST_DELAY_MS <= float(ttft["Total Median Response Time"]) < 1000
    assert DELAY_MS * 0.75 <= float(itl["Total Median Response Time"]) < 500
    min_e2e = FIRST_DELAY_MS + (CHUNKS - 1) * DELAY_MS
    assert float(e2e["Total Min Response Time"]) >= min_e2e * 0.9
    assert float(e2e["Total Median Response Time"]) > float(ttft["Total Median Response Time"])


def test_e2e_response_length_is_the_output_tokens(runs: Runs) -> None:
    assert float(runs.steady.last_row("e2e")["Total Average Content Size"]) == CHUNKS


def test_stream_percentiles_are_in_the_history_while_it_runs(runs: Runs) -> None:
    rows = [r for r in runs.steady.rows() if r["Type"] == "LLM" and r["Name"] == "ttft" and r["95%"] != "N/A"]
    assert len({r["Timestamp"] for r in rows}) >= 3, "one ttft row per second of the run"
    assert all(int(r["95%"]) >= FIRST_DELAY_MS for r in rows)


def test_model_is_read_from_v1_models_without_model_argument(
    runs: Runs, good_server: FakeOpenAIServer
) -> None:
    assert runs.steady.last_row("/v1/models", request_type="GET")
    assert good_server.behaviour.models_seen
    assert set(good_server.behaviour.models_seen) == {FAKE_MODEL}


def test_model_argument_is_sent_as_is(runs: Runs, flaky_server: FakeOpenAIServer) -> None:
    assert set(flaky_server.behaviour.models_seen) == {FLAKY_MODEL}
    assert not [r for r in runs.flaky.rows() if r["Name"] == "/v1/models"]


def test_a_failed_stream_fires_e2e_with_its_error(runs: Runs) -> None:
    failures = {
        r["Error"]: int(r["Occurrences"]) for r in runs.flaky.rows("_failures.csv") if r["Name"] == "e2e"
    }
    refused = sum(n for error, n in failures.items() if "HTTP 500" in error)
    broken = sum(n for error, n in failures.items() if "HTTP 500" not in error)
    errored = sum(
        n for error, n in failures.items() if "error event:" in error and "injected mid-stream" in error
    )
    assert refused >= 1 and broken >= 1 and errored >= 1, failures
    e2e = runs.flaky.last_row("e2e")
    assert int(e2e["Total Failure Count"]) == refused + broken
    assert int(e2e["Total Request Count"]) > refused + broken
    assert all(r["Method"] == "LLM" for r in runs.flaky.rows("_failures.csv") if r["Name"] == "e2e")


def test_ttft_is_recorded_wherever_a_first_token_came(runs: Runs) -> None:
    failures = {
        r["Error"]: int(r["Occurrences"]) for r in runs.flaky.rows("_failures.csv") if r["Name"] == "e2e"
    }
    refused = sum(n for error, n in failures.items() if "HTTP 500" in error)
    ttft = runs.flaky.last_row("ttft")
    assert int(ttft["Total Failure Count"]) == 0
    # A refused request has no TTFT; one that broke off after its first token has one.
    assert (
        int(ttft["Total Request Count"]) == int(runs.flaky.last_row("e2e")["Total Request Count"]) - refused
    )


def test_load_profile_picks_the_shape(runs: Runs) -> None:
    users = [
        int(r["User Count"])
        for r in runs.spike.rows()
        if r["Name"] == "Aggregated" and r["User Count"] != "0"
    ]
    assert 3 in users, users
    spike_start, spike_end = users.index(3), len(users) - 1 - users[::-1].index(3)
    assert set(users[:spike_start]) == {1}, users
    assert set(users[spike_end + 1 :]) == {1}, users


def test_unknown_profile_is_refused_naming_the_profiles_load_py_offers() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "locust",
            "-f",
            str(LOCUSTFILE),
            "--headless",
            "--host",
            "http://127.0.0.1:9",
            "--load-profile",
            "surge",
            "-t",
            "2s",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    choices = re.search(r"invalid choice: 'surge' \(choose from (.+)\)", result.stderr)
    assert choices, result.stderr
    assert tuple(c.strip(" '") for c in choices.group(1).split(",")) == LOAD_PROFILES


def test_ignore_eos_is_sent_only_when_asked(
    good_server: FakeOpenAIServer, flaky_server: FakeOpenAIServer
) -> None:
    assert good_server.behaviour.ignore_eos_seen and not any(good_server.behaviour.ignore_eos_seen)
    assert flaky_server.behaviour.ignore_eos_seen and all(flaky_server.behaviour.ignore_eos_seen)


def test_max_tokens_is_fixed_unless_a_range_ratio_is_given(
    good_server: FakeOpenAIServer, flaky_server: FakeOpenAIServer
) -> None:
    # The defaults: 16 for the chat user, 32 for the long-context user.
    assert set(good_server.behaviour.max_tokens_seen) <= {16, 32}
    assert 16 in good_server.behaviour.max_tokens_seen
    # max_tokens 8 and range ratio 0.5: uniform over 4..12, as vllm bench serve draws.
    seen = flaky_server.behaviour.max_tokens_seen
    assert min(seen) >= 4 and max(seen) <= 12, sorted(set(seen))
    assert len(set(seen)) >= 5, sorted(set(seen))


def test_range_ratio_outside_0_to_1_is_refused_before_any_load() -> None:
    server = FakeOpenAIServer(FakeBehaviour()).start()
    try:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "locust",
                "-f",
                str(LOCUSTFILE),
                "--headless",
                "--host",
                server.url,
                "-u",
                "1",
                "-t",
                "3s",
                "--max-tokens-range-ratio",
                "1.5",
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        server.stop()
    assert result.returncode == 2, result.stderr
    assert "--max-tokens-range-ratio must be in [0, 1), got 1.5" in result.stderr
    assert server.behaviour.completions == 0


def test_without_think_time_users_send_back_to_back(runs: Runs) -> None:
    # With think time (at least 0.5 s per request) 2 users could finish at most 24 in 6 s.
    assert int(runs.flaky.last_row("e2e")["Total Request Count"]) > 24
