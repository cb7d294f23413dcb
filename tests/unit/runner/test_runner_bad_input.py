"""Invalid experiments: `inferchaos run` exits 2 with one line naming the file and the key, and injects nothing.

Each file of tests/fixtures/bad_experiments/ is experiments/kv_flood.yaml (or, for the gray
faults, experiments/engine_hang.yaml) with one thing broken (its first line says what). No environment exists in these tests: validation must fail
before one is contacted (a message about `inferchaos env up` means a bad file got past
validation). The one exception is a target the environment does not have, which only the
environment can refuse (tests/integration/test_bad_target.py runs it against a real one).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from inferchaos.errors import ConfigError
from inferchaos.run.spec import ensure_experiment_is_valid, load_and_validate
from tests.cli_forks import CliJob, run_cli_jobs

pytestmark = pytest.mark.long_running

REPO = Path(__file__).resolve().parents[3]
CORPUS = REPO / "tests" / "fixtures" / "bad_experiments"
MISSING = "does_not_exist.yaml"
UNKNOWN_TARGET = "unknown_target.yaml"
# A worker node the environment does not have: as with a target, only the environment knows
# (tests/integration/test_bad_target.py refuses it against a real one).
UNKNOWN_WORKER = "unknown_worker.yaml"
ARGS = "method[0].provider.arguments"
FAULT_MODULES = (
    "inferchaos.ctk.device_actions, inferchaos.ctk.k8s_actions, "
    "inferchaos.ctk.network_actions, inferchaos.ctk.ray_actions, inferchaos.ctk.vllm_actions"
)

# file -> what the one error line must say after "<file>: " (the key path, or the place).
EXPECTED: dict[str, str] = {
    "yaml_syntax_error.yaml": "YAML syntax error at line 29, column ",
    "missing_method.yaml": "method: required",
    "unknown_fault.yaml": "method[0].provider.func: unknown fault 'drain_node'",
    "unknown_probe.yaml": "slos[0].probe: unknown probe 'vllm.kv_cache_usge'",
    "unknown_operator.yaml": "slos[2].op: unknown operator '=>'",
    "threshold_is_string.yaml": "slos[3].threshold: must be a number, got str '1.5'",
    "negative_duration.yaml": "method[0].pauses.after: must be more than 0 seconds, got -5",
    "empty.yaml": "the file is empty",
    "not_a_mapping.yaml": "an experiment must be a mapping of keys, got list",
    "old_module_path.yaml": "method[0].provider.module: 'faults.vllm.actions' moved: use 'inferchaos.ctk.vllm_actions'",
    "moved_provider_module.yaml": (
        "method[0].provider.module: 'inferchaos.faults.vllm.actions' moved: use 'inferchaos.ctk.vllm_actions'"
    ),
    MISSING: "no such experiment file",
    "is_a_directory.yaml": "is a directory, not an experiment file",
    "not_utf8.yaml": "not UTF-8 text: byte 0xe9 at offset ",
    # Fault arguments: unknown, wrong-typed, out of range, not finite.
    "fault_argument_unknown.yaml": f"{ARGS}.concurency: unknown argument; flood_kv_cache takes ['concurrency', ",
    "fault_argument_wrong_type.yaml": f"{ARGS}.concurrency: must be int or null, got '4'",
    "fault_argument_zero.yaml": f"{ARGS}: vllm.flood_kv_cache: concurrency 0 must be between 1 and max_concurrency 64",
    "fault_argument_zero_seconds.yaml": f"{ARGS}.saturate_timeout_s: must be more than 0 seconds, got 0",
    "fault_argument_negative_seconds.yaml": f"{ARGS}.duration_s: must be more than 0 seconds, got -3",
    "fault_argument_nan.yaml": f"{ARGS}.rate_per_s: must be a finite number, got nan",
    "fault_argument_infinite_seconds.yaml": f"{ARGS}.saturate_timeout_s: must be a finite number, got inf",
    "kill_gcs_zero_timeout.yaml": f"{ARGS}.recover_timeout_s: must be more than 0 seconds, got 0",
    # NaN and infinite durations, wherever one is read.
    "pauses_after_nan.yaml": "method[0].pauses.after: must be a finite number, got nan",
    "pauses_after_infinite.yaml": "method[0].pauses.after: must be a finite number, got inf",
    "baseline_duration_nan.yaml": "baseline.duration_s: must be a finite number, got nan",
    "baseline_duration_infinite.yaml": "baseline.duration_s: must be a finite number, got inf",
    "canary_timeout_nan.yaml": "canary.request_timeout_s: must be a finite number, got nan",
    "canary_max_in_flight_zero.yaml": "canary.max_in_flight: must be at least 1, got 0",
    "canary_unknown_key.yaml": "canary.rate_per_s: unknown key; use request_timeout_s, max_in_flight",
    "canary_not_a_mapping.yaml": "canary: must be a mapping with request_timeout_s, max_in_flight, got int",
    "slo_after_s_nan.yaml": "slos[2].after_s: must be a finite number, got nan",
    "slo_plus_baseline_negative.yaml": "slos[3].threshold.plus_baseline: must be more than 0, got -0.75",
    "slo_window_infinite.yaml": "slos[4].window_s: must be a finite number, got inf",
    "recovery_within_nan.yaml": "recovery.within_s: must be a finite number, got nan",
    "recovery_hold_infinite.yaml": "recovery.hold_s: must be a finite number, got inf",
    # The method's fault action: exactly one.
    "no_fault_action.yaml": f"method: needs exactly one fault action from {FAULT_MODULES}; found 0",
    "two_fault_actions.yaml": f"method: needs exactly one fault action from {FAULT_MODULES}; found 2 (method[0], method[1])",
    "method_revert_of_another_fault.yaml": "method[1].provider.func: a revert in the method must be rollback_flood_kv_cache of inferchaos.ctk.vllm_actions, after method[0]",
    "unknown_environment.yaml": "environment.name: unknown environment 'moon'; use one of local, kind, cluster",
    # Stop conditions and recovery.
    "stop_conditions_not_a_list.yaml": "stop_conditions: must be a list of guardrails like SLOs (probe, op, threshold), got dict",
    "stop_condition_missing_probe.yaml": "stop_conditions[0].probe: required",
    "stop_condition_missing_op.yaml": "stop_conditions[0].op: required",
    "stop_condition_missing_threshold.yaml": "stop_conditions[0].threshold: required",
    "stop_condition_bad_agg.yaml": "stop_conditions[0].agg: unknown aggregate 'average'; use one of mean, ",
    "stop_condition_bad_window.yaml": "stop_conditions[0].window_s: must be a number, got str '10s'",
    "stop_condition_unknown_probe.yaml": "stop_conditions[0].probe: unknown probe 'canary.sucess'; did you mean 'canary.success'?",
    # The gray faults' arguments, and an SLO's after_s.
    "hang_what_unknown.yaml": f"{ARGS}: vllm.hang_engine: what: must be one of engine, server, all; got 'brain'",
    "hang_duration_zero.yaml": f"{ARGS}.duration_s: must be more than 0 seconds, got 0",
    "partition_direction_unknown.yaml": f"{ARGS}: network.partition_node: direction: must be one of both, in, out; got 'sideways'",
    "degrade_loss_over_100.yaml": f"{ARGS}: network.degrade_link: loss_pct: must be at most 100, got 150",
    "degrade_delay_negative.yaml": f"{ARGS}: network.degrade_link: delay_ms: must be at least 0, got -200",
    "slow_slowdown_one.yaml": f"{ARGS}: vllm.slow_engine: slowdown: must be a finite number more than 1 (1 is full speed), got 1",
    "slow_slowdown_not_a_number.yaml": f"{ARGS}.slowdown: must be float, got 'ten'",
    "slo_after_s_in_recovery.yaml": "slos[3].after_s: applies to the during phase only, not to recovery",
    "recovery_not_a_mapping.yaml": "recovery: must be a mapping, got list",
    "recovery_missing_within.yaml": "recovery.within_s: required",
    "recovery_steady_not_a_list.yaml": "recovery.steady: must be a non-empty list of SLO names, got 'ttft_after'",
    "recovery_unknown_key.yaml": "recovery.hold: unknown key; use one of within_s, within_cold_starts, hold_s, steady, first_within_s",
    "recovery_unknown_steady.yaml": "recovery.steady[1]: no SLO named 'queue_empty'; declared: kv_headroom_before, ",
    # SLO keys.
    "bad_agg.yaml": "slos[2].agg: unknown aggregate 'average'; use one of mean, ",
    "bad_phase.yaml": "slos[2].phase: unknown phase 'after'; use one of baseline, during, recovery",
    "bad_window.yaml": "slos[4].window_s: must be a number, got str '5s'",
    "slo_window_zero.yaml": "slos[4].window_s: must be more than 0 seconds, got 0",
    "duplicate_slo_names.yaml": "slos[1].name: duplicate SLO name 'kv_headroom_before' (also slos[0])",
    # Bounds that could never be breached: no canary latency reads more than its timeout.
    "slo_at_most_at_the_timeout.yaml": "slos[4].threshold.at_most: must be below the canary's 30 s request timeout (canary.request_timeout_s): a bound at or above it can never be breached; got 30",
    "slo_at_least_above_the_ceiling.yaml": "slos[4].threshold.at_least: must be below the ceiling (15: by default 0.5 x the 30 s canary timeout), got 20",
    "slo_latency_bound_at_the_timeout.yaml": "slos[3].threshold: 30 can never be breached: canary.ttft_s reads at most the canary's 30 s request timeout (canary.request_timeout_s); give a bound below it",
}


@dataclass(frozen=True)
class CliResult:
    """What one `inferchaos run` left: its exit code, its output, and its state and output folders."""

    returncode: int
    stdout: str
    stderr: str
    home: Path
    out: Path

    @property
    def lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


def _inferchaos_each(cases: dict[str, list[str]], base: Path) -> dict[str, CliResult]:
    """`inferchaos ARGS --out` per case, each in its own process, home and output folder."""
    jobs: list[CliJob] = []
    for name, args in cases.items():
        workdir = base / name
        workdir.mkdir(parents=True)
        jobs.append(
            CliJob(
                [*args, "--out", str(workdir / "runs")],
                str(workdir),
                str(workdir / "home"),
                str(workdir / "stdout"),
                str(workdir / "stderr"),
            )
        )
    codes = run_cli_jobs(jobs)
    return {
        name: CliResult(
            code,
            Path(job.stdout).read_text(),
            Path(job.stderr).read_text(),
            Path(job.home),
            base / name / "runs",
        )
        for (name, job, code) in zip(cases, jobs, codes, strict=True)
    }


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, CliResult]:
    """`inferchaos run` on every case, each in its own process, home and output folder."""
    names = [*sorted(EXPECTED), UNKNOWN_TARGET]
    base = tmp_path_factory.mktemp("bad-input")
    return _inferchaos_each({name: ["run", str(CORPUS / name)] for name in names}, base)


def _assert_refused_in_one_line(result: CliResult) -> str:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout, result.stderr
    assert len(result.lines) == 1, f"expected one line on stderr, got:\n{result.stderr}"
    ledger = result.home / "ledger"
    assert not ledger.exists() or not any(ledger.iterdir()), sorted(ledger.iterdir())
    assert not result.out.exists(), "an invalid experiment must not leave a run folder"
    return result.lines[0]


def test_the_corpus_is_exactly_the_expected_files() -> None:
    on_disk = {p.name for p in CORPUS.iterdir()}
    assert on_disk == set(EXPECTED) - {MISSING} | {UNKNOWN_TARGET, UNKNOWN_WORKER}


def test_an_unknown_worker_passes_validation() -> None:
    spec = load_and_validate(CORPUS / UNKNOWN_WORKER)
    assert spec.fault.fault == "network.partition_node"
    assert spec.fault.params == {"node": "worker-9", "direction": "both"}


def test_the_missing_case_really_is_missing() -> None:
    assert not (CORPUS / MISSING).exists()


def test_the_not_utf8_fixture_really_is_not_utf8() -> None:
    # Git could re-encode or normalise it (.gitattributes keeps it byte for byte).
    data = (CORPUS / "not_utf8.yaml").read_bytes()
    assert b"caf\xe9" in data
    with pytest.raises(UnicodeDecodeError):
        data.decode("utf-8")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_bad_experiment_exits_2_with_one_line(name: str, runs: dict[str, CliResult]) -> None:
    result = runs[name]
    line = _assert_refused_in_one_line(result)
    assert "inferchaos env up" not in line, f"{name} got past validation: {line}"
    assert f"{CORPUS / name}: {EXPECTED[name]}" in line, line


def test_an_unknown_target_passes_validation_and_waits_for_the_environment(
    runs: dict[str, CliResult],
) -> None:
    # Which replicas exist is known only once the environment answers: without one, the run
    # stops at "start one with `inferchaos env up`" (exit 2, nothing injected). The integration
    # test refuses replica-9 against a real one.
    spec = load_and_validate(CORPUS / UNKNOWN_TARGET)
    assert spec.fault.params == {"target": "replica-9"}
    line = _assert_refused_in_one_line(runs[UNKNOWN_TARGET])
    assert "inferchaos env up" in line, f"expected the environment to be asked first: {line}"


def test_an_explicit_zero_second_argument_is_accepted_where_the_fault_defaults_to_zero(
    tmp_path: Path,
) -> None:
    # grace_s: 0 is a hard node loss (the default), not a zero timeout.
    text = (REPO / "experiments" / "k8s_node_loss.yaml").read_text()
    default, explicit = (
        "arguments: {node: inferchaos-worker2}",
        "arguments: {node: inferchaos-worker2, grace_s: 0}",
    )
    assert default in text
    path = tmp_path / "k8s_node_loss.yaml"
    path.write_text(text.replace(default, explicit, 1))  # the action, not its rollback
    assert load_and_validate(path).fault.params["grace_s"] == 0


def test_gameday_on_a_folder_with_one_bad_file_exits_2_before_anything_runs(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    # A good experiment first: the bad one after it must still stop the day before anything starts.
    shutil.copy(REPO / "experiments" / "kv_flood.yaml", suite / "a_kv_flood.yaml")
    shutil.copy(CORPUS / "pauses_after_nan.yaml", suite / "b_pauses_after_nan.yaml")
    result = _inferchaos_each({"gameday": ["gameday", "--suite", str(suite)]}, tmp_path)["gameday"]
    line = _assert_refused_in_one_line(result)
    assert (
        f"{suite / 'b_pauses_after_nan.yaml'}: method[0].pauses.after: must be a finite number, got nan"
        in line
    )
    assert not (result.home / "env").exists(), "validation must come before the environment is started"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda doc: doc.update(configuration="x"), "configuration: must be a mapping, got str"),
        (lambda doc: doc.update(tags=[1]), "tags: must be a list of text tags, got [1]"),
        (
            lambda doc: doc.update({"steady-state-hypothesis": None}),
            "steady-state-hypothesis: must be a mapping, got NoneType",
        ),
        (
            lambda doc: doc["method"][2]["provider"].update(module=1),
            "method[2].provider.module: must be text, got 1",
        ),
        (
            lambda doc: doc["method"][2]["provider"].update(arguments=[]),
            "method[2].provider.arguments: must be a mapping",
        ),
        (
            lambda doc: doc["rollbacks"][0].update(name=["x"]),
            "rollbacks[0].name: required: a text name, got ['x']",
        ),
        (
            lambda doc: doc["method"][1].update(pauses=20),
            "method[1].pauses: must be a mapping with after, got int",
        ),
        (lambda doc: doc["environment"].update(name=[]), "environment.name: unknown environment []"),
    ],
)
def test_shapes_chaos_toolkit_would_crash_on_are_refused_naming_the_key(
    change: Callable[[dict[str, Any]], None], message: str
) -> None:
    # Chaos Toolkit's validator raises AttributeError/TypeError on these: they must be one ConfigError line first.
    doc = yaml.safe_load((REPO / "experiments" / "kv_flood.yaml").read_text())
    change(doc)
    with pytest.raises(ConfigError) as raised:
        ensure_experiment_is_valid(doc, Path("kv_flood.yaml"))
    assert str(raised.value).startswith(f"kv_flood.yaml: {message}"), str(raised.value)
