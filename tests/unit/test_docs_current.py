"""The generated references (docs/faults.md, docs/cli.md) match the code they are generated from.

scripts/gen_docs.py writes them from the fault registry and the click commands; `make lint` runs
its --check, and this test runs the same check in-process.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from types import ModuleType

import pytest

from tests.scripts import load_script


def gen_docs() -> ModuleType:
    return load_script("scripts/gen_docs.py")


def test_the_generated_docs_are_current() -> None:
    module = gen_docs()
    texts = module.generated()
    stale = module.stale(texts=texts)
    diff = "".join(
        line
        for relative in stale
        for line in difflib.unified_diff(
            (module.ROOT / relative).read_text(encoding="utf-8").splitlines(keepends=True),
            texts[relative].splitlines(keepends=True),
            relative,
            "generated",
        )
    )
    assert stale == [], f"run {module.REGENERATE}\n{diff[:3000]}"


def test_the_check_names_each_stale_file_and_the_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    module = gen_docs()
    texts = module.generated()
    assert texts == module.generated(), "the output must not change from one run to the next"
    assert sorted(module.write(tmp_path, texts)) == [module.CLI_MD, module.FAULTS_MD]
    (tmp_path / module.CLI_MD).write_text("# CLI reference\n", encoding="utf-8")
    monkeypatch.setattr(module, "ROOT", tmp_path)
    monkeypatch.setattr(module, "generated", lambda: texts)

    assert module.main(["--check"]) == 1
    err = capsys.readouterr().err
    assert err == f"gen_docs: stale: {module.CLI_MD}; run {module.REGENERATE}\n"

    assert module.main([]) == 0
    assert module.main(["--check"]) == 0
