"""--pushgateway: a bad URL stops `run` and `gameday` before anything runs (exit 2, one line); a
push that fails is one line on stderr and leaves the exit code alone; and against a real
Pushgateway (Debian's prometheus-pushgateway, started here on a free loopback port) the CLI's
push lands with the verdict's values and replaces the experiment's group.

The real-gateway tests skip, saying why, where the binary is not installed (.ci/run installs it).
"""

from __future__ import annotations

import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from inferchaos.cli import gameday as cli_gameday
from inferchaos.cli import main as cli
from inferchaos.cli import run_command as cli_run
from inferchaos.errors import ConfigError
from inferchaos.primitives.processes import free_port
from inferchaos.reports.pushgateway import pushgateway_url
from inferchaos.run.spec import load_and_validate
from tests.fakes.report_runs import FIXTURE_RUNS, read_json
from tests.fakes.scripted_world import FakeEnv, RunResult
from tests.skips import require

REPO = Path(__file__).resolve().parents[3]
KV_FLOOD = REPO / "experiments" / "kv_flood.yaml"
PUSHGATEWAY = shutil.which("prometheus-pushgateway")
STATUSES = ("passed", "failed", "aborted", "error")


def _cli(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> int:
    """Run `inferchaos ARGV` in-process; its exit code."""
    monkeypatch.setattr("sys.argv", ["inferchaos", *argv])
    with pytest.raises(SystemExit) as done:
        cli.main()
    return int(done.value.code or 0)


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("", "expected a URL"),
        ("ftp://gateway:9091", "expected an http:// or https:// URL"),
        ("127.0.0.1:9091", "expected an http:// or https:// URL"),
        ("http://", "expected a host after the scheme"),
        ("http://gateway:99999", "the port must be a number from 1 to 65535"),
        ("http://gateway:0", "the port must be a number from 1 to 65535"),
        ("http://user:secret@gateway:9091", "credentials in the URL are not supported"),
        ("http://gateway:9091/?job=x", "expected no query or fragment"),
        ("http://gateway:9091 ", "expected a URL without spaces"),
    ],
)
@pytest.mark.parametrize("command", [["run", str(KV_FLOOD)], ["gameday"]], ids=["run", "gameday"])
def test_a_bad_url_is_refused_in_one_line_before_anything_runs(
    command: list[str],
    url: str,
    problem: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("INFERCHAOS_HOME", str(home))

    def no_environment(*args: object, **kwargs: object) -> None:
        raise AssertionError("the environment was opened before --pushgateway was checked")

    monkeypatch.setattr(cli_run, "LocalEnvironment", no_environment)
    monkeypatch.setattr(cli_gameday, "LocalEnvironment", no_environment)
    out = tmp_path / "runs"
    assert _cli([*command, "--out", str(out), "--pushgateway", url], monkeypatch) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"inferchaos: invalid input: --pushgateway: {problem}"), lines[0]
    assert repr(url.replace(":secret@", ":***@")) in lines[0]
    assert not home.exists() and not out.exists()


@pytest.mark.parametrize(
    ("url", "base"),
    [
        ("http://127.0.0.1:9091", "http://127.0.0.1:9091"),
        ("http://127.0.0.1:9091/", "http://127.0.0.1:9091"),
        ("https://metrics.example.org/pushgateway/", "https://metrics.example.org/pushgateway"),
        ("http://[::1]:9091", "http://[::1]:9091"),
    ],
)
def test_a_good_url_becomes_the_gateways_base_url(url: str, base: str) -> None:
    assert pushgateway_url(url) == base


def test_the_url_check_raises_a_config_error() -> None:
    with pytest.raises(ConfigError):
        pushgateway_url("gateway")


def test_a_refused_url_never_prints_its_password() -> None:
    with pytest.raises(ConfigError) as refused:
        pushgateway_url("http://user:hunter2@gateway:9091")
    assert "hunter2" not in str(refused.value)
    assert "'http://user:***@gateway:9091'" in str(refused.value)


def _run_with_push(
    passed_run: RunResult, gateway: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> int:
    """`_run_one` as `inferchaos run --pushgateway` calls it, the run being the recorded fake run."""

    def recorded(spec: Any, env: Any, options: Any, progress: Any = None, probe_factory: Any = None) -> Any:
        shutil.copytree(passed_run.run_dir, options.run_dir)
        return passed_run.verdict

    monkeypatch.setattr(cli_run, "run_experiment", recorded)
    return cli_run.run_one(
        load_and_validate(KV_FLOOD),
        FakeEnv(),
        tmp_path / "runs",
        1.0,
        False,  # type: ignore[arg-type]
        pushgateway=gateway,
    )[0]


def test_a_failed_push_is_one_line_and_keeps_the_exit_code(
    passed_run: RunResult, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    assert _run_with_push(passed_run, closed, tmp_path, monkeypatch) == 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"inferchaos: pushgateway: could not push passed to {closed}: "), lines[0]
    assert lines[0].endswith("; the verdict and exit code stand")


# -- against a real Pushgateway ---------------------------------------------------------------
@pytest.fixture(scope="module")
def pushgateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Pushgateway of this module's own on a free loopback port, ended by its pid afterwards."""
    require("prometheus-pushgateway", PUSHGATEWAY, "prometheus-pushgateway")
    work = tmp_path_factory.mktemp("pushgateway")
    port = free_port()
    with (work / "pushgateway.log").open("wb") as log:
        process = subprocess.Popen(
            [
                PUSHGATEWAY,
                f"--web.listen-address=127.0.0.1:{port}",
                f"--persistence.file={work / 'metrics.data'}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 15
        while True:
            if process.poll() is not None:
                pytest.fail(
                    f"the Pushgateway exited with {process.returncode}: {(work / 'pushgateway.log').read_text()}"
                )
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(
                    f"the Pushgateway did not answer within 15 s: {(work / 'pushgateway.log').read_text()}"
                )
            time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def _gateway_samples(url: str, experiment: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """The inferchaos samples the gateway serves for ``experiment``, without its own labels."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if not sample.name.startswith("inferchaos_") or sample.labels.get("experiment") != experiment:
                continue
            assert sample.labels.pop("job") == "inferchaos"
            sample.labels.pop("instance", None)  # the gateway's own, empty
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def test_the_cli_push_lands_in_a_real_pushgateway_with_the_verdicts_values(
    pushgateway: str, passed_run: RunResult, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _run_with_push(passed_run, pushgateway, tmp_path, monkeypatch) == 0
    verdict = read_json(passed_run.run_dir / "verdict.json")
    run = {"experiment": "passed", "env": "local", "control": "false"}
    found = _gateway_samples(pushgateway, "passed")
    for status in STATUSES:
        labels = frozenset({**run, "status": status}.items())
        assert found[("inferchaos_run_status", labels)] == (1.0 if status == "passed" else 0.0)
    for slo in verdict["slos"]:
        labels = frozenset({**run, "slo": slo["name"], "layer": slo["layer"], "phase": slo["phase"]}.items())
        assert found[("inferchaos_slo_ok", labels)] == 1.0
    fault = frozenset({**run, "fault": verdict["fault"]["name"], "layer": verdict["fault"]["layer"]}.items())
    assert found[("inferchaos_fault_active", fault)] == 0.0
    assert found[("inferchaos_time_to_recover_seconds", fault)] == pytest.approx(
        verdict["timing"]["time_to_recover_s"]
    )


def test_a_push_replaces_the_experiments_group(pushgateway: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The failed recording measured a time to detect; the passed one pushed after it did not,
    so none is left: the gateway holds the latest run of kv_flood on local, nothing older."""
    cli_run._push_run(pushgateway, FIXTURE_RUNS / "failed_kv_flood")
    assert any(
        name == "inferchaos_time_to_detect_seconds" for name, _ in _gateway_samples(pushgateway, "kv_flood")
    )
    cli_run._push_run(pushgateway, FIXTURE_RUNS / "passed_kv_flood")
    assert "pushed to" in capsys.readouterr().out
    found = _gateway_samples(pushgateway, "kv_flood")
    assert not any(name == "inferchaos_time_to_detect_seconds" for name, _ in found)
    status = {
        dict(labels)["status"]: value
        for (name, labels), value in found.items()
        if name == "inferchaos_run_status"
    }
    assert status == {"passed": 1.0, "failed": 0.0, "aborted": 0.0, "error": 0.0, "skipped": 0.0}
