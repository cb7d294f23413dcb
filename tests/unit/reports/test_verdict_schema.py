"""verdict.json has one schema: what the runner writes, every reader loads back as the same records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inferchaos.reports.load import load_verdict
from inferchaos.reports.report_errors import ReportError
from inferchaos.reports.verdict_schema import (
    AllowsRecord,
    ControlRecord,
    DetectorFiringRecord,
    FaultRecord,
    HealedRecord,
    LayerRecord,
    PlatformFailureRecord,
    PlatformRecord,
    SloRecord,
    Status,
    TimingRecord,
    TriageRecord,
    Verdict,
)
from inferchaos.steady_state.detection import SignalDetection
from inferchaos.steady_state.slo import Op, Phase

FULL = Verdict(
    experiment="kv_flood.control",
    title="a control",
    env="local",
    status=Status.FAILED,
    reason="replica-0 failed the platform steady state",
    started_at=100.0,
    ended_at=190.25,
    phases={"baseline_start": 100.0, "injected": 111.0, "reverted": 131.0, "end": 190.0},
    fault=FaultRecord(
        "vllm.flood_kv_cache",
        "vllm",
        {"target": "front_door"},
        111.0,
        131.0,
        True,
        {"reason": "KV usage 0.97", "symptoms": {"kv": 0.97}},
    ),
    slos=(
        SloRecord(
            "ttft_after",
            "canary",
            Phase.RECOVERY,
            False,
            0.33,
            Op.LE,
            0.3,
            20,
            "breached",
            0.086,
            "3 x baseline, at least 0.3",
        ),
        SloRecord(
            "platform.replica-0.serves_after",
            "vllm",
            Phase.RECOVERY,
            False,
            None,
            Op.GE,
            0.9,
            0,
            "no samples",
            declared={"name": "platform.replica-0.serves_after", "window_s": 10},
        ),
        SloRecord("kv_headroom_before", "vllm", Phase.BASELINE, True, 0.0, Op.LE, 0.5, 10),
    ),
    layers={
        "canary": LayerRecord(False, ("ttft_after",)),
        "vllm": LayerRecord(True, ("kv_headroom_before",)),
    },
    timing=TimingRecord(4.5, None, False, 30.0, "availability", None, ("ttft_after",)),
    triage=TriageRecord("vllm", "replica-0 stopped answering", {"probe": "vllm.healthy", "t": 140.0}),
    stop_condition=None,
    load={"users": 4},
    control=ControlRecord(
        "kv_flood",
        "a blind health check",
        "vllm",
        "failed_as_expected",
        "control: failed",
        ({"fault": "vllm.hang_engine", "ok": True, "handle": "h1"},),
    ),
    detection=(
        SignalDetection("vllm", "/health", None, None, "never non-200"),
        SignalDetection("inferchaos", "detector stalled_request", 3.0, 114.0, "", -1.5),
    ),
    platform=PlatformRecord(
        steady=False,
        allows=AllowsRecord(("replica-1",), ()),
        hold_s=30.0,
        failure=PlatformFailureRecord(
            "platform.replica-0.serves_after", "recovery", "replica-0", 140.0, "none"
        ),
        healed=(HealedRecord("replica-1", 150.0),),
        detectors_after_revert=(DetectorFiringRecord(141.0, "stalled_request", "a request has waited 10 s"),),
    ),
)


def _written(tmp_path: Path, verdict: Verdict) -> Path:
    return verdict.write(tmp_path)


def test_a_written_verdict_reads_back_as_the_same_records(tmp_path: Path) -> None:
    assert load_verdict(_written(tmp_path, FULL)) == FULL


def test_a_skipped_run_with_nothing_injected_reads_back_as_written(tmp_path: Path) -> None:
    skipped = Verdict(
        "x", "x", "local", Status.SKIPPED, "no netns", 1.0, 1.0, triage=TriageRecord("unknown", "nothing")
    )
    assert load_verdict(_written(tmp_path, skipped)) == skipped


def test_verdict_json_keeps_its_documented_keys(tmp_path: Path) -> None:
    data = json.loads(_written(tmp_path, FULL).read_text())
    assert data["status"] == "failed" and data["duration_s"] == 90.25 and data["schema"] == 1
    assert data["slos"][0]["phase"] == "recovery" and data["slos"][0]["op"] == "<="
    # baseline and scale only where the threshold was scaled; declared only where given
    assert "scale" not in data["slos"][2] and "declared" not in data["slos"][0]
    assert data["platform"]["allows"] == {"replicas": ["replica-1"], "unread": []}
    assert data["control"]["released"] == [{"fault": "vllm.hang_engine", "ok": True, "handle": "h1"}]
    assert data["timing"]["recovery_blocked_by"] == ["ttft_after"]


def test_a_malformed_platform_entry_names_its_key(tmp_path: Path) -> None:
    path = _written(tmp_path, FULL)
    data = json.loads(path.read_text())
    data["platform"]["healed"][0]["failed_at"] = "soon"
    path.write_text(json.dumps(data))
    with pytest.raises(ReportError, match=r"platform\.healed\[0\]\.failed_at: expected a number"):
        load_verdict(path)
