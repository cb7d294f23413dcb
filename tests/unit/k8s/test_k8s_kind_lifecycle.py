"""lifecycle.py finds the kind scripts in the installed package and runs them from any directory."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

import inferchaos.environments.kind as kind_package
from inferchaos.environments.kind import lifecycle
from inferchaos.environments.kind.lifecycle import KIND_DIR, SCRIPTS, kind_script, run_kind_script
from inferchaos.errors import EnvironmentStartError


def test_the_scripts_are_found_beside_the_installed_module() -> None:
    assert Path(kind_package.__file__).resolve().parent == KIND_DIR
    for script in SCRIPTS:
        path = kind_script(script)
        assert path == KIND_DIR / script and os.access(path, os.X_OK)


def test_a_script_missing_from_the_install_is_a_start_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lifecycle, "KIND_DIR", tmp_path)
    with pytest.raises(EnvironmentStartError, match=r"up\.sh is missing from this install"):
        run_kind_script("up.sh", lambda _line: None)


def test_a_script_runs_from_the_package_in_the_callers_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package, caller = tmp_path / "site-packages" / "kind", tmp_path / "project"
    package.mkdir(parents=True)
    caller.mkdir()
    (package / "up.sh").write_text('echo "$0"\necho "$PWD"\necho "$VENV"\n')
    monkeypatch.setattr(lifecycle, "KIND_DIR", package)
    monkeypatch.chdir(caller)
    lines: list[str] = []
    run_kind_script("up.sh", lines.append)
    # Its own files are found through $0; `inferchaos model` keeps the model under the caller's .inferchaos/.
    assert lines[:2] == [str(package / "up.sh"), str(caller)]
    assert lines[2] and (Path(lines[2]) / "bin").is_dir()


def test_up_sh_reads_only_files_beside_itself_and_the_installed_modules() -> None:
    up = (KIND_DIR / "up.sh").read_text()
    beside = re.findall(r"\$here/([\w./-]+)", up)
    assert beside and all((KIND_DIR / name).exists() for name in beside)
    # A module by its installed name runs from any directory; a checkout's top-level name does not.
    assert "-m inferchaos.environments.kind.fake_gpus" in up
    assert not re.search(r"-m environments\.", up) and 'cd "$root"' not in up
