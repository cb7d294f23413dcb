"""pytest plugin: resilience gates as ordinary tests.

Registered through the ``pytest11`` entry point, so installing inferchaos is enough:

    import pytest

    @pytest.mark.chaos(layer="vllm")
    def test_kv_flood_keeps_ttft(run_experiment):
        verdict = run_experiment("experiments/kv_flood.yaml")
        assert verdict.status == "passed", verdict.reason

``chaos_env`` attaches to the environment that is up (``inferchaos env up``) or starts the
local one for the session and takes it down at the end; ``run_experiment`` runs one
experiment file and returns its verdict, or skips the test where this host cannot hold the
scenario (errors.Unsupported: no memory budgets, no GPU). With ``--junitxml`` each gate is one testcase, with
the experiment's status, reason, layer and run folder as properties.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    # Imported when a fixture runs, not when pytest loads the plugin: every pytest run
    # of a project that installs inferchaos loads it.
    from inferchaos.environments.local.env import LocalEnvironment
    from inferchaos.reports.verdict_schema import Verdict


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("inferchaos", "inferchaos resilience gates")
    group.addoption(
        "--chaos-env", default="local", choices=["local"], help="environment the gates run against"
    )
    group.addoption(
        "--chaos-out", default=None, help="folder for the run folders (default: pytest's tmp path)"
    )
    group.addoption("--chaos-interval", type=float, default=1.0, help="sampling interval in seconds")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "chaos(layer): a resilience gate that runs an inferchaos experiment")


@pytest.fixture(scope="session")
def chaos_env(request: pytest.FixtureRequest) -> Iterator[LocalEnvironment]:
    """The environment gates run against: the one already up, or a local one for this session."""
    from inferchaos.environments.local.env import LocalEnvironment

    env = LocalEnvironment()
    started_here = not (env.is_recorded() and env.load_state().ready)
    if started_here:
        env.up()
    try:
        yield env
    finally:
        if started_here:
            env.down()


@pytest.fixture
def run_experiment(
    chaos_env: LocalEnvironment,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    record_property: Callable[[str, object], None],
) -> Callable[[str | Path], Verdict]:
    """Run an experiment file against ``chaos_env``; returns its :class:`inferchaos.run.verdict.Verdict`."""
    from inferchaos.errors import Unsupported
    from inferchaos.run.runner import Runner, RunOptions, plan_run
    from inferchaos.run.spec import load_and_validate

    out = Path(request.config.getoption("--chaos-out") or tmp_path)
    interval = float(request.config.getoption("--chaos-interval"))
    marker = request.node.get_closest_marker("chaos")
    if marker is not None and "layer" in marker.kwargs:
        record_property("chaos_layer", marker.kwargs["layer"])

    def run(path: str | Path) -> Verdict:
        spec = load_and_validate(Path(path))
        try:
            plan_run(spec, chaos_env)
        except Unsupported as e:
            # This host cannot hold the scenario (no memory budgets, no GPU): a skip, not a failure.
            pytest.skip(f"skipped: {e}")
        runner = Runner(spec, chaos_env, RunOptions(out_dir=out, interval_s=interval))
        verdict = runner.run()
        record_property("chaos_experiment", spec.name)
        record_property("chaos_status", str(verdict.status))
        record_property("chaos_reason", verdict.reason)
        record_property("chaos_run_dir", str(runner.run_dir))
        return verdict

    return run
