"""timeline.csv: exact columns, durable per tick, and enough on its own to evaluate a run again."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from inferchaos.errors import ConfigError
from inferchaos.steady_state.probe_base import Sample
from inferchaos.steady_state.timeline import (
    Row,
    Timeline,
    TimelineWriter,
    format_labels,
    parse_labels,
    read_timeline,
)

T = 1_800_000_000.25


def tick_rows(t: float) -> list[Row]:
    return [
        Row.from_sample(
            t, Sample("vllm.kv_cache_usage", 0.935483870967742, {"replica": "replica-0", "engine": "0"})
        ),
        Row.from_sample(t, Sample("ray.nodes_alive", 3)),
        Row(t, "vllm@replica-1", {}, math.nan, 'ProbeError: replica-1: GET failed, "refused"\nsecond line'),
    ]


def test_header_is_exactly_the_documented_columns(tmp_path: Path) -> None:
    with TimelineWriter(tmp_path / "timeline.csv"):
        pass
    assert (tmp_path / "timeline.csv").read_text() == "t,probe,labels,value,error\n"


def test_round_trip_keeps_values_labels_errors_and_marks(tmp_path: Path) -> None:
    path = tmp_path / "run" / "timeline.csv"
    with TimelineWriter(path) as writer:
        timeline = Timeline(writer)
        timeline.mark("baseline_start", T)
        timeline.append_tick(tick_rows(T))
        timeline.mark("injected", T + 1)
        timeline.append_tick(tick_rows(T + 1))
    loaded = read_timeline(path)
    assert loaded.marks == {"baseline_start": T, "injected": T + 1}
    assert len(loaded.rows) == 6
    for original, back in zip(timeline.rows, loaded.rows, strict=True):
        assert (back.t, back.probe, dict(back.labels), back.error) == (
            original.t,
            original.probe,
            dict(original.labels),
            original.error,
        )
        assert back.value == original.value or (math.isnan(back.value) and math.isnan(original.value))


def test_labels_are_stored_as_sorted_k_v_pairs(tmp_path: Path) -> None:
    path = tmp_path / "timeline.csv"
    with TimelineWriter(path) as writer:
        writer.write([Row(T, "ray.pgs", {"strategy": "STRICT_SPREAD", "state": "PENDING"}, 1.0)])
    assert path.read_text().splitlines()[1] == f"{T!r},ray.pgs,state=PENDING;strategy=STRICT_SPREAD,1.0,"
    assert Sample("ray.pgs", 1, {"strategy": "x", "state": "y"}).label_text() == format_labels(
        {"state": "y", "strategy": "x"}
    )
    assert parse_labels("a=1;b=x=y") == {"a": "1", "b": "x=y"}
    assert parse_labels("") == {}


@pytest.mark.parametrize(
    "value", ["no GPU; no replica memory budgets: none under /tmp/empty", "100%", "%3B", "a=b;%25;", ";"]
)
def test_a_label_value_with_the_forms_own_characters_reads_back_as_it_was(tmp_path: Path, value: str) -> None:
    # A device reason label quotes two errors joined by "; " on a host without GPUs or cgroups:
    # a game day's judgement once failed reading such a row back.
    path = tmp_path / "timeline.csv"
    with TimelineWriter(path) as writer:
        writer.write([Row.from_sample(T, Sample("device.available", 0.0, {"reason": value, "device": "x"}))])
    [row] = read_timeline(path).rows
    assert dict(row.labels) == {"device": "x", "reason": value}
    assert row.matches({"reason": value})


def test_phase_marks_are_rows_of_their_own(tmp_path: Path) -> None:
    path = tmp_path / "timeline.csv"
    with TimelineWriter(path) as writer:
        Timeline(writer).mark("reverted", T)
    assert path.read_text().splitlines()[1].split(",")[:2] == [repr(T), "phase.reverted"]


def test_each_tick_is_on_disk_before_the_writer_closes(tmp_path: Path) -> None:
    path = tmp_path / "timeline.csv"
    writer = TimelineWriter(path)
    timeline = Timeline(writer)
    timeline.append_tick(tick_rows(T))
    # Read through a separate handle while the writer is still open, as after a kill.
    assert len(read_timeline(path).rows) == 3
    timeline.append_tick(tick_rows(T + 1))
    assert len(read_timeline(path).rows) == 6
    writer.close()


def test_appending_continues_an_existing_timeline(tmp_path: Path) -> None:
    path = tmp_path / "timeline.csv"
    with TimelineWriter(path) as writer:
        writer.write(tick_rows(T))
    with TimelineWriter(path) as writer:
        writer.write(tick_rows(T + 1))
    assert path.read_text().count("t,probe,labels,value,error") == 1
    assert len(read_timeline(path).rows) == 6


def test_refuses_to_append_to_a_file_that_is_not_a_timeline(tmp_path: Path) -> None:
    path = tmp_path / "timeline.csv"
    path.write_text("name,score\nx,1\n")
    with pytest.raises(ConfigError, match="not a timeline"):
        TimelineWriter(path)


def test_a_line_cut_short_by_a_kill_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "timeline.csv"
    with TimelineWriter(path) as writer:
        writer.write(tick_rows(T))
    with path.open("a") as f:
        f.write(f"{T + 1!r},vllm.kv_cache_us")
    assert len(read_timeline(path).rows) == 3


def test_a_malformed_line_in_the_middle_names_its_line_number(tmp_path: Path) -> None:
    path = tmp_path / "timeline.csv"
    path.write_text(
        f"t,probe,labels,value,error\n{T!r},ray.nodes_alive,,three,\n{T!r},ray.nodes_alive,,3.0,\n"
    )
    with pytest.raises(ConfigError, match=r"timeline.csv:2: malformed timeline row"):
        read_timeline(path)


def test_reading_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read timeline"):
        read_timeline(tmp_path / "absent.csv")


def test_select_filters_by_probe_labels_and_time_and_skips_failed_reads() -> None:
    timeline = Timeline()
    timeline.append_tick(tick_rows(T))
    timeline.append_tick(tick_rows(T + 1))
    assert [r.t for r in timeline.select("vllm.kv_cache_usage", {"replica": "replica-0"})] == [T, T + 1]
    assert timeline.select("vllm.kv_cache_usage", {"replica": "replica-9"}) == []
    assert [r.t for r in timeline.select("vllm.kv_cache_usage", start=T, end=T + 1)] == [T]
    assert [r.t for r in timeline.select("vllm.kv_cache_usage", start=T, end=T + 1, include_end=True)] == [
        T,
        T + 1,
    ]
    assert timeline.select("vllm@replica-1") == []  # failed reads are not values
    assert [r.probe for r in timeline.errors()] == ["vllm@replica-1", "vllm@replica-1"]
    latest = timeline.value_at("ray.nodes_alive", T + 0.5)
    assert latest is not None and latest.t == T
    assert timeline.value_at("ray.nodes_alive", T + 10, max_age_s=2) is None
