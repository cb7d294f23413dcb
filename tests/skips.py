"""Skips that cannot hide in CI: under ``INFERCHAOS_STRICT_SKIPS`` a skipped test fails.

A skip passes a run: where CI installed what a test needs, a test that still skips tested
nothing and says so only in a summary line. ``.ci/run`` therefore sets ``INFERCHAOS_STRICT_SKIPS``
after its installs, and names in ``INFERCHAOS_NOT_INSTALLED`` the packages it could not install.
This plugin (loaded by tests/conftest.py) then turns every skip into a failure that quotes the
skip's reason, except two kinds, each declared where the test skips, never guessed from the
reason's words:

- a skip for what no package gives this host (root, a writable cgroup controller, a CUDA driver
  there or not, a reachable registry): the test carries ``@pytest.mark.may_skip(reason)``, or a
  shared helper that decides at run time raises :func:`host_lacks`;
- a skip for a package CI installs (:func:`require`, ``@needs_package(...)``) that this run's
  ``INFERCHAOS_NOT_INSTALLED`` names.

Outside CI (the variable unset) every skip stays a skip.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Generator
from typing import NoReturn

import pytest
from _pytest.outcomes import Skipped

logger = logging.getLogger(__name__)

STRICT_SKIPS_ENV = "INFERCHAOS_STRICT_SKIPS"
NOT_INSTALLED_ENV = "INFERCHAOS_NOT_INSTALLED"
MAY_SKIP = "may_skip"
NEEDS_PACKAGE = "needs_package"
# This session's strict_skips(), read once at configure time.
_STRICT = pytest.StashKey[frozenset[str] | None]()


class HostLacks(Skipped):
    """A skip for what no package gives this host: allowed under strict skips, as ``may_skip`` is."""


class NotInstalled(Skipped):
    """A skip for distribution packages CI installs: allowed under strict skips only where
    ``INFERCHAOS_NOT_INSTALLED`` names every one of them."""

    def __init__(self, msg: str, packages: tuple[str, ...]) -> None:
        super().__init__(msg)
        self.packages = packages


def host_lacks(reason: str) -> NoReturn:
    """Skip the running test for what no package can give this host (the run-time ``may_skip``)."""
    raise HostLacks(reason)


def require(package: str | tuple[str, ...], found: object, what: str) -> None:
    """Skip the running test, naming ``package``, unless ``found`` (a path, a version: truthy)."""
    if found:
        return
    packages = (package,) if isinstance(package, str) else tuple(package)
    listed = " ".join(packages)
    raise NotInstalled(f"{what} is not installed (apt-get install {listed}; .ci/run installs it)", packages)


def needs_package(package: str, found: object, what: str) -> pytest.MarkDecorator:
    """The marker form of :func:`require`, for a whole test or module (``pytestmark``)."""
    return pytest.mark.needs_package(package, found, what)


def strict_skips() -> frozenset[str] | None:
    """None where skips pass; under strict skips, the packages CI could not install."""
    if not os.environ.get(STRICT_SKIPS_ENV):
        return None
    return frozenset(os.environ.get(NOT_INSTALLED_ENV, "").split())


def allowed_skip(item: pytest.Item, skip: BaseException | None, not_installed: frozenset[str]) -> bool:
    """Whether ``skip`` (the exception that skipped ``item``) may stand under strict skips."""
    marker = item.get_closest_marker(MAY_SKIP)
    if marker is not None and (marker.args or marker.kwargs.get("reason")):
        return True
    if isinstance(skip, HostLacks):
        return True
    return isinstance(skip, NotInstalled) and set(skip.packages) <= not_installed


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MAY_SKIP}(reason): the test may skip under {STRICT_SKIPS_ENV}: the host lacks what no "
        "package gives (a cgroup controller, a GPU); say which in reason",
    )
    config.addinivalue_line(
        "markers",
        f"{NEEDS_PACKAGE}(package, found, what): skip unless found, naming the distribution package; "
        f"allowed under {STRICT_SKIPS_ENV} only where {NOT_INSTALLED_ENV} names it",
    )
    config.stash[_STRICT] = strict_skips()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    for marker in item.iter_markers(NEEDS_PACKAGE):
        require(*marker.args, **marker.kwargs)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    not_installed = item.config.stash.get(_STRICT, None)
    if not_installed is None or not report.skipped or hasattr(report, "wasxfail"):
        return report
    skip = call.excinfo.value if call.excinfo is not None else None
    if allowed_skip(item, skip, not_installed):
        return report
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    reason = reason.removeprefix("Skipped: ")
    report.outcome = "failed"
    report.longrepr = (
        f"skipped under {STRICT_SKIPS_ENV}, where CI has what this test needs, so the skip fails: {reason}\n"
        f"(a skip this host cannot avoid is marked @pytest.mark.{MAY_SKIP}(reason) or raised by "
        "tests.skips.host_lacks; a package CI could not install is named in "
        f"{NOT_INSTALLED_ENV} and skipped by tests.skips.require)"
    )
    logger.debug("strict skips: %s failed its skip: %s", item.nodeid, reason)
    return report
