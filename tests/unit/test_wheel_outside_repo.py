"""A wheel of the repository, installed without extras into a fresh venv, works outside the repository.

The wheel is built from a copy of the repository's files (tests/wheel_build.py) and installed
with its base dependencies only: no vLLM, no torch (pip finds them through this machine's
pip configuration, its local wheel folders and cache, so nothing is downloaded twice). Every
command then runs with an empty folder as its current directory and a clean environment
(no PYTHONPATH): what it finds, it finds in the installed package.

No local environment is started (a unit test: it needs no service): the base install cannot
run one, and what is checked here is that packaged files are found. A packaged name is resolved and validated when the run stops at
the missing environment rather than at the file.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fakes.openai_server import FakeBehaviour, FakeOpenAIServer
from tests.skips import host_lacks
from tests.wheel_build import REPO, build_wheel

pytestmark = pytest.mark.long_running

INSTALL_TIMEOUT_S = 600
COMMAND_TIMEOUT_S = 120
# pip's words for a registry it cannot reach (as opposed to a requirement nobody serves).
UNREACHABLE = (
    "NewConnectionError",
    "Max retries exceeded",
    "Temporary failure in name resolution",
    "Network is unreachable",
    "ConnectTimeoutError",
    "ReadTimeoutError",
)
NO_SUCH_FILE = "no such experiment file"
NO_ENVIRONMENT = "no local environment is recorded"
# Each is run from the installed package, so each must be installed executable.
KIND_SCRIPTS = ("up.sh", "down.sh", "gameday-in-cluster.sh")


@dataclass(frozen=True)
class Result:
    returncode: int
    stdout: str
    stderr: str

    @property
    def lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


@dataclass(frozen=True)
class Installed:
    """The fresh venv, and an empty folder (outside the repository) to run its commands in."""

    venv: Path
    empty: Path
    home: Path

    @property
    def env(self) -> dict[str, str]:
        """This process's environment without what would import the checkout or another venv."""
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
        return {
            **env,
            "PATH": f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
            "INFERCHAOS_HOME": str(self.home),
        }

    def run(self, *argv: str, timeout_s: float = COMMAND_TIMEOUT_S) -> Result:
        """``argv`` (its first word looked up in the venv's bin/) in the empty folder."""
        done = subprocess.run(
            [str(self.venv / "bin" / argv[0]), *argv[1:]],
            cwd=self.empty,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        return Result(done.returncode, done.stdout, done.stderr)

    def python(self, code: str) -> str:
        """What ``code``, run by the venv's python in the empty folder, prints; fails the test if it fails."""
        result = self.run("python", "-c", code)
        assert result.returncode == 0, result.stderr
        return result.stdout.strip()


def _install(venv: Path, wheel: Path) -> None:
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=120)
    # --no-compile: byte-compiling every installed package costs the install most of its CPU, for
    # modules these commands never import.
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-compile", str(wheel)],
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT_S,
    )
    if done.returncode != 0:
        output = done.stdout + done.stderr
        if any(marker in output for marker in UNREACHABLE):
            host_lacks(f"the package registry cannot be reached: {output.strip().splitlines()[-1]}")
        pytest.fail(f"pip install {wheel.name} failed (exit {done.returncode}):\n{output[-4000:]}")


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    work = tmp_path_factory.mktemp("wheel-outside-repo")
    assert REPO not in work.resolve().parents, "the test folder must be outside the repository"
    venv = work / "venv"
    try:
        _install(venv, build_wheel(work))
        empty, home = work / "empty", work / "home"
        empty.mkdir()
        yield Installed(venv, empty, home)
    finally:
        # About 750 MB; pytest keeps its last three temp folders, so it is not left to them.
        shutil.rmtree(venv, ignore_errors=True)


@pytest.fixture(scope="module")
def package_dir(installed: Installed) -> Path:
    """Where the venv imports inferchaos from: its site-packages, not the checkout."""
    where = Path(installed.python("import inferchaos, os; print(os.path.dirname(inferchaos.__file__))"))
    assert installed.venv in where.parents, where
    return where


def test_the_base_install_carries_neither_torch_nor_vllm(installed: Installed) -> None:
    code = "import importlib.util as u; print([m for m in ('torch', 'vllm') if u.find_spec(m)])"
    assert installed.python(code) == "[]"


def test_help_runs(installed: Installed) -> None:
    result = installed.run("inferchaos", "--help")
    assert result.returncode == 0, result.stderr
    assert "gameday" in result.stdout and "run" in result.stdout


@pytest.mark.parametrize("name", ["kv_flood", "controls/kv_flood"])
def test_a_packaged_name_runs_from_an_empty_folder(installed: Installed, name: str) -> None:
    out = installed.empty / "dry-runs"
    result = installed.run("inferchaos", "run", name, "--dry-run", "--out", str(out))
    # Found and validated: what stops it is the environment, which the base install has none of.
    assert result.returncode == 2, result.stderr
    assert len(result.lines) == 1, result.stderr
    assert NO_SUCH_FILE not in result.stderr and NO_ENVIRONMENT in result.lines[0], result.stderr
    assert not out.exists()


def test_an_unknown_name_is_one_line_listing_the_packaged_names(installed: Installed) -> None:
    result = installed.run("inferchaos", "run", "kv_flod")
    assert result.returncode == 2
    assert len(result.lines) == 1, result.stderr
    assert f"kv_flod: {NO_SUCH_FILE}" in result.lines[0]
    assert "kv_flood" in result.lines[0] and "controls/<name>" in result.lines[0]


def test_the_default_game_day_finds_its_suite_in_the_package(installed: Installed) -> None:
    result = installed.run("inferchaos", "gameday", "--dry-run")
    assert result.returncode == 2, result.stderr
    assert NO_SUCH_FILE not in result.stderr and NO_ENVIRONMENT in result.stderr, result.stderr


def test_the_kind_files_are_installed_and_found_from_the_package(
    installed: Installed, package_dir: Path
) -> None:
    kind = package_dir / "environments" / "kind"
    for script in KIND_SCRIPTS:
        assert os.access(kind / script, os.X_OK), f"{script} is not an executable file in {kind}"
    checkout = REPO / "environments" / "kind"
    for name in ("kind.yaml", "kind-config.yaml", "in-cluster.yaml", "vllm-cpu.Dockerfile"):
        assert (kind / name).read_bytes() == (checkout / name).read_bytes(), name
    manifests = sorted(p.name for p in (checkout / "manifests").glob("*.yaml"))
    assert manifests and sorted(p.name for p in (kind / "manifests").glob("*.yaml")) == manifests
    found = installed.python(
        "from inferchaos.environments.kind.lifecycle import SCRIPTS, kind_script; "
        "print(*[kind_script(s) for s in SCRIPTS])"
    )
    assert found.split() == [str(kind / script) for script in ("up.sh", "down.sh")]
    # gameday-in-cluster.sh reads the experiments two folders up from itself.
    script = (kind / "gameday-in-cluster.sh").read_text()
    suite = script.split("SUITE=(", 1)[1].split(")", 1)[0].split()
    assert suite and all((kind / ".." / ".." / "experiments" / f"{name}.yaml").is_file() for name in suite)


@pytest.fixture
def fake_server() -> Iterator[FakeOpenAIServer]:
    server = FakeOpenAIServer(FakeBehaviour(chunks=3, first_delay_s=0.02, delay_s=0.01)).start()
    yield server
    server.stop()


def test_locust_runs_the_installed_locustfile_and_writes_into_the_run_folder(
    installed: Installed, package_dir: Path, fake_server: FakeOpenAIServer
) -> None:
    locustfile = package_dir / "load" / "locustfile.py"
    assert locustfile.is_file()
    before = sorted(
        str(p.relative_to(package_dir)) for p in package_dir.rglob("*") if "__pycache__" not in p.parts
    )
    # As `inferchaos run --load` does: a relative run folder under the current directory.
    code = (
        "import json; from pathlib import Path; "
        "from inferchaos.load.locust_runner import LOCUSTFILE, LoadOptions, LocustLoad; "
        f"load = LocustLoad({fake_server.url!r}, Path('runs/kv_flood/load/locust'), LoadOptions(users=1, spawn_rate=1)); "
        "load.start(); code = load.stop(); "
        "print(json.dumps({'locustfile': str(LOCUSTFILE), 'argv': load.argv(), 'code': code}))"
    )
    report = json.loads(installed.python(code).splitlines()[-1])
    assert report["code"] == 0
    assert report["locustfile"] == str(locustfile)
    assert report["argv"][report["argv"].index("-f") + 1] == str(locustfile)
    run_folder = installed.empty / "runs" / "kv_flood" / "load"
    assert (run_folder / "locust_stats_history.csv").is_file()
    assert fake_server.behaviour.completions > 0
    after = sorted(
        str(p.relative_to(package_dir)) for p in package_dir.rglob("*") if "__pycache__" not in p.parts
    )
    assert after == before, "Locust wrote into the installed package"
