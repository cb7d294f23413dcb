"""Fail on dated narratives in comments, docstrings and the docs: history must not creep back.

History goes in CHANGELOG.md and measurements in bench/RESULTS.md (issue #35). A comment keeps
the why; a threshold keeps its healthy/control data in one line, the only place a date may
stand, in a ``.py`` or YAML comment:

    # Data (YYYY-MM-DD, N runs): the healthy readings; the control's readings.

Scanned: the comments and docstrings of the ``.py`` files of inferchaos (and the folders it
links in), environments, faults, reports, steady_state, scripts, tests and bench; the comment
lines of the YAML files under experiments/ and tests/fixtures/; every line of README.md and
docs/*.md. A date is a year 20xx, a month and a day joined by hyphens; one followed by ``T10``
or `` 10:`` is a timestamp, which is data, and passes.

    .venv/bin/python scripts/check_dated_comments.py    # print each dated line; exit 1 if any
"""

from __future__ import annotations

import ast
import io
import os
import re
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The linked-in folders come before inferchaos/, so each file is named by its own path.
PYTHON_SOURCES = (
    "environments",
    "faults",
    "reports",
    "steady_state",
    "scripts",
    "tests",
    "bench",
    "inferchaos",
)
YAML_SOURCES = ("experiments", "tests/fixtures")
YAML_SUFFIXES = (".yaml", ".yml")
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b(?!T\d| \d\d:)")
DATA_LINE = re.compile(r"^\s*# Data \(\d{4}-\d{2}-\d{2}, [^)]*\): ")

# (line number, the line's text) of each dated line in one file.
Finding = tuple[int, str]


def walk(top: Path, suffixes: tuple[str, ...]) -> list[Path]:
    """The files under ``top`` ending in one of ``suffixes``, following linked folders once."""
    found: list[Path] = []
    seen_dirs: set[str] = set()
    for folder, dirs, files in os.walk(top, followlinks=True):
        real = os.path.realpath(folder)
        if real in seen_dirs:
            dirs[:] = []
            continue
        seen_dirs.add(real)
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        found.extend(Path(folder) / name for name in sorted(files) if name.endswith(suffixes))
    return found


def unique(paths: list[Path]) -> list[Path]:
    """Each real file once (the package links folders in), in order."""
    seen: dict[Path, Path] = {}
    for path in paths:
        if path.is_file():
            seen.setdefault(path.resolve(), path)
    return list(seen.values())


def python_files(root: Path = ROOT) -> list[Path]:
    """The ``.py`` files whose comments and docstrings are checked."""
    return unique([p for top in PYTHON_SOURCES for p in walk(root / top, (".py",))])


def yaml_files(root: Path = ROOT) -> list[Path]:
    """The YAML files whose comment lines are checked."""
    return unique([p for top in YAML_SOURCES for p in walk(root / top, YAML_SUFFIXES)])


def doc_files(root: Path = ROOT) -> list[Path]:
    """README.md and docs/*.md, every line of which is checked."""
    return unique([root / "README.md", *sorted((root / "docs").glob("*.md"))])


def dated(text: str) -> bool:
    """Whether ``text`` holds a date that is not part of a timestamp."""
    return DATE.search(text) is not None


def docstring_lines(tree: ast.Module) -> set[int]:
    """The line numbers the docstrings of a module, its classes and its functions span."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        first = node.body[0] if node.body else None
        if (
            isinstance(first, ast.Expr)
            and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)
        ):
            end = first.value.end_lineno or first.value.lineno
            lines.update(range(first.value.lineno, end + 1))
    return lines


def check_python(path: Path) -> list[Finding]:
    """Dated comments (other than a ``# Data (...)`` line) and dated docstring lines of ``path``."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    findings: dict[int, str] = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT and dated(token.string) and not DATA_LINE.match(token.string):
            findings[token.start[0]] = lines[token.start[0] - 1]
    for number in docstring_lines(ast.parse(source, filename=str(path))):
        if dated(lines[number - 1]):
            findings[number] = lines[number - 1]
    return sorted(findings.items())


def check_yaml(path: Path) -> list[Finding]:
    """Dated comment lines of ``path``, other than ``# Data (...)`` lines."""
    text = path.read_bytes().decode("utf-8", errors="replace")
    return [
        (number, line)
        for number, line in enumerate(text.splitlines(), start=1)
        if line.strip().startswith("#") and dated(line) and not DATA_LINE.match(line)
    ]


def check_doc(path: Path) -> list[Finding]:
    """Dated lines of ``path``: the docs hold no dates at all."""
    text = path.read_text(encoding="utf-8")
    return [(number, line) for number, line in enumerate(text.splitlines(), start=1) if dated(line)]


def scan(root: Path | None = None) -> tuple[int, list[str]]:
    """How many files under ``root`` (the repository's by default) were scanned, and a
    ``path:line: text`` for each dated line."""
    root = root or ROOT
    checks = [
        *((path, check_python) for path in python_files(root)),
        *((path, check_yaml) for path in yaml_files(root)),
        *((path, check_doc) for path in doc_files(root)),
    ]
    report: list[str] = []
    for path, check in checks:
        shown = path.relative_to(root) if path.is_relative_to(root) else path
        try:
            findings = check(path)
        except (SyntaxError, UnicodeDecodeError, tokenize.TokenError) as e:
            report.append(f"{shown}: cannot be read: {e}")
            continue
        report.extend(f"{shown}:{number}: {line.strip()}" for number, line in findings)
    return len(checks), report


def main() -> int:
    """Print each dated line and return 1, or print the number of files scanned and return 0."""
    scanned, report = scan()
    if report:
        print("\n".join(report))
        print(
            f"check_dated_comments: {len(report)} dated line(s): history goes in CHANGELOG.md, "
            "measurements in bench/RESULTS.md; a threshold keeps one '# Data (YYYY-MM-DD, N runs): ' line",
            file=sys.stderr,
        )
        return 1
    print(f"check_dated_comments: {scanned} files scanned, no dated comment, docstring or doc line")
    return 0


if __name__ == "__main__":
    sys.exit(main())
