"""LoadProbe: ``load.*`` samples from Locust's stats history as it grows."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferchaos.errors import ProbeError
from inferchaos.layers import Layer
from inferchaos.load.locust_runner import HistoryReader, LoadProbe, LocustLoad, history_samples
from tests.fakes.locust_runs import Runs

HEADER = (
    "Timestamp,User Count,Type,Name,Requests/s,Failures/s,50%,66%,75%,80%,90%,95%,98%,99%,99.9%,99.99%,100%,"
    "Total Request Count,Total Failure Count,Total Median Response Time,Total Average Response Time,"
    "Total Min Response Time,Total Max Response Time,Total Average Content Size\n"
)


def _row(t: int, users: int, kind: str, name: str, rps: float, fails: float, p50: str, p95: str) -> str:
    return f"{t},{users},{kind},{name},{rps:f},{fails:f},{p50},{p50},{p50},{p50},{p95},{p95},{p95},{p95},{p95},{p95},{p95},1,0,1,1,1,1,5\n"


def _values(samples: list) -> dict[str, float]:
    return {s.probe: s.value for s in samples}


async def test_probe_reads_rps_and_ttft_from_a_real_locust_history(runs: Runs) -> None:
    probe = LoadProbe(Path(f"{runs.steady.csv_prefix}_stats_history.csv"))
    values = _values(await probe.read())
    assert probe.name == "load" and probe.layer is Layer.LOAD
    assert values["load.rps"] > 0
    assert values["load.failures"] == 0
    assert values["load.users"] == 4
    # The fake server's first chunk comes after 50 ms.
    assert 0.05 <= values["load.ttft_p50_s"] <= values["load.ttft_p95_s"] < values["load.e2e_p95_s"]
    assert values["load.itl_p95_s"] >= 0.015


async def test_probe_reads_failures_per_second_from_e2e(runs: Runs) -> None:
    values = _values(await LoadProbe(Path(f"{runs.flaky.csv_prefix}_stats_history.csv")).read())
    assert values["load.failures"] > 0
    assert values["load.rps"] >= values["load.failures"]


async def test_only_rows_written_since_the_last_read_count(tmp_path: Path) -> None:
    path = tmp_path / "locust_stats_history.csv"
    probe = LoadProbe(path)
    assert await probe.read() == [], "no file yet: nothing to report, and no error"
    path.write_text(
        HEADER
        + _row(100, 2, "LLM", "ttft", 2.0, 0.0, "100", "300")
        + _row(100, 2, "", "Aggregated", 6, 0, "1", "2")
    )
    assert _values(await probe.read())["load.ttft_p95_s"] == pytest.approx(0.3)
    assert await probe.read() == [], "nothing new since the last read"
    with open(path, "a") as f:
        f.write(
            _row(101, 3, "LLM", "ttft", 2.0, 0.0, "100", "900")
            + _row(101, 3, "", "Aggregated", 6, 0, "1", "2")
        )
    assert _values(await probe.read())["load.ttft_p95_s"] == pytest.approx(0.9)


def test_a_half_written_line_waits_for_its_end(tmp_path: Path) -> None:
    path = tmp_path / "h.csv"
    full = _row(100, 2, "", "Aggregated", 6.0, 0.0, "1", "2")
    path.write_text(HEADER + full[:20])
    reader = HistoryReader(path)
    assert reader.new_rows() == []
    with open(path, "a") as f:
        f.write(full[20:])
    rows = reader.new_rows()
    assert [(r["Name"], r["User Count"]) for r in rows] == [("Aggregated", "2")]


def test_newest_row_per_statistic_wins_and_na_gives_no_percentile() -> None:
    reader_rows = [
        dict(zip(HEADER.strip().split(","), line.strip().split(","), strict=True))
        for line in (
            _row(100, 2, "LLM", "ttft", 1.0, 0.0, "100", "200"),
            _row(100, 2, "LLM", "e2e", 1.0, 0.5, "300", "400"),
            _row(100, 2, "", "Aggregated", 3.0, 0.5, "1", "2"),
            _row(101, 4, "LLM", "ttft", 2.0, 0.0, "N/A", "N/A"),
            _row(101, 4, "LLM", "e2e", 2.5, 1.5, "300", "500"),
            _row(101, 4, "", "Aggregated", 7.0, 1.5, "1", "2"),
        )
    ]
    values = _values(history_samples(reader_rows))
    assert values["load.users"] == 4
    assert values["load.rps"] == 2.5 and values["load.failures"] == 1.5
    assert values["load.e2e_p95_s"] == pytest.approx(0.5)
    assert "load.ttft_p95_s" not in values and "load.ttft_p50_s" not in values


def test_before_any_finished_request_rps_is_zero() -> None:
    row = dict(
        zip(
            HEADER.strip().split(","),
            _row(100, 1, "", "Aggregated", 0, 0, "N/A", "N/A").strip().split(","),
            strict=True,
        )
    )
    values = _values(history_samples([row]))
    assert values == {"load.users": 1.0, "load.rps": 0.0, "load.failures": 0.0}


async def test_probe_fails_once_its_locust_is_gone(tmp_path: Path) -> None:
    load = LocustLoad("http://127.0.0.1:9", tmp_path / "locust")
    load.pid = 2**22 + 12345  # above pid_max: no such process
    with pytest.raises(ProbeError, match="not running"):
        await LoadProbe(load.history_path, load).read()
