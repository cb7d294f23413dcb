"""The error a report raises: a run folder it cannot render."""

from __future__ import annotations

from inferchaos.errors import InferchaosError


class ReportError(InferchaosError):
    """A run folder lacks a file, a stored file is malformed, or a report cannot be written.

    The message names the file, so a user knows which recording to look at.
    """

    # Invalid input (exit codes: README "Game days and experiments"): nothing was injected by rendering a report.
    exit_code = 2
