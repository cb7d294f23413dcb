"""vllm.flood_kv_cache's parameters refuse bad sizing in one line (validated before any plan)."""

from __future__ import annotations

import pytest

from inferchaos.errors import ConfigError
from inferchaos.faults.vllm.flood import FloodParams


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"overfill": -1}, "overfill must be >= 0, got -1"),
        ({"concurrency": 0}, "concurrency 0 must be between 1 and max_concurrency 64"),
        ({"prompt_fraction": 0.95}, "prompt_fraction must be between 0.1 and 0.9"),
    ],
)
def test_bad_sizing_is_refused_in_one_line(arguments: dict[str, float], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        FloodParams(**arguments)  # type: ignore[arg-type]


def test_the_default_overfills_each_replica_by_two_queued_prompts() -> None:
    # The scenario floods through the front door with overfill 0 (see experiments/kv_flood.yaml).
    assert FloodParams().overfill == 2 and FloodParams(overfill=0).overfill == 0
