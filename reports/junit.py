"""junit.xml: one run as a JUnit test suite, so any CI shows which SLO broke.

One ``<testsuite>`` named after the experiment; one ``<testcase>`` per SLO (classname
``inferchaos.<layer>``, name ``<slo> [<phase>]``), plus "fault had an observable effect" and
"recovered within N s". A failure message carries the observed value and the threshold.
Testcases that never ran are ``<skipped>`` in an aborted run and ``<error>`` in an error run,
so an environment error can never pass as green. A skipped run (this host cannot hold the
scenario: errors.Unsupported) is one ``<skipped>`` testcase whose message is the reason.

A game day's junit.xml holds the same ``<testsuite>`` of each of its runs (:func:`run_suite`)
under one ``<testsuites>`` (reports/gameday_files.py).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

from inferchaos.reports import formatting as fmt
from inferchaos.reports.load import RunRecord
from inferchaos.reports.verdict_schema import Status
from inferchaos.steady_state.slo import Phase

EFFECT_CASE = "fault had an observable effect"


class Outcome(StrEnum):
    """The JUnit result of one testcase."""

    PASSED = "passed"
    FAILURE = "failure"
    ERROR = "error"
    SKIPPED = "skipped"


@dataclass(frozen=True)
class Case:
    """One testcase and its result."""

    classname: str
    name: str
    outcome: Outcome = Outcome.PASSED
    message: str = ""
    kind: str = ""  # the failure/error ``type``
    detail: str = ""  # element text: the longer story behind the message


def _not_run(run: RunRecord, classname: str, name: str) -> Case:
    """A testcase whose part of the run never happened."""
    status, reason = run.verdict.status, run.verdict.reason
    if status is Status.SKIPPED:
        return Case(classname, name, Outcome.SKIPPED, f"run skipped: {reason}")
    if status is Status.ERROR:
        return Case(classname, name, Outcome.ERROR, f"run error: {reason}", "RunError")
    if status is Status.ABORTED:
        return Case(classname, name, Outcome.SKIPPED, f"run aborted: {reason}")
    # A passed or failed run that still skipped a phase (killed before the revert, say) has
    # left this part untested: that is a failure of the run, not a pass.
    return Case(classname, name, Outcome.FAILURE, f"{name}: not run: {reason}", "NotRun")


def slo_cases(run: RunRecord) -> list[Case]:
    """One testcase per SLO of the verdict."""
    cases = []
    for slo in run.verdict.slos:
        classname, name = f"inferchaos.{slo.layer}", fmt.slo_title(slo)
        if not run.slo_ran(slo):
            cases.append(_not_run(run, classname, name))
        elif slo.ok:
            cases.append(
                Case(classname, name, detail=f"observed {fmt.observed(slo)}, threshold {fmt.threshold(slo)}")
            )
        else:
            kind = "NoData" if slo.observed is None else "SloBreached"
            cases.append(Case(classname, name, Outcome.FAILURE, fmt.slo_breach(slo), kind, slo.reason))
    return cases


def effect_case(run: RunRecord) -> Case:
    """Did the fault bite? Without an observable effect a passing run proves nothing."""
    fault = run.verdict.fault
    classname = f"inferchaos.{fault.layer}" if fault else "inferchaos.fault"
    if fault is None or not run.phases.ran(Phase.DURING):
        return _not_run(run, classname, EFFECT_CASE)
    if fault.effect_observed:
        return Case(classname, EFFECT_CASE, detail=str(fault.evidence.get("reason", "")))
    why = fault.evidence.get("reason")
    message = f"{EFFECT_CASE}: observed no effect of {fault.name}, threshold: an observable effect"
    return Case(classname, EFFECT_CASE, Outcome.FAILURE, f"{message} ({why})" if why else message, "NoEffect")


def recovery_case(run: RunRecord) -> Case:
    """Did the steady SLOs come back within the declared time after the revert?"""
    timing = run.verdict.timing
    classname = "inferchaos.recovery"
    limit = timing.recovery_within_s
    name = f"recovered within {limit:g} s" if limit is not None else "recovered"
    if not run.phases.ran(Phase.RECOVERY):
        return _not_run(run, classname, name)
    if fmt.recovered(run):
        return Case(classname, name, detail=f"time to recover {fmt.seconds(timing.time_to_recover_s)}")
    if limit is None and timing.recovered is None:
        return Case(classname, name, Outcome.SKIPPED, "the experiment declares no recovery")
    threshold = "-" if limit is None else f"<= {limit:g} s"
    observed = (
        f"observed {timing.time_to_recover_s:.1f} s > threshold {threshold}"
        if timing.time_to_recover_s is not None
        else f"observed no recovery by the end of the run, threshold {threshold}"
    )
    return Case(classname, name, Outcome.FAILURE, f"{name}: {observed}", "NotRecovered", run.verdict.reason)


def control_case(run: RunRecord) -> Case:
    """A negative control passes in CI when its scenario FAILED against the broken platform."""
    control = run.verdict.control
    assert control is not None
    name = f"fails when {control.breaks}"
    detail = f"scenario {run.verdict.status.value}: {run.verdict.reason}"
    if control.proven:
        return Case("inferchaos.control", name, detail=detail)
    return Case(
        "inferchaos.control", name, Outcome.FAILURE, fmt.control_line(control), "ControlNotProven", detail
    )


SKIPPED_CASE = ("inferchaos.run", "run")


def run_cases(run: RunRecord) -> list[Case]:
    """Every testcase of ``run``, SLOs first; a negative control is the one case of whether it failed;
    a skipped run is one skipped case saying why it could not run here."""
    if run.verdict.status is Status.SKIPPED:
        return [Case(*SKIPPED_CASE, Outcome.SKIPPED, run.verdict.reason)]
    if run.verdict.control is not None:
        # Its SLOs are meant to break: as testcases they would read as failures of the day.
        return [control_case(run)]
    return [*slo_cases(run), effect_case(run), recovery_case(run)]


def _counts(cases: Sequence[Case]) -> dict[str, str]:
    return {
        "tests": str(len(cases)),
        "failures": str(sum(c.outcome is Outcome.FAILURE for c in cases)),
        "errors": str(sum(c.outcome is Outcome.ERROR for c in cases)),
        "skipped": str(sum(c.outcome is Outcome.SKIPPED for c in cases)),
    }


def _suite(
    name: str, cases: Sequence[Case], attrs: dict[str, str], properties: Sequence[tuple[str, str]]
) -> ET.Element:
    """A ``<testsuite>`` of ``cases``, its counts true to them."""
    suite = ET.Element("testsuite", {"name": name, **_counts(cases), **attrs})
    props = ET.SubElement(suite, "properties")
    for key, value in properties:
        ET.SubElement(props, "property", {"name": key, "value": value})
    for case in cases:
        element = ET.SubElement(suite, "testcase", {"classname": case.classname, "name": case.name})
        if case.outcome is Outcome.PASSED:
            if case.detail:
                ET.SubElement(element, "system-out").text = case.detail
            continue
        case_attrs = {"message": case.message}
        if case.kind:
            case_attrs["type"] = case.kind
        ET.SubElement(element, case.outcome.value, case_attrs).text = case.detail or None
    return suite


def run_suite(run: RunRecord) -> ET.Element:
    """The ``<testsuite>`` of ``run``: named after its experiment, one testcase per check."""
    v = run.verdict
    return _suite(
        v.experiment,
        run_cases(run),
        {
            "time": f"{v.duration_s:.3f}",
            "timestamp": datetime.fromtimestamp(v.started_at, UTC).strftime("%Y-%m-%dT%H:%M:%S"),
            "hostname": run.journal.node,
        },
        [
            ("title", v.title),
            ("env", v.env),
            ("status", v.status.value),
            ("reason", v.reason),
            ("triage.layer", v.triage.layer or ""),
            ("triage.reason", v.triage.reason),
        ],
    )


def unjudged_suite(experiment: str, case: Case) -> ET.Element:
    """The ``<testsuite>`` of an experiment that left no verdict to read: its one ``case`` says why."""
    return _suite(
        experiment, [case], {"time": "0.000"}, [("status", case.outcome.value), ("reason", case.message)]
    )


def testsuites(name: str, suites: Sequence[ET.Element]) -> ET.ElementTree[ET.Element]:
    """``<testsuites>`` holding ``suites``, with their counts and times summed."""
    totals = {
        key: sum(int(s.get(key, "0")) for s in suites) for key in ("tests", "failures", "errors", "skipped")
    }
    time = sum(float(s.get("time", "0")) for s in suites)
    root = ET.Element(
        "testsuites", {"name": name, **{k: str(n) for k, n in totals.items()}, "time": f"{time:.3f}"}
    )
    root.extend(suites)
    ET.indent(root)
    return ET.ElementTree(root)


def build_junit(run: RunRecord) -> ET.ElementTree[ET.Element]:
    """The JUnit XML document of ``run``: ``<testsuites>`` holding one ``<testsuite>``."""
    return testsuites("inferchaos", [run_suite(run)])


def xml_text(tree: ET.ElementTree[ET.Element]) -> str:
    """A JUnit document as text, with its XML declaration."""
    return ET.tostring(tree.getroot(), encoding="unicode", xml_declaration=True) + "\n"


def junit_xml(run: RunRecord) -> str:
    """junit.xml of ``run`` as text, with its XML declaration."""
    return xml_text(build_junit(run))
