"""Parsing real vLLM /metrics (recorded from the local environment) and histogram quantiles."""

from __future__ import annotations

import math

import pytest
from prometheus_client.parser import text_string_to_metric_families

from inferchaos.errors import ProbeError
from inferchaos.primitives.vllm_metrics import (
    KV_USAGE,
    OLDER_NAMES,
    READ_FAMILIES,
    Histogram,
    exposed_names,
    histogram_quantile,
    parse_metrics,
    read_families_only,
)

OLD_KV_USAGE = "vllm:gpu_cache_usage_perc"


def test_idle_replica(idle_metrics: str) -> None:
    snapshot = parse_metrics(idle_metrics)
    assert (snapshot.running, snapshot.waiting, snapshot.kv_cache_usage) == (0.0, 0.0, 0.0)
    assert snapshot.preemptions_total == 0.0
    assert snapshot.ttft.count == 0.0
    assert snapshot.kv_capacity_tokens == 4096


def test_flooded_replica(flooded_metrics: str) -> None:
    snapshot = parse_metrics(flooded_metrics)
    assert snapshot.running == 2.0
    assert snapshot.waiting == 2.0
    assert snapshot.kv_cache_usage == pytest.approx(0.935, abs=1e-3)
    # The parser names the counter family "vllm:num_preemptions" (no _total): still found.
    assert snapshot.preemptions_total == 3.0
    assert snapshot.prompt_tokens_total == 31410.0
    assert snapshot.generation_tokens_total == 4979.0
    assert snapshot.kv_capacity_tokens == 4096


@pytest.mark.parametrize("fixture", ["idle_metrics", "flooded_metrics"])
def test_reading_only_the_needed_families_keeps_every_one_of_their_samples(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    text: str = request.getfixturevalue(fixture)

    def samples(exposition: str) -> dict[str, list[object]]:
        return {
            f.name: f.samples for f in text_string_to_metric_families(exposition) if f.name in READ_FAMILIES
        }

    kept = read_families_only(text)
    assert samples(kept) == samples(text)
    older = {old for olds in OLDER_NAMES.values() for old in olds}  # a v1 replica has none of these
    assert {f.name for f in text_string_to_metric_families(kept)} == READ_FAMILIES - older
    assert len(kept) < len(text) / 3  # the point of it: most of the page is not parsed


def test_histograms_are_cumulative_bucket_lists_ending_in_inf(flooded_metrics: str) -> None:
    snapshot = parse_metrics(flooded_metrics)
    for histogram, total in ((snapshot.ttft, 18.0), (snapshot.itl, 4961.0), (snapshot.e2e, 16.0)):
        bounds = [le for le, _ in histogram.buckets]
        counts = [n for _, n in histogram.buckets]
        assert bounds == sorted(bounds) and math.isinf(bounds[-1])
        assert counts == sorted(counts)
        assert histogram.count == total
    assert dict(snapshot.ttft.buckets)[1.0] == 7.0
    assert dict(snapshot.ttft.buckets)[2.5] == 17.0


def test_kv_capacity_falls_back_to_blocks_times_block_size(idle_metrics: str) -> None:
    text = idle_metrics.replace('kv_cache_size_tokens="4096"', 'kv_cache_size_tokens="None"')
    text = text.replace('num_gpu_blocks="32"', 'num_gpu_blocks="10"')
    assert 'kv_cache_size_tokens="None"' in text
    assert parse_metrics(text).kv_capacity_tokens == 10 * 128


def test_kv_capacity_is_none_without_cache_config(idle_metrics: str) -> None:
    text = "\n".join(line for line in idle_metrics.splitlines() if "cache_config_info" not in line) + "\n"
    assert parse_metrics(text).kv_capacity_tokens is None


def test_engines_are_summed_and_kv_usage_is_the_fullest() -> None:
    text = "\n".join(
        [
            "# TYPE vllm:num_requests_running gauge",
            'vllm:num_requests_running{engine="0"} 2.0',
            'vllm:num_requests_running{engine="1"} 3.0',
            "# TYPE vllm:num_requests_waiting gauge",
            'vllm:num_requests_waiting{engine="0"} 1.0',
            "# TYPE vllm:kv_cache_usage_perc gauge",
            'vllm:kv_cache_usage_perc{engine="0"} 0.2',
            'vllm:kv_cache_usage_perc{engine="1"} 0.8',
            "# TYPE vllm:num_preemptions_total counter",
            'vllm:num_preemptions_total{engine="0"} 1.0',
            'vllm:num_preemptions_total{engine="1"} 4.0',
            "# TYPE vllm:prompt_tokens_total counter",
            "vllm:prompt_tokens_total 10.0",
            "# TYPE vllm:generation_tokens_total counter",
            "vllm:generation_tokens_total 5.0",
            *(
                line
                for name in ("time_to_first_token", "inter_token_latency", "e2e_request_latency")
                for line in (
                    f"# TYPE vllm:{name}_seconds histogram",
                    f'vllm:{name}_seconds_bucket{{engine="0",le="1.0"}} 1.0',
                    f'vllm:{name}_seconds_bucket{{engine="0",le="+Inf"}} 1.0',
                    f'vllm:{name}_seconds_bucket{{engine="1",le="1.0"}} 2.0',
                    f'vllm:{name}_seconds_bucket{{engine="1",le="+Inf"}} 3.0',
                )
            ),
        ]
    )
    snapshot = parse_metrics(text + "\n")
    assert (snapshot.running, snapshot.waiting, snapshot.preemptions_total) == (5.0, 1.0, 5.0)
    assert snapshot.kv_cache_usage == 0.8
    assert snapshot.ttft.buckets == ((1.0, 3.0), (math.inf, 4.0))


def test_a_server_that_is_not_vllm_is_a_probe_error() -> None:
    with pytest.raises(ProbeError, match="vllm:num_requests_running"):
        parse_metrics("# TYPE up gauge\nup 1.0\n")


def test_unparseable_text_is_a_probe_error() -> None:
    with pytest.raises(ProbeError, match="not Prometheus text"):
        parse_metrics("<html>502 Bad Gateway</html>\n")


# Histogram quantiles over cumulative buckets, as Prometheus histogram_quantile.
BUCKETS = [(0.1, 0.0), (0.5, 2.0), (1.0, 6.0), (2.5, 10.0), (math.inf, 10.0)]


@pytest.mark.parametrize(
    ("q", "expected"),
    [
        (0.5, 0.5 + 0.5 * (5 - 2) / 4),  # rank 5 in (0.5, 1.0] holding ranks 2..6
        (0.1, 0.1 + 0.4 * (1 - 0) / 2),  # rank 1 in (0.1, 0.5]
        (0.9, 1.0 + 1.5 * (9 - 6) / 4),
        (1.0, 2.5),
    ],
)
def test_histogram_quantile_interpolates_inside_the_bucket(q: float, expected: float) -> None:
    assert histogram_quantile(q, BUCKETS) == pytest.approx(expected)


def test_first_bucket_interpolates_from_zero() -> None:
    assert histogram_quantile(0.5, [(0.2, 4.0), (math.inf, 4.0)]) == pytest.approx(0.1)


def test_rank_in_the_inf_bucket_answers_the_highest_finite_bound() -> None:
    assert histogram_quantile(0.99, [(1.0, 5.0), (2.0, 6.0), (math.inf, 10.0)]) == 2.0


def test_empty_histogram_has_no_quantile() -> None:
    assert histogram_quantile(0.5, [(1.0, 0.0), (math.inf, 0.0)]) is None
    assert histogram_quantile(0.5, []) is None


def test_quantiles_from_bucket_deltas_between_two_real_snapshots(
    idle_metrics: str, flooded_metrics: str
) -> None:
    idle, flooded = parse_metrics(idle_metrics), parse_metrics(flooded_metrics)
    window = flooded.ttft.since(idle.ttft)
    assert window.count == 18.0
    # Ranks 9 / 17.1 / 17.82 of 18: 7 requests <= 1.0 s, 17 <= 2.5 s, 18 <= 5.0 s.
    assert window.quantile(0.50) == pytest.approx(1.0 + 1.5 * 2 / 10)
    assert window.quantile(0.95) == pytest.approx(2.5 + 2.5 * 0.1)
    assert window.quantile(0.99) == pytest.approx(2.5 + 2.5 * 0.82)


def test_deltas_see_only_the_window_not_the_lifetime() -> None:
    before = Histogram(((1.0, 100.0), (10.0, 100.0), (math.inf, 100.0)))  # 100 fast requests, long ago
    after = Histogram(((1.0, 100.0), (10.0, 104.0), (math.inf, 104.0)))  # 4 slow ones now
    window = after.since(before)
    assert window.buckets == ((1.0, 0.0), (10.0, 4.0), (math.inf, 4.0))
    assert window.quantile(0.5) == pytest.approx(5.5)
    assert after.quantile(0.5) < 1.0  # the lifetime view would hide the slowdown


def test_a_restarted_replica_counts_everything_as_new() -> None:
    before = Histogram(((1.0, 50.0), (math.inf, 60.0)))
    after = Histogram(((1.0, 2.0), (math.inf, 3.0)))
    assert after.since(before) == after


def test_no_requests_in_the_window_means_no_quantile(flooded_metrics: str) -> None:
    flooded = parse_metrics(flooded_metrics)
    assert flooded.ttft.since(flooded.ttft).quantile(0.95) is None


def test_the_kv_cache_usage_of_an_older_vllm_reads_under_its_old_name(flooded_metrics: str) -> None:
    # As vLLM before v1 exposed it: the same gauge under its old name (only its own lines hold the name).
    old = flooded_metrics.replace(KV_USAGE, OLD_KV_USAGE)
    assert KV_USAGE not in old and OLD_KV_USAGE in old
    assert parse_metrics(old).kv_cache_usage == pytest.approx(0.935, abs=1e-3)
    names = exposed_names(old)
    assert names.missing == [] and names.renamed == {KV_USAGE: OLD_KV_USAGE}


def test_a_replica_with_neither_name_is_refused_naming_both(flooded_metrics: str) -> None:
    neither = "".join(line + "\n" for line in flooded_metrics.splitlines() if KV_USAGE not in line)
    with pytest.raises(ProbeError, match=f"no {KV_USAGE} \\(nor {OLD_KV_USAGE}\\)"):
        parse_metrics(neither)
    assert exposed_names(neither).missing == [KV_USAGE]


def test_a_current_replica_exposes_every_needed_name_as_it_is_today(idle_metrics: str) -> None:
    names = exposed_names(idle_metrics)
    assert names.missing == [] and names.renamed == {}
    assert all(found == name for name, found in names.names.items())
