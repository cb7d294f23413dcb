"""scripts/check_dated_comments.py: dated narratives fail `make lint`; one-line threshold data,
timestamps and dates in code pass."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from tests.scripts import load_script


@pytest.fixture(scope="module")
def check() -> ModuleType:
    return load_script("scripts/check_dated_comments.py")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_a_dated_comment_fails(check: ModuleType, tmp_path: Path) -> None:
    path = write(tmp_path / "a.py", "X = 1\n# Measured 2026-12-01 on a slower machine: 3 s.\nY = 2\n")
    assert check.check_python(path) == [(2, "# Measured 2026-12-01 on a slower machine: 3 s.")]


def test_a_dated_trailing_comment_fails(check: ModuleType, tmp_path: Path) -> None:
    path = write(tmp_path / "a.py", "LIMIT = 3  # since 2026-12-03\n")
    assert [number for number, _ in check.check_python(path)] == [1]


def test_a_data_line_passes(check: ModuleType, tmp_path: Path) -> None:
    path = write(
        tmp_path / "a.py",
        "# A busy replica misses a read or two.\n"
        "# Data (2026-12-01, 62 runs): busy up to 6 misses; dead or hung 9-14.\n"
        "MISSES = 2\n",
    )
    assert check.check_python(path) == []


def test_a_data_line_needs_its_form(check: ModuleType, tmp_path: Path) -> None:
    path = write(tmp_path / "a.py", "# Data 2026-12-01: 62 runs.\nMISSES = 2\n")
    assert [number for number, _ in check.check_python(path)] == [1]


def test_timestamps_and_dates_in_code_pass(check: ModuleType, tmp_path: Path) -> None:
    path = write(
        tmp_path / "a.py",
        'T0 = "2025-11-29T10:00:00Z"  # the event seen at 2025-11-29T10:05:00Z\n'
        'FOLDER = "2026-01-08"\n'
        "# read back as 2026-01-01 00:00:12.250 UTC\n"
        "def f() -> str:\n"
        '    """An epoch as UTC: ``2026-01-01 00:00:12.250 UTC``."""\n'
        '    return "2026-12-01"\n',
    )
    assert check.check_python(path) == []


def test_a_dated_docstring_fails(check: ModuleType, tmp_path: Path) -> None:
    path = write(
        tmp_path / "a.py",
        '"""A module."""\n'
        "\n"
        "class C:\n"
        '    """What C holds.\n'
        "\n"
        "    Measured 2026-12-02, 2 cores: 74 % of a core.\n"
        '    """\n'
        "\n"
        "    def m(self) -> None:\n"
        '        """Nothing (2026-12-03)."""\n',
    )
    assert [number for number, _ in check.check_python(path)] == [6, 10]


def test_a_dated_data_line_in_a_docstring_fails(check: ModuleType, tmp_path: Path) -> None:
    path = write(tmp_path / "a.py", '"""\n# Data (2026-12-01, 5 runs): 0.1-0.2 s.\n"""\n')
    assert [number for number, _ in check.check_python(path)] == [2]


def test_yaml_comments(check: ModuleType, tmp_path: Path) -> None:
    path = write(
        tmp_path / "e.yaml",
        "# Broken on purpose: slos[0].probe is misspelt.\n"
        "title: 2026-12-01 is data here\n"
        "slos:\n"
        "  # Thresholds from 10 healthy runs (2026-11-30, 2 cores).\n"
        "  # Data (2026-11-30, 10 runs): healthy p95 0.04-0.2 s; control 1.3 s.\n"
        "  - {name: ttft, threshold: 0.5}\n",
    )
    assert [number for number, _ in check.check_yaml(path)] == [4]


def test_docs_allow_no_date_but_timestamps(check: ModuleType, tmp_path: Path) -> None:
    path = write(
        tmp_path / "README.md",
        "# inferchaos\n"
        "Since 2026-12-04 the game day runs twelve scenarios.\n"
        "A run's folder reads runs/2026-01-01T10:00:00Z.\n"
        "# Data (2026-12-01, 5 runs): no exception in the docs.\n",
    )
    assert [number for number, _ in check.check_doc(path)] == [2, 4]


def test_the_scan_follows_linked_folders_once_and_names_each_line(check: ModuleType, tmp_path: Path) -> None:
    write(tmp_path / "faults" / "f.py", "# hung on 2026-12-03's slower machine\n")
    write(tmp_path / "experiments" / "controls" / "c.yml", "# Measured 2026-12-02: 4 runs.\n")
    write(tmp_path / "docs" / "x.md", "No date here.\n")
    write(tmp_path / "README.md", "On 2026-12-05 it passed.\n")
    (tmp_path / "inferchaos").mkdir()
    (tmp_path / "inferchaos" / "faults").symlink_to(tmp_path / "faults")
    scanned, report = check.scan(tmp_path)
    assert scanned == 4
    assert report == [
        "faults/f.py:1: # hung on 2026-12-03's slower machine",
        "experiments/controls/c.yml:1: # Measured 2026-12-02: 4 runs.",
        "README.md:1: On 2026-12-05 it passed.",
    ]


def test_main_passes_a_clean_tree(
    check: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path / "scripts" / "s.py", "# Data (2026-12-01, 3 runs): 1-2 s.\nX = 1\n")
    write(tmp_path / "README.md", "Nothing dated.\n")
    monkeypatch.setattr(check, "ROOT", tmp_path)
    assert check.main() == 0
    assert "2 files scanned" in capsys.readouterr().out
    write(tmp_path / "README.md", "On 2026-12-05 it passed.\n")
    assert check.main() == 1
    assert "README.md:1: On 2026-12-05 it passed." in capsys.readouterr().out
