"""The one error tree of inferchaos.

Every error the suite raises on purpose derives from :class:`InferchaosError`, and each one
chains its cause (``raise ... from e``) so a user sees both what inferchaos was doing and why
it failed. The CLI maps the tree onto exit codes (README, "Game days and experiments"): invalid input and environment
errors exit 2 before anything is injected.
"""

from __future__ import annotations


class InferchaosError(Exception):
    """Root of every error inferchaos raises deliberately."""

    exit_code: int = 1


class ConfigError(InferchaosError):
    """A knob, experiment or SLO is invalid. Raised before anything is touched."""

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


class ProbeError(InferchaosError):
    """A probe could not read its layer."""
