"""Render each experiment's Chaos Toolkit hypothesis from its ``slos:``, so the two cannot drift.

A plain ``chaos run`` judges an experiment by its ``steady-state-hypothesis``: the front door,
the live sampler (inferchaos/ctk/live.py ``sample_steady_state``) and one ``slo_live`` probe per
SLO, so that the journal shows each SLO as a probe of its own. Every part of it follows from
the experiment's ``slos:``, ``recovery:``, ``platform:``, ``baseline:`` and ``canary:``: this
script writes that section from them, referring to each SLO by its YAML anchor (``&name``).
Experiments whose hypothesis is not the live sampler's (the Kubernetes ones) are left as they are.

    .venv/bin/python scripts/gen_hypothesis.py            # rewrite the stale sections
    .venv/bin/python scripts/gen_hypothesis.py --check    # exit 1 naming the stale files
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from inferchaos.run.spec import ExperimentSpec, ensure_experiment_is_valid, load_experiment
from inferchaos.steady_state.canary import CanaryPace

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "experiments"
SECTION = "steady-state-hypothesis:"
LIVE = "inferchaos.ctk.live"
TITLE = "The front door serves completions, and every SLO holds"
# An SLO declared as ``- &name {name: name, ...}``: the anchor the hypothesis refers to.
ANCHORED = re.compile(r"^\s*- &([A-Za-z0-9_]+) \{name: ([A-Za-z0-9_.-]+)[,}]", re.MULTILINE)


class StaleError(Exception):
    """An experiment whose hypothesis cannot be rendered (an SLO without its anchor)."""


def _aliases(names: list[str]) -> str:
    return "[" + ", ".join(f"*{name}" for name in names) + "]"


def _probe(name: str, tolerance: str, func: str, arguments: str) -> list[str]:
    return [
        "    - type: probe",
        f"      name: {name}",
        f"      tolerance: {tolerance}",
        "      provider:",
        "        type: python",
        f"        module: {LIVE}",
        f"        func: {func}",
        f"        arguments: {arguments}",
    ]


def render(spec: ExperimentSpec) -> str:
    """The ``steady-state-hypothesis`` section of ``spec``'s file, as its ``slos:`` imply it."""
    raw = spec.raw
    slos = [str(s["name"]) for s in raw["slos"]]
    phases = {str(s["name"]): str(s["phase"]) for s in raw["slos"]}
    # Judged before the method: baseline and recovery ones; during-phase ones after it.
    judged = [n for n in slos if phases[n] != "during"] + [n for n in slos if phases[n] == "during"]
    steady = [str(name) for name in raw["recovery"]["steady"]]
    pace = CanaryPace()
    timeout = (
        f", canary_timeout_s: {spec.canary_timeout_s:g}"
        if spec.canary_timeout_s != pace.request_timeout_s
        else ""
    )
    in_flight = (
        f", canary_max_in_flight: {spec.canary_max_in_flight}"
        if spec.canary_max_in_flight != pace.max_in_flight
        else ""
    )
    platform = ", platform: *platform" if "platform" in raw else ""
    lines = [
        SECTION,
        f"  title: {TITLE}",
        "  probes:",
        "    - type: probe",
        "      name: front-door-serves",
        "      tolerance: true",
        "      provider: {type: python, module: inferchaos.ctk.providers, func: front_door_serves}",
        *_probe(
            "steady-state-sampled",
            f"{{type: probe, name: samples-taken, provider: {{type: python, module: {LIVE}, func: sampled, arguments: {{}}}}}}",
            "sample_steady_state",
            f"{{baseline_s: {spec.baseline_s:g}, slos: {_aliases(slos)}, recovery: *recovery{platform}{timeout}{in_flight}}}",
        ),
    ]
    for name in judged:
        lines += _probe(
            name,
            f"{{type: probe, name: {name}-met, provider: {{type: python, module: {LIVE}, func: slo_met, arguments: {{}}}}}}",
            "slo_live",
            f"{{slo: *{name}, recovery: *recovery, steady: {_aliases(steady)}{timeout}}}",
        )
    return "\n".join(lines) + "\n"


def _section(text: str) -> tuple[int, int] | None:
    """Where the hypothesis section starts and ends in ``text``; None where it has none."""
    start = text.find(f"\n{SECTION}\n")
    if start < 0:
        return None
    start += 1
    following = re.search(r"^\S", text[start + len(SECTION) + 1 :], re.MULTILINE)
    end = len(text) if following is None else start + len(SECTION) + 1 + following.start()
    # Blank lines before the next key stay outside the section.
    while end > start and text[end - 2 : end] == "\n\n":
        end -= 1
    return start, end


def rendered(path: Path) -> str | None:
    """``path``'s text with its hypothesis rendered; None for an experiment this does not render."""
    text = path.read_text(encoding="utf-8")
    spec = ensure_experiment_is_valid(load_experiment(path), path)
    hypothesis = spec.raw.get("steady-state-hypothesis") or {}
    funcs = {p.get("provider", {}).get("module") for p in hypothesis.get("probes", [])}
    if LIVE not in funcs or "recovery" not in spec.raw:
        return None
    anchors = dict(ANCHORED.findall(text))
    unanchored = [str(s["name"]) for s in spec.raw["slos"] if anchors.get(str(s["name"])) != str(s["name"])]
    if unanchored:
        raise StaleError(
            f"{path.name}: declare each SLO as `- &NAME {{name: NAME, ...}}`: {', '.join(unanchored)}"
        )
    where = _section(text)
    if where is None:
        return None
    start, end = where
    return text[:start] + render(spec) + text[end:]


def main(argv: list[str] | None = None) -> int:
    """Rewrite (or with ``--check``, name) the experiments whose hypothesis is stale."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true", help="exit 1 naming stale files; write nothing")
    args = parser.parse_args(argv)
    stale = []
    for path in sorted(EXPERIMENTS.glob("*.yaml")):
        try:
            new = rendered(path)
        except StaleError as e:
            print(f"gen_hypothesis: {e}", file=sys.stderr)
            return 1
        if new is None or new == path.read_text(encoding="utf-8"):
            continue
        stale.append(path)
        if not args.check:
            path.write_text(new, encoding="utf-8")
    if stale and args.check:
        names = ", ".join(str(p.relative_to(ROOT)) for p in stale)
        print(f"gen_hypothesis: stale hypothesis in {names}; run scripts/gen_hypothesis.py", file=sys.stderr)
        return 1
    for path in stale:
        print(f"wrote {path.relative_to(ROOT)}")
    if not stale:
        print("gen_hypothesis: current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
