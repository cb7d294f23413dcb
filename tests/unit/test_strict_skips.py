"""Under INFERCHAOS_STRICT_SKIPS (set by .ci/run) a skip fails, unless it was declared allowed.

Each case runs a small test file in a pytest of its own (pytester) with the plugin tests.skips,
as tests/conftest.py loads it, and reads the outcomes.
"""

from __future__ import annotations

import pytest

from tests.skips import NOT_INSTALLED_ENV, STRICT_SKIPS_ENV

pytest_plugins = ["pytester"]
# The inner runs need neither a cache folder nor pytest-asyncio (which warns without its ini).
QUIET = ("-p", "no:cacheprovider", "-p", "no:asyncio")

CASES = """
import shutil

import pytest

from tests.skips import host_lacks, needs_package, require


def test_plain_skip():
    pytest.skip("redis-server is not installed")


@pytest.mark.skipif(True, reason="promtool is not installed")
def test_skipif():
    pass


@pytest.mark.may_skip("no writable cpu cgroup on this host")
def test_declared_may_skip():
    pytest.skip("no writable cpu cgroup here")


def test_host_lacks_at_run_time():
    host_lacks("no replica memory budgets here")


def test_package_missing():
    require("redis-server", None, "redis-server")


@needs_package("chromium", None, "Chromium")
def test_package_missing_by_marker():
    pass


def test_passes():
    pass


@pytest.mark.xfail(reason="known")
def test_xfail():
    assert False
"""


def _outcomes(pytester: pytest.Pytester) -> dict[str, str]:
    pytester.makepyfile(test_cases=CASES)
    result = pytester.runpytest_inprocess("-p", "tests.skips", *QUIET)
    outcomes: dict[str, str] = {}
    for report in result.reprec.getreports("pytest_runtest_logreport"):  # type: ignore[attr-defined]
        name = report.nodeid.split("::")[-1]
        if report.when == "call" or report.outcome != "passed":
            outcomes.setdefault(name, "xfailed" if hasattr(report, "wasxfail") else report.outcome)
    return outcomes


def test_without_the_variable_every_skip_stays_a_skip(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(STRICT_SKIPS_ENV, raising=False)
    outcomes = _outcomes(pytester)
    assert outcomes == {
        "test_plain_skip": "skipped",
        "test_skipif": "skipped",
        "test_declared_may_skip": "skipped",
        "test_host_lacks_at_run_time": "skipped",
        "test_package_missing": "skipped",
        "test_package_missing_by_marker": "skipped",
        "test_passes": "passed",
        "test_xfail": "xfailed",
    }


def test_strict_skips_fail_every_skip_not_declared_allowed(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(STRICT_SKIPS_ENV, "1")
    monkeypatch.setenv(NOT_INSTALLED_ENV, "chromium")
    outcomes = _outcomes(pytester)
    assert outcomes == {
        "test_plain_skip": "failed",
        "test_skipif": "failed",
        "test_declared_may_skip": "skipped",
        "test_host_lacks_at_run_time": "skipped",
        # CI installed redis-server (it is not named): its test may not skip.
        "test_package_missing": "failed",
        "test_package_missing_by_marker": "skipped",
        "test_passes": "passed",
        "test_xfail": "xfailed",
    }


def test_the_failure_quotes_the_skip_reason(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(STRICT_SKIPS_ENV, "1")
    monkeypatch.delenv(NOT_INSTALLED_ENV, raising=False)
    pytester.makepyfile(
        test_one="import pytest\n\ndef test_one():\n    pytest.skip('redis-server is not installed')\n"
    )
    result = pytester.runpytest_inprocess("-p", "tests.skips", *QUIET)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            f"*skipped under {STRICT_SKIPS_ENV}, where CI has what this test needs, so the skip fails: "
            "redis-server is not installed*"
        ]
    )


def test_a_may_skip_marker_without_a_reason_allows_nothing(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(STRICT_SKIPS_ENV, "1")
    pytester.makepyfile(
        test_one="import pytest\n\n@pytest.mark.may_skip\ndef test_one():\n    pytest.skip('why not')\n"
    )
    result = pytester.runpytest_inprocess("-p", "tests.skips", *QUIET)
    result.assert_outcomes(failed=1)
