"""The errors a report raises: a run folder it cannot render, metrics a Pushgateway would not take."""

from __future__ import annotations

from inferchaos.errors import InferchaosError


class ReportError(InferchaosError):
    """A run folder lacks a file, a stored file is malformed, or a report cannot be written.

    The message names the file, so a user knows which recording to look at.
    """

    # Invalid input (exit codes: docs/experiments.md "Game days and experiments"): nothing was injected by rendering a report.
    exit_code = 2


class PushError(InferchaosError):
    """A Pushgateway did not take a run's metrics: unreachable, refused or too slow.

    The message names the experiment and the gateway. The CLI reports it in one line and goes
    on: a push never changes a verdict or an exit code.
    """
