"""Build the inferchaos wheel from the repository, as the packaging tests need it.

The wheel is built from a copy of the files git would commit (tracked, or new and not
ignored): setuptools keeps a build/ folder and an egg-info in the source tree, and a stale one
would carry modules the repository no longer has, or hide package data that a fresh build lacks.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUILD_TIMEOUT_S = 300


def copy_source(dest: Path) -> Path:
    """Copy the repository's files (symlinks as symlinks) into ``dest``; returns ``dest``."""
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        check=True,
        capture_output=True,
    ).stdout
    for name in sorted(set(listed.decode().split("\0"))):
        if not name:
            continue
        src, dst = REPO / name, dest / name
        if not (src.is_symlink() or src.is_file()):
            continue  # tracked but deleted in the working tree
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), dst)
        else:
            shutil.copy2(src, dst)
    return dest


def build_wheel(workdir: Path) -> Path:
    """Build the wheel (no dependencies, this interpreter's setuptools) under ``workdir``; its path."""
    source = copy_source(workdir / "source")
    out = workdir / "wheel"
    argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out)]
    subprocess.run(
        [*argv, str(source)],
        cwd=source,
        check=True,
        capture_output=True,
        timeout=BUILD_TIMEOUT_S,
    )
    (built,) = out.glob("inferchaos-*.whl")
    return built
