"""Loading and completely validating an experiment file before anything is touched.

An experiment is a valid Chaos Toolkit experiment (its fault is a python-provider action of
one of our `inferchaos.ctk.<layer>_actions` modules, which the fault registry lists) extended with the inferchaos keys `slos`,
`recovery`, `stop_conditions`, `environment` and `baseline`. Every problem is a ConfigError
whose one line names the file and the key path, e.g. ``kv_flood.yaml: slos[1].op: ...``.
"""

from __future__ import annotations

import logging
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any, get_type_hints

import yaml

from inferchaos.errors import ConfigError
from inferchaos.faults import registry
from inferchaos.faults.base import TypedFault
from inferchaos.layers import EnvName
from inferchaos.params import InvalidValue, convert, seconds
from inferchaos.steady_state.canary import CanaryPace
from inferchaos.steady_state.platform import PlatformAllowance, ensure_platform_is_valid
from inferchaos.steady_state.slo import Slo, SloSpec, ensure_slos_are_valid

logger = logging.getLogger(__name__)

# Before 0.2 the packages were installed top-level (`faults.vllm.actions`); they now live under
# the one `inferchaos` namespace, and a YAML that still names the old path is told the new one.
OLD_TOP_LEVEL_PACKAGES = ("experiments", "faults", "steady_state", "environments", "reports")


def _ensure_providers_use_the_namespace(raw: dict[str, Any], path: Path) -> None:
    hypothesis = raw.get("steady-state-hypothesis")
    probes = hypothesis.get("probes") if isinstance(hypothesis, dict) else None
    sections: list[tuple[str, Any]] = [("steady-state-hypothesis.probes", probes)]
    sections += [("method", raw.get("method")), ("rollbacks", raw.get("rollbacks"))]
    for section, activities in sections:
        if not isinstance(activities, list):
            continue
        for index, activity in enumerate(activities):
            provider = activity.get("provider") if isinstance(activity, dict) else None
            module = provider.get("module") if isinstance(provider, dict) else None
            if not isinstance(module, str):
                continue
            new = f"inferchaos.{module}" if module.split(".", 1)[0] in OLD_TOP_LEVEL_PACKAGES else module
            new = registry.MOVED_ACTION_MODULES.get(new, new)
            if new != module:
                raise _fail(path, f"{section}[{index}].provider.module", f"{module!r} moved: use {new!r}")


@dataclass(frozen=True)
class FaultStep:
    """The method action that injects the fault, read as a registered fault (``<layer>.<verb>``) and its parameters."""

    index: int
    action_name: str
    module: str
    func: str
    fault: str
    params: dict[str, Any]
    duration_s: float


@dataclass(frozen=True)
class ExperimentSpec:
    """A validated experiment."""

    path: Path
    name: str
    title: str
    description: str
    env: str
    baseline_s: float
    fault: FaultStep
    slos: SloSpec
    stop_conditions: tuple[Slo, ...]
    raw: dict[str, Any] = field(repr=False)
    # How long a canary request may wait for its answer before it counts as failed; a latency
    # SLO judged during the fault needs a threshold well below it.
    canary_timeout_s: float = 10.0
    # At most this many canary requests wait at once; one due beyond it is not sent and fails.
    canary_max_in_flight: int = 8
    # What the fault may take out of the platform steady state while it acts (``platform.allows``).
    platform: PlatformAllowance = field(default_factory=PlatformAllowance)


def _fail(path: Path, key: str, message: str) -> ConfigError:
    return ConfigError(f"{path}: {key}: {message}" if key else f"{path}: {message}")


def load_experiment(path: Path) -> dict[str, Any]:
    """Read an experiment file into a mapping, or raise a one-line ConfigError."""
    if not path.exists():
        raise ConfigError(f"{path}: no such experiment file")
    if path.is_dir():
        raise ConfigError(
            f"{path}: is a directory, not an experiment file (a folder of them is a gameday --suite)"
        )
    if not path.is_file():
        raise ConfigError(f"{path}: not a regular file")
    try:
        # YAML is UTF-8 whatever the locale says; a file saved as Latin-1 is refused, not misread.
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        bad = e.object[e.start : e.start + 1].hex()
        raise ConfigError(
            f"{path}: not UTF-8 text: byte 0x{bad} at offset {e.start}; save the file as UTF-8"
        ) from e
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror or e}") from e
    if not text.strip():
        raise ConfigError(f"{path}: the file is empty; an experiment needs at least title, method and slos")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{path}: YAML syntax error at {where}{problem}") from e
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: an experiment must be a mapping of keys, got {type(data).__name__}")
    return data


def _seconds(path: Path, key: str, value: Any, *, allow_zero: bool = False) -> float:
    try:
        return seconds(value, key, allow_zero=allow_zero)
    except InvalidValue as e:
        raise _fail(path, e.key, e.problem) from e


def _canary(path: Path, raw: Any) -> tuple[float, int]:
    """``canary: {request_timeout_s: N, max_in_flight: M}``: the canary settings an experiment
    makes, as (timeout, in-flight cap)."""
    defaults = CanaryPace()
    if raw is None:
        return defaults.request_timeout_s, defaults.max_in_flight
    if not isinstance(raw, dict):
        raise _fail(
            path,
            "canary",
            f"must be a mapping with request_timeout_s, max_in_flight, got {type(raw).__name__}",
        )
    unknown = sorted(set(raw) - {"request_timeout_s", "max_in_flight"})
    if unknown:
        raise _fail(path, f"canary.{unknown[0]}", "unknown key; use request_timeout_s, max_in_flight")
    timeout_s = _seconds(
        path, "canary.request_timeout_s", raw.get("request_timeout_s", defaults.request_timeout_s)
    )
    try:
        max_in_flight = convert(raw.get("max_in_flight", defaults.max_in_flight), int, "canary.max_in_flight")
    except InvalidValue as e:
        raise _fail(path, e.key, e.problem) from e
    if max_in_flight < 1:
        raise _fail(path, "canary.max_in_flight", f"must be at least 1, got {max_in_flight!r}")
    return timeout_s, max_in_flight


ROLLBACK_PREFIX = "rollback_"


def _fault_step(path: Path, method: list[Any]) -> FaultStep:
    modules = registry.action_modules()
    steps: list[tuple[int, dict[str, Any], dict[str, Any]]] = []
    reverts: list[tuple[int, dict[str, Any], dict[str, Any]]] = []
    for index, activity in enumerate(method):
        key = f"method[{index}]"
        if not isinstance(activity, dict):
            raise _fail(path, key, "must be a mapping (an action or a probe)")
        provider = activity.get("provider")
        if not isinstance(provider, dict):
            raise _fail(path, f"{key}.provider", "required: a mapping with type, module and func")
        if activity.get("type") == "action" and provider.get("module") in modules:
            # A plain `chaos run` judges recovery in its hypothesis after the method, before
            # the rollbacks: the method itself reverts the fault (the runner reverts on its own).
            is_revert = str(provider.get("func", "")).startswith(ROLLBACK_PREFIX)
            (reverts if is_revert else steps).append((index, activity, provider))
    if len(steps) != 1:
        where = f" ({', '.join(f'method[{i}]' for i, _, _ in steps)})" if steps else ""
        raise _fail(
            path,
            "method",
            f"needs exactly one fault action from {', '.join(modules)}; found {len(steps)}{where}",
        )
    index, activity, provider = steps[0]
    key = f"method[{index}]"
    module_name, func = provider["module"], provider.get("func")
    fault_name = registry.fault_of_action(module_name, str(func))
    if fault_name is None:
        offered = registry.actions_of(module_name)
        raise _fail(path, f"{key}.provider.func", f"unknown fault {func!r}; {module_name} has {offered}")
    for revert_index, _, revert in reverts:
        if revert_index < index or (revert["module"], revert.get("func")) != (
            module_name,
            f"{ROLLBACK_PREFIX}{func}",
        ):
            raise _fail(
                path,
                f"method[{revert_index}].provider.func",
                f"a revert in the method must be {ROLLBACK_PREFIX}{func} of {module_name}, after {key}",
            )
    arguments = provider.get("arguments", {}) or {}
    if not isinstance(arguments, dict):
        raise _fail(path, f"{key}.provider.arguments", "must be a mapping of argument names to values")
    check_fault_arguments(path, f"{key}.provider.arguments", fault_name, str(func), arguments)
    pauses = activity.get("pauses") or {}
    if not isinstance(pauses, dict):
        raise _fail(path, f"{key}.pauses", f"must be a mapping with after, got {type(pauses).__name__}")
    if "after" not in pauses:
        raise _fail(path, f"{key}.pauses.after", "required: how long the fault stays active, in seconds")
    duration = _seconds(path, f"{key}.pauses.after", pauses["after"])
    return FaultStep(
        index, str(activity.get("name", func)), module_name, str(func), fault_name, dict(arguments), duration
    )


def check_fault_arguments(
    path: Path, key: str, fault_name: str, func: str, arguments: dict[str, Any]
) -> None:
    """Each argument against the fault's parameter dataclass (so the error names it), then all together."""
    fault = registry.get_fault(fault_name)
    if not isinstance(fault, TypedFault):
        return
    hints = get_type_hints(fault.params_type)
    defaults = {f.name: f.default for f in fields(fault.params_type) if f.default is not MISSING}
    given = {name: value for name, value in arguments.items() if value is not None}
    for name, value in arguments.items():
        if name not in hints:
            raise _fail(path, f"{key}.{name}", f"unknown argument; {func} takes {sorted(hints)}")
        if value is None:
            continue  # the action drops it: the parameter keeps its default
        # Each argument alone against its type in the fault's dataclass, so the message names its key.
        try:
            convert(value, hints[name], f"{key}.{name}")
        except InvalidValue as e:
            raise _fail(path, e.key, e.problem) from e
        if name.endswith("_s") and not name.endswith("_per_s"):
            # A duration; 0 only where the fault itself defaults to 0 (a grace period, not a timeout).
            _seconds(path, f"{key}.{name}", value, allow_zero=defaults.get(name) == 0)
    try:
        fault.parse(given)
    except ConfigError as e:
        raise _fail(path, key, str(e)) from e


def ensure_recovery_window_is_shorter_than_the_revert(path: Path, step: FaultStep, slos: SloSpec) -> None:
    """Refuse a recovery window that equals or exceeds the time the fault's revert waits for the platform.

    Past that wait the revert gives up (PlatformDidNotRecover) before the window has judged, so a
    platform back late could only ever time out the revert: the window must be what fails it.
    """
    rec = slos.recovery
    fault = registry.get_fault(step.fault)
    if rec is None or not isinstance(fault, TypedFault):
        return
    wait = fault.revert_wait(fault.parse({k: v for k, v in step.params.items() if v is not None}))
    if wait is None:
        return
    arg = f"method[{step.index}].provider.arguments.{wait.key}"
    if rec.within_cold_starts is not None:
        raise _fail(
            path,
            "recovery.within_cold_starts",
            f"a window that grows with the replicas' cold start may outlast the revert's fixed wait "
            f"for the platform ({arg}); give within_s alone",
        )
    after_revert_s = wait.after_revert_s(step.duration_s)
    if rec.within_s < after_revert_s:
        return
    counted = (
        f"{arg} {wait.seconds:g} s counted from the injection, less pauses.after {step.duration_s:g} s"
        if wait.from_inject
        else f"{arg} {wait.seconds:g} s"
    )
    raise _fail(
        path,
        "recovery.within_s",
        f"{rec.within_s:g} s must be shorter than the revert's own wait for the platform "
        f"({after_revert_s:g} s: {counted}): a platform back late would time out the revert, "
        f"not fail the window; raise {arg}",
    )


def _stop_conditions(path: Path, raw: Any, canary_timeout_s: float) -> tuple[Slo, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise _fail(
            path,
            "stop_conditions",
            f"must be a list of guardrails like SLOs (probe, op, threshold), got {type(raw).__name__}",
        )
    entries = []
    for index, entry in enumerate(raw):
        if not isinstance(entry, dict):
            raise _fail(path, f"stop_conditions[{index}]", "must be a mapping")
        entries.append({"agg": "last", **entry, "phase": "during"})
    try:
        conditions = (
            ensure_slos_are_valid({"slos": entries}, canary_timeout_s=canary_timeout_s).slos
            if entries
            else ()
        )
    except ConfigError as e:
        raise ConfigError(f"{path}: {str(e).replace('slos[', 'stop_conditions[', 1)}") from e
    for index, condition in enumerate(conditions):
        # A guardrail acts while the fault runs, on readings alone: it has no baseline to wait for.
        if condition.scale is not None:
            raise _fail(path, f"stop_conditions[{index}].threshold", "a stop condition needs a number")
    return conditions


def ensure_experiment_is_valid(raw: dict[str, Any], path: Path) -> ExperimentSpec:
    """Validate every key of an experiment (ours and Chaos Toolkit's); return it as a spec."""
    title = raw.get("title")
    if not isinstance(title, str) or not title.strip():
        raise _fail(path, "title", "required: a one-line title")
    description = raw.get("description", "")
    if not isinstance(description, str):
        raise _fail(path, "description", "must be text")
    method = raw.get("method")
    if method is None:
        raise _fail(path, "method", "required: the list of activities that inject the fault")
    if not isinstance(method, list) or not method:
        raise _fail(path, "method", "must be a non-empty list of activities")
    _ensure_providers_use_the_namespace(raw, path)
    fault = _fault_step(path, method)
    environment = raw.get("environment") or {"name": "local"}
    if not isinstance(environment, dict):
        raise _fail(path, "environment", f"must be a mapping with name, got {type(environment).__name__}")
    env_name = environment.get("name", EnvName.LOCAL)
    if not isinstance(env_name, str) or env_name not in set(EnvName):
        known = ", ".join(str(name) for name in EnvName)
        raise _fail(path, "environment.name", f"unknown environment {env_name!r}; use one of {known}")
    baseline = raw.get("baseline") or {}
    if not isinstance(baseline, dict):
        raise _fail(path, "baseline", "must be a mapping with duration_s")
    baseline_s = _seconds(path, "baseline.duration_s", baseline.get("duration_s", 10))
    canary_timeout_s, canary_max_in_flight = _canary(path, raw.get("canary"))
    try:
        # The canary's timeout bounds what its latency probes read: a bound must lie below it.
        slos = ensure_slos_are_valid(raw, canary_timeout_s=canary_timeout_s)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from e
    stop_conditions = _stop_conditions(path, raw.get("stop_conditions"), canary_timeout_s)
    ensure_recovery_window_is_shorter_than_the_revert(path, fault, slos)
    _ensure_chaostoolkit_accepts(raw, path)
    try:
        platform = ensure_platform_is_valid(raw.get("platform"))
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from e
    return ExperimentSpec(
        path=path,
        name=path.stem,
        title=title.strip(),
        description=description.strip(),
        env=str(env_name),
        baseline_s=baseline_s,
        fault=fault,
        slos=slos,
        stop_conditions=stop_conditions,
        raw=raw,
        canary_timeout_s=canary_timeout_s,
        canary_max_in_flight=canary_max_in_flight,
        platform=platform,
    )


def _ensure_activity_shape(path: Path, key: str, activity: Any) -> None:
    if not isinstance(activity, dict):
        raise _fail(path, key, f"must be a mapping (an action or a probe), got {type(activity).__name__}")
    if not isinstance(activity.get("name"), str):
        raise _fail(path, f"{key}.name", f"required: a text name, got {activity.get('name')!r}")
    provider = activity.get("provider")
    if not isinstance(provider, dict):
        raise _fail(path, f"{key}.provider", "required: a mapping with type, module and func")
    for name in ("type", "module", "func"):
        if name in provider and not isinstance(provider[name], str):
            raise _fail(path, f"{key}.provider.{name}", f"must be text, got {provider[name]!r}")
    if "arguments" in provider and not isinstance(provider["arguments"], dict):
        raise _fail(path, f"{key}.provider.arguments", "must be a mapping of argument names to values")


def _ensure_chaostoolkit_shapes(raw: dict[str, Any], path: Path) -> None:
    """The shapes Chaos Toolkit's validator assumes without checking (it crashes on others)."""
    if "configuration" in raw and not isinstance(raw["configuration"], dict):
        raise _fail(path, "configuration", f"must be a mapping, got {type(raw['configuration']).__name__}")
    tags = raw.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
        raise _fail(path, "tags", f"must be a list of text tags, got {tags!r}")
    sections: list[tuple[str, Any]] = [("method", raw["method"])]
    if "steady-state-hypothesis" in raw:
        hypothesis = raw["steady-state-hypothesis"]
        if not isinstance(hypothesis, dict):
            raise _fail(
                path, "steady-state-hypothesis", f"must be a mapping, got {type(hypothesis).__name__}"
            )
        sections.append(("steady-state-hypothesis.probes", hypothesis.get("probes", [])))
    sections.append(("rollbacks", raw.get("rollbacks", [])))
    for section, activities in sections:
        if not isinstance(activities, list):
            raise _fail(path, section, f"must be a list of activities, got {type(activities).__name__}")
        for index, activity in enumerate(activities):
            _ensure_activity_shape(path, f"{section}[{index}]", activity)


def _ensure_chaostoolkit_accepts(raw: dict[str, Any], path: Path) -> None:
    """Chaos Toolkit's own validation: the file must also run with `chaos run`."""
    _ensure_chaostoolkit_shapes(raw, path)
    from chaoslib.exceptions import ChaosException
    from chaoslib.experiment import ensure_experiment_is_valid as ctk_validate

    # chaoslib logs every check at INFO on its own logger; only its verdict matters here.
    logging.getLogger("chaostoolkit").setLevel(logging.WARNING)
    try:
        ctk_validate(raw)
    except ChaosException as e:
        raise ConfigError(f"{path}: Chaos Toolkit rejects it: {str(e).splitlines()[0]}") from e


def load_and_validate(path: Path) -> ExperimentSpec:
    """Load ``path`` and validate it completely."""
    return ensure_experiment_is_valid(load_experiment(path), path)
