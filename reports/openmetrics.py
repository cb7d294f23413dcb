"""openmetrics.txt: the verdict of one run (or of every run of a game day) as OpenMetrics.

Every series is a gauge named and labelled as Prometheus' conventions ask (units as suffixes,
a status as one 0/1 gauge per possible value), so a Prometheus that scrapes a Pushgateway, or
reads the file, can alert on a game day without parsing verdict.json:

- ``inferchaos_run_status{status}``: 1 for the status the run ended with, 0 for each other one.
- ``inferchaos_slo_ok{slo, layer, phase}``: 1 when the SLO held, 0 when it breached or had no
  data; an SLO whose phase never ran (nothing injected) has no sample rather than a false 0.
- ``inferchaos_time_to_detect_seconds{fault, layer}`` and
  ``inferchaos_time_to_recover_seconds{fault, layer}``: only where the run measured them.
- ``inferchaos_fault_active{fault, layer}``: 1 when the run ended with its fault not reverted
  (the ledger still holds it for ``inferchaos cleanup``), 0 once reverted; none when nothing
  was injected.
- ``inferchaos_control_proven{of}``: negative controls only; 1 when the scenario failed against
  the broken platform with the expected triage layer.

Every series also carries ``experiment``, ``env`` and ``control`` ("true" for a negative control,
whose failed status and broken SLOs are the expected outcome; "false" otherwise). ``layer`` is
the SLO's layer on ``inferchaos_slo_ok`` and the fault's layer on the fault's series. Samples
carry no timestamp: the Pushgateway refuses pushed timestamps.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.openmetrics.exposition import generate_latest

from inferchaos.reports import formatting as fmt
from inferchaos.reports.load import RunRecord
from inferchaos.reports.report_errors import ReportError
from inferchaos.reports.verdict_schema import Status, Verdict

RUN_LABELS: tuple[str, ...] = ("experiment", "env", "control")


def run_labels(verdict: Verdict) -> list[str]:
    """The values of :data:`RUN_LABELS` for one run."""
    return [verdict.experiment, verdict.env, "true" if verdict.control is not None else "false"]


def _gauge(name: str, documentation: str, labels: Sequence[str], unit: str = "") -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, labels=[*RUN_LABELS, *labels], unit=unit)


class RunMetrics:
    """A prometheus_client collector over the verdicts of ``runs``: every run's series, one
    family per metric name, as one exposition must hold them.

    ReportError when two runs share an experiment and environment (a game day runs each
    experiment once): their series could not be told apart.
    """

    def __init__(self, runs: Sequence[RunRecord]) -> None:
        seen: dict[tuple[str, str], Path] = {}
        for run in runs:
            key = (run.verdict.experiment, run.verdict.env)
            if key in seen:
                # Their series would share every label, which no exposition may hold twice.
                raise ReportError(
                    f"{run.run_dir}: another run of {key[0]} on {key[1]} ({seen[key]}) is in the same exposition"
                )
            seen[key] = run.run_dir
        self.runs = tuple(runs)

    def collect(self) -> Iterator[Metric]:
        """The metric families, in the order the module docstring lists them."""
        status = _gauge(
            "inferchaos_run_status",
            "The status the run ended with: 1 for it, 0 for the others. For a negative control "
            "(control label true) failed is the expected outcome: read inferchaos_control_proven.",
            ["status"],
        )
        slo_ok = _gauge(
            "inferchaos_slo_ok",
            "1 when the SLO held over its phase, 0 when it breached or had no data; "
            "an SLO whose phase never ran has no sample.",
            ["slo", "layer", "phase"],
        )
        detect = _gauge(
            "inferchaos_time_to_detect_seconds",
            "Seconds from the injection to the first SLO breach; no sample when nothing breached.",
            ["fault", "layer"],
            unit="seconds",
        )
        recover = _gauge(
            "inferchaos_time_to_recover_seconds",
            "Seconds from the revert until every steady SLO held again; no sample when not measured.",
            ["fault", "layer"],
            unit="seconds",
        )
        active = _gauge(
            "inferchaos_fault_active",
            "1 when the run ended with its fault not reverted (run `inferchaos cleanup`), 0 when it "
            "was reverted; no sample when nothing was injected.",
            ["fault", "layer"],
        )
        proven = _gauge(
            "inferchaos_control_proven",
            "Negative controls only: 1 when the scenario failed against the platform broken on "
            "purpose, with the expected triage layer; 0 when it passed or failed for another reason.",
            ["of"],
        )
        for run in self.runs:
            v = run.verdict
            labels = run_labels(v)
            for each in Status:
                status.add_metric([*labels, each.value], 1.0 if v.status is each else 0.0)
            for slo in v.slos:
                if fmt.slo_state(run, slo) is not fmt.SloState.NOT_RUN:
                    slo_ok.add_metric([*labels, slo.name, slo.layer, slo.phase.value], 1.0 if slo.ok else 0.0)
            if v.fault is not None:
                fault = [*labels, v.fault.name, v.fault.layer]
                # A revert that failed leaves reverted_at unset: the fault is still in place.
                active.add_metric(fault, 1.0 if v.fault.reverted_at is None else 0.0)
                if v.timing.time_to_detect_s is not None:
                    detect.add_metric(fault, v.timing.time_to_detect_s)
                if v.timing.time_to_recover_s is not None:
                    recover.add_metric(fault, v.timing.time_to_recover_s)
            if v.control is not None:
                proven.add_metric([*labels, v.control.of], 1.0 if v.control.proven else 0.0)
        # A family without samples says nothing; leaving it out keeps a scenario's file free of
        # the control-only family, and a run that injected nothing free of the fault's.
        yield from (family for family in (status, slo_ok, detect, recover, active, proven) if family.samples)


def metrics_registry(runs: Sequence[RunRecord]) -> CollectorRegistry:
    """A registry holding only the series of ``runs`` (none of the process's own metrics)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RunMetrics(runs))
    return registry


def openmetrics_text(runs: Sequence[RunRecord]) -> str:
    """The OpenMetrics exposition of ``runs``: HELP, TYPE (and UNIT) per family, ``# EOF`` last."""
    return generate_latest(metrics_registry(runs)).decode("utf-8")
