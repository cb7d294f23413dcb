"""Fixtures of the load tests: fake OpenAI servers and headless Locust runs against them.

The Locust runs that several tests read are started together, once per session, and all of
them have ended (bounded) before any test reads them.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from tests.fakes.chaos_child import RECORD_ENV
from tests.fakes.locust_runs import CHAOS_AT_S, CHAOS_RUN_TIME_S, FAKE_CHILD, FLAKY_MODEL, Runs, start_locust
from tests.fakes.openai_server import FakeBehaviour, FakeOpenAIServer


@pytest.fixture(scope="session")
def good_server() -> Iterator[FakeOpenAIServer]:
    """Streams 5 chunks: the first after 50 ms, the others 20 ms apart."""
    server = FakeOpenAIServer(FakeBehaviour(chunks=5, first_delay_s=0.05, delay_s=0.02)).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def flaky_server() -> Iterator[FakeOpenAIServer]:
    """Like the good server, but every 3rd completion answers HTTP 500, every 4th (not 3rd) breaks
    off and every 5th (neither) reports an error inside its stream."""
    server = FakeOpenAIServer(
        FakeBehaviour(chunks=5, first_delay_s=0.05, delay_s=0.02, fail_every=3, break_every=4, error_every=5)
    ).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def runs(
    tmp_path_factory: pytest.TempPathFactory, good_server: FakeOpenAIServer, flaky_server: FakeOpenAIServer
) -> Runs:
    """Four Locust runs, started at once and all ended before any test reads them."""
    base = tmp_path_factory.mktemp("locust-runs")
    experiment = base / "fake.yaml"
    experiment.write_text("title: a fake scenario the fake chaos child never reads\n")
    record, chaos_out = base / "chaos-record.json", base / "chaos-out"
    chaos_args = [
        *f"-u 1 -t {CHAOS_RUN_TIME_S}s --chaos-at {CHAOS_AT_S:g}".split(),
        "--chaos",
        str(experiment),
        "--chaos-out",
        str(chaos_out),
        "--chaos-command",
        f"{sys.executable} {FAKE_CHILD}",
    ]
    started = Runs(
        steady=start_locust(
            good_server.url, base / "steady", *"--load-profile steady -u 4 -r 4 -t 6s".split()
        ),
        flaky=start_locust(
            flaky_server.url,
            base / "flaky",
            *"-u 2 -r 2 -t 6s --ignore-eos --no-think-time --chat-max-tokens 8 --long-max-tokens 8 --max-tokens-range-ratio 0.5 --model".split(),
            FLAKY_MODEL,
        ),
        spike=start_locust(
            good_server.url,
            base / "spike",
            *"--load-profile spike -u 1 --spike-users 3 --spike-at 1.5 --spike-seconds 2.5 -t 6s".split(),
        ),
        # Outside the repository, as from an installed package: the chaos run inherits Locust's directory.
        chaos=start_locust(
            good_server.url, base / "chaos", *chaos_args, env={RECORD_ENV: str(record)}, cwd=base / "chaos"
        ),
        chaos_record=record,
        chaos_out=chaos_out,
        chaos_experiment=experiment,
    )
    for run in (started.steady, started.flaky, started.spike, started.chaos):
        run.wait()
    return started
