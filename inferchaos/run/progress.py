"""Progress output for long waits: a live spinner on a terminal, plain lines in CI logs."""

from __future__ import annotations

import sys
import time
from types import TracebackType

from rich.console import Console
from rich.status import Status


class Progress:
    """A callable that shows the latest message of a long wait.

    On a terminal the message replaces itself in place; elsewhere (CI, pipes) each new
    message is printed as a line, and a repeated one at most every ``every_s`` seconds.
    """

    def __init__(self, console: Console | None = None, every_s: float = 10.0) -> None:
        self.console = console or Console(stderr=True)
        self._every_s = every_s
        self._status: Status | None = None
        self._last_key = ""
        self._last_at = 0.0
        self._started = time.monotonic()

    def __enter__(self) -> Progress:
        if self.console.is_terminal:
            self._status = self.console.status("starting")
            self._status.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

    def __call__(self, message: str) -> None:
        elapsed = time.monotonic() - self._started
        if self._status is not None:
            self._status.update(f"[{elapsed:5.0f} s] {message}")
            return
        # Messages that differ only in a running counter count as the same step.
        key = "".join(c for c in message if not c.isdigit())
        now = time.monotonic()
        if key != self._last_key or now - self._last_at >= self._every_s:
            print(f"[{elapsed:5.0f} s] {message}", file=sys.stderr, flush=True)
            self._last_key, self._last_at = key, now
