"""Negative controls through the real Runner: a held fault or a sabotage breaks the (fake) platform.

What a user relies on: a control's scenario is judged exactly as written, the break lasts
through the whole judged window, everything the control did is reverted once (after the run,
or at once on Ctrl-C) and the ledger ends empty, and the verdict says plainly whether the
scenario caught the break.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from inferchaos.faults.ledger import Ledger
from inferchaos.layers import Layer
from inferchaos.reports.verdict_schema import Status
from inferchaos.run.controls import ControlResult, ControlSpec, SabotageAt, SabotageStep
from inferchaos.run.spec import ExperimentSpec
from tests.fakes.scripted_world import (
    FAKE_SABOTAGE,
    RunResult,
    World,
    make_spec,
    run_cleanup,
    run_fake_experiment,
)

pytestmark = pytest.mark.long_running

# The fault hurts the platform while it is in place: a queue in vLLM, slow first tokens.
HURT = {"canary.ttft_s": 2.0, "vllm.num_requests_waiting": 4.0}


def _control(
    spec: ExperimentSpec,
    *,
    hold: bool = False,
    sabotage: tuple[SabotageStep, ...] = (),
    layer: Layer = Layer.VLLM,
) -> ControlSpec:
    return ControlSpec(spec.path, spec, "the fake platform never heals", layer, hold, sabotage)


def _run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, control: ControlSpec, world: World, **kwargs: object
) -> RunResult:
    monkeypatch.setenv("INFERCHAOS_HOME", str(tmp_path / "home"))
    return run_fake_experiment(control.run_spec(), tmp_path / "run", world=world, control=control, **kwargs)  # type: ignore[arg-type]


def test_a_held_fault_is_judged_in_place_and_reverted_once_after_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = make_spec(tmp_path / "scenario.yaml")
    world = World(during=dict(HURT))
    result = _run(tmp_path, monkeypatch, _control(spec, hold=True), world)
    verdict = result.verdict
    assert verdict.status is Status.FAILED
    assert verdict.experiment == "scenario.control"
    assert "ttft_after" in verdict.reason  # the recovery window saw the fault still in place
    names = world.names()
    assert names.count("revert") == 1
    # Reverted only once the judged window had ended (the canary stops at the end of the run).
    assert names.index("revert") > names.index("canary.stop")
    assert Ledger().entries() == []
    assert verdict.control is not None
    assert verdict.control.result == ControlResult.FAILED_AS_EXPECTED
    assert verdict.control.message.startswith("control: failed as expected")
    assert list(verdict.control.released) == [
        {"fault": "test.fake_fault", "ok": True, "handle": verdict.control.released[0]["handle"]}
    ]
    assert verdict.triage.layer == "vllm"


def test_a_control_whose_scenario_passes_says_the_scenario_cannot_catch_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The held fault changes nothing the SLOs read: the scenario passes, and the control says so."""
    spec = make_spec(tmp_path / "scenario.yaml")
    world = World(during={"vllm.num_requests_waiting": 1.0})  # bites, but within every SLO
    result = _run(tmp_path, monkeypatch, _control(spec, hold=True), world)
    assert result.verdict.status is Status.PASSED
    control = result.verdict.control
    assert control is not None and control.result == ControlResult.PASSED
    assert control.message == "control PASSED: the scenario cannot catch this"
    assert Ledger().entries() == []


def test_sabotage_lasts_through_recovery_and_is_reverted_after_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = make_spec(tmp_path / "scenario.yaml")
    step = SabotageStep(0, FAKE_SABOTAGE, SabotageAt.REVERT, {"values": {"canary.ttft_s": 3.0}})
    world = World(during=dict(HURT))
    result = _run(tmp_path, monkeypatch, _control(spec, sabotage=(step,)), world)
    names = world.names()
    # In place before the scenario's own revert (no race with a quick recovery), and outlives the run.
    assert names.index("evidence") < names.index("sabotage.inject") < names.index("revert")
    assert names.index("sabotage.revert") > names.index("canary.stop")
    assert names.count("sabotage.revert") == 1 and names.count("revert") == 1
    slos = {s.name: s for s in result.verdict.slos}
    assert not slos["ttft_after"].ok and slos["ttft_after"].observed == 3.0
    assert result.verdict.status is Status.FAILED
    assert Ledger().entries() == []


def test_a_control_that_fails_in_another_layer_is_not_proven(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = make_spec(tmp_path / "scenario.yaml")
    result = _run(tmp_path, monkeypatch, _control(spec, hold=True, layer=Layer.RAY), World(during=dict(HURT)))
    control = result.verdict.control
    assert result.verdict.status is Status.FAILED
    assert control is not None and control.result == ControlResult.WRONG_LAYER
    assert control.message == "control failed, but triage named vllm, not ray"


def test_ctrl_c_during_a_held_recovery_reverts_everything_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = make_spec(
        tmp_path / "scenario.yaml", recovery={"within_s": 10, "hold_s": 0.5, "steady": ["ttft_after"]}
    )
    step = SabotageStep(0, FAKE_SABOTAGE, SabotageAt.INJECT, {"values": {"canary.ttft_s": 3.0}})
    world = World(during=dict(HURT))
    control = _control(spec, hold=True, sabotage=(step,))
    # The held fault is never reverted during the run, so "recovery" is reached when the sabotage is in.
    result = _run(tmp_path, monkeypatch, control, world, interrupt=signal.SIGINT, interrupt_at="during")
    verdict = result.verdict
    assert verdict.status is Status.ABORTED and "interrupted" in verdict.reason
    assert world.names().count("revert") == 1 and world.names().count("sabotage.revert") == 1
    assert Ledger().entries() == []
    assert verdict.control is not None and verdict.control.result == ControlResult.NO_VERDICT


def test_a_control_without_a_break_or_with_an_unknown_fault_is_refused(tmp_path: Path) -> None:
    from inferchaos.errors import ConfigError
    from inferchaos.run.controls import load_control

    scenario = Path(__file__).resolve().parents[3] / "experiments" / "kv_flood.yaml"
    cases = {
        "nothing.yaml": (
            f"control: {{of: {scenario}, breaks: x, expect: {{layer: vllm}}}}\n",
            "breaks nothing",
        ),
        "fault.yaml": (
            f"control: {{of: {scenario}, breaks: x, expect: {{layer: vllm}}, sabotage: [{{fault: vllm.nope}}]}}\n",
            "control.sabotage[0].fault: unknown fault 'vllm.nope'",
        ),
        "layer.yaml": (
            f"control: {{of: {scenario}, breaks: x, hold_fault: true, expect: {{layer: canary}}}}\n",
            "expect.layer: must be one of network, vllm, device, ray, k8s",
        ),
        "at.yaml": (
            f"control: {{of: {scenario}, breaks: x, expect: {{layer: vllm}}, "
            "sabotage: [{fault: ray.leak_actors, at: later}]}\n",
            "sabotage.at",
        ),
        "args.yaml": (
            f"control: {{of: {scenario}, breaks: x, expect: {{layer: vllm}}, "
            "sabotage: [{fault: ray.leak_actors, arguments: {rate_per_s: .nan}}]}\n",
            "control.sabotage[0].arguments.rate_per_s: must be a finite number",
        ),
        "missing.yaml": (
            "control: {of: nowhere.yaml, breaks: x, hold_fault: true, expect: {layer: vllm}}\n",
            "no such experiment file",
        ),
        "extra.yaml": (
            f"control: {{of: {scenario}, breaks: x, hold_fault: true, expect: {{layer: vllm}}}}\nslos: []\n",
            "slos: unknown key",
        ),
    }
    for name, (text, message) in cases.items():
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(ConfigError) as caught:
            load_control(path)
        assert message in str(caught.value), (name, str(caught.value))
        assert "\n" not in str(caught.value)


@pytest.mark.parametrize("at", list(SabotageAt))
def test_ctrl_c_right_after_a_sabotage_goes_in_reverts_it_and_the_fault_once(
    at: SabotageAt, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rollback matrix at every point a control injects its break: Ctrl-C as it goes in."""
    spec = make_spec(
        tmp_path / "scenario.yaml", recovery={"within_s": 10, "hold_s": 0.5, "steady": ["ttft_after"]}
    )
    step = SabotageStep(0, FAKE_SABOTAGE, at, {"values": {"canary.ttft_s": 3.0}})
    world = World(during=dict(HURT))
    result = _run(
        tmp_path,
        monkeypatch,
        _control(spec, sabotage=(step,)),
        world,
        interrupt=signal.SIGINT,
        interrupt_at="sabotaged",
    )
    names = world.names()
    assert result.verdict.status is Status.ABORTED and "interrupted" in result.verdict.reason, (
        result.verdict.reason
    )
    assert names.count("sabotage.inject") == 1 and names.count("sabotage.revert") == 1, names
    # The scenario's own fault: reverted once where it went in (not at all from the baseline).
    assert names.count("revert") == names.count("inject") == (0 if at is SabotageAt.BASELINE else 1), names
    assert Ledger().entries() == []
    assert result.verdict.control is not None and result.verdict.control.result == ControlResult.NO_VERDICT


def test_a_release_that_fails_keeps_its_entry_for_cleanup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rollback matrix at the control's release: a break that cannot be released after the
    run is reported, its ledger entry kept, and `inferchaos cleanup` reverts it."""
    spec = make_spec(tmp_path / "scenario.yaml")
    step = SabotageStep(
        0, FAKE_SABOTAGE, SabotageAt.INJECT, {"values": {"canary.ttft_s": 3.0}, "release_fails": True}
    )
    world = World(during=dict(HURT))
    result = _run(tmp_path, monkeypatch, _control(spec, sabotage=(step,)), world)
    control = result.verdict.control
    assert control is not None
    (released,) = control.released
    assert released["fault"] == FAKE_SABOTAGE and released["ok"] is False, released
    (entry,) = Ledger().entries()
    assert entry.fault == FAKE_SABOTAGE
    assert run_cleanup(monkeypatch) == 0
    assert Ledger().entries() == [] and world.names().count("sabotage.revert") == 2
