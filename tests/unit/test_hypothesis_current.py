"""Each experiment's Chaos Toolkit hypothesis is rendered from its `slos:` (scripts/gen_hypothesis.py).

`make lint` runs the script's --check; these tests show that the rendering follows the SLOs and
that the check catches a hypothesis left behind by an edit.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from types import ModuleType

import pytest

from tests.scripts import load_script

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"


def gen() -> ModuleType:
    return load_script("scripts/gen_hypothesis.py")


def test_every_hypothesis_of_the_live_sampler_is_current() -> None:
    module = gen()
    stale = [
        p.name
        for p in sorted(EXPERIMENTS.glob("*.yaml"))
        if (new := module.rendered(p)) and new != p.read_text()
    ]
    assert stale == [], "run scripts/gen_hypothesis.py"


def test_a_new_slo_gets_its_own_probe_and_joins_the_sampler(tmp_path: Path) -> None:
    path = tmp_path / "strict_pg_stall.yaml"
    shutil.copy(EXPERIMENTS / "strict_pg_stall.yaml", path)
    text = path.read_text()
    extra = '  - &queue_calm {name: queue_calm, probe: vllm.num_requests_waiting, agg: max, op: "<=", threshold: 3, phase: during}\n'
    path.write_text(text.replace("recovery: &recovery", extra + "recovery: &recovery", 1))
    rendered = gen().rendered(path)
    assert rendered is not None and rendered != path.read_text()
    assert "        arguments: {slo: *queue_calm, recovery: *recovery, steady: [" in rendered
    (sampler,) = [
        line for line in rendered.splitlines() if line.startswith("        arguments: {baseline_s:")
    ]
    assert sampler.endswith(", *queue_calm], recovery: *recovery}"), sampler
    # The rest of the file is kept as it was written.
    assert (
        rendered.split("steady-state-hypothesis:")[0] == path.read_text().split("steady-state-hypothesis:")[0]
    )


def test_the_check_names_the_stale_file_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    module = gen()
    path = tmp_path / "kv_flood.yaml"
    shutil.copy(EXPERIMENTS / "kv_flood.yaml", path)
    stale = path.read_text().replace(
        "        arguments: {slo: *queue_after, ", "        arguments: {slo: *ttft_after, ", 1
    )
    path.write_text(stale)
    monkeypatch.setattr(module, "EXPERIMENTS", tmp_path)
    monkeypatch.setattr(module, "ROOT", tmp_path)
    assert module.main(["--check"]) == 1
    assert "stale hypothesis in kv_flood.yaml" in capsys.readouterr().err
    assert path.read_text() == stale
    assert module.main([]) == 0 and module.main(["--check"]) == 0


def test_an_slo_without_its_anchor_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "strict_pg_stall.yaml"
    text = (EXPERIMENTS / "strict_pg_stall.yaml").read_text()
    extra = '  - {name: queue_calm, probe: vllm.num_requests_waiting, agg: max, op: "<=", threshold: 3, phase: during}\n'
    path.write_text(text.replace("recovery: &recovery", extra + "recovery: &recovery", 1))
    module = gen()
    with pytest.raises(module.StaleError, match="queue_calm"):
        module.rendered(path)
