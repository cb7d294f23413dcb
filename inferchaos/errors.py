"""The one error tree of inferchaos.

Every error the suite raises on purpose derives from :class:`InferchaosError`, and each one
chains its cause (``raise ... from e``) so a user sees both what inferchaos was doing and why
it failed. The CLI maps the tree onto exit codes (docs/experiments.md, "Game days and experiments"): invalid input and environment
errors exit 2 before anything is injected.
"""

from __future__ import annotations


class InferchaosError(Exception):
    """Root of every error inferchaos raises deliberately."""

    exit_code: int = 1


class ConfigError(InferchaosError):
    """A knob, experiment or SLO is invalid. Raised before anything is touched."""

    exit_code = 2


class Unsupported(InferchaosError):
    """The scenario cannot run on this host: it lacks what the fault needs (memory cgroups, a GPU).

    Raised by a fault's plan, before anything is touched. It is not bad input (that is
    :class:`ConfigError`): the same experiment runs unchanged where the host has the capability.
    The runner records such a run as ``skipped``, which exits 0; ``--strict`` makes a skip exit
    2. Uncaught (outside the runner), it exits 2 as well: nothing was injected.
    """

    exit_code = 2


class EnvironmentError_(InferchaosError):
    """The target environment is unreachable, not up, or failed to come up."""

    exit_code = 2


class EnvironmentNotUp(EnvironmentError_):
    """No running environment could be attached to."""


class EnvironmentStartError(EnvironmentError_):
    """Bringing an environment up failed; what was started has been torn down."""


class ModelBuildError(InferchaosError):
    """The tiny local model could not be generated."""

    exit_code = 2


class FaultError(InferchaosError):
    """A fault could not be planned, injected or reverted."""


class PlatformDidNotRecover(FaultError):
    """A revert did its part, but the platform did not come back within the revert's own wait.

    The platform failed, not inferchaos: the runner ends such a run ``failed`` (exit 1) with this
    reason, where its own problems end ``error``. The revert leaves its ledger entry, so
    `inferchaos cleanup` can wait again. A fault whose revert raises it says how long it waits
    (:meth:`inferchaos.faults.base.TypedFault.revert_wait`), so that validation can keep every
    recovery window shorter than that wait.
    """


class ProbeError(InferchaosError):
    """A probe could not read its layer."""
