"""The status of a run, shared by the runner that decides it and the reports that read it back."""

from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    """verdict.json ``status`` (the run folder, docs/experiments.md "Game days and experiments")."""

    PASSED = "passed"
    FAILED = "failed"
    ABORTED = "aborted"
    ERROR = "error"
    # The fault's plan found the host lacks what it needs (errors.Unsupported); nothing ran.
    SKIPPED = "skipped"
