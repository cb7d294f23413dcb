"""Small requests through the front door while part of Ray's control plane is down.

A control-plane fault (Serve's controller, the GCS) claims that the data plane keeps serving.
The fault cannot see the run's canary, so it sends its own: one short streaming completion
after another, from the kill until it is told to stop, and counts what they got.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, field

from inferchaos.faults.base import JsonObject
from inferchaos.primitives.openai_stream import stream_completion

# Short, so that each request is a quick yes or no.
REQUEST_TIMEOUT_S = 10.0
REQUEST_GAP_S = 0.2
REQUEST_PROMPT = "ping"
REQUEST_MAX_TOKENS = 4
MAX_ERRORS = 5


@dataclass
class FrontDoorTally:
    """What the requests sent during an outage got."""

    sent: int = 0
    served: int = 0
    failed: int = 0
    served_by: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


class FrontDoorRequests:
    """A thread of the injecting process that sends requests through the front door until :meth:`stop`."""

    def __init__(self, name: str, front_door_url: str, model: str) -> None:
        self._url, self._model = front_door_url, model
        self._tally = FrontDoorTally()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def snapshot(self) -> JsonObject:
        """A copy of the tally so far."""
        with self._lock:
            return asdict(self._tally)

    def halt(self) -> None:
        """Send no further request (the one in flight still counts); returns at once."""
        self._stop.set()

    def stop(self) -> JsonObject:
        """Stop sending, wait for the request in flight (one timeout at most), return the tally."""
        self._stop.set()
        self._thread.join(timeout=REQUEST_TIMEOUT_S + 1.0)
        return self.snapshot()

    def _run(self) -> None:
        while not self._stop.is_set():
            result = stream_completion(
                self._url,
                self._model,
                REQUEST_PROMPT,
                max_tokens=REQUEST_MAX_TOKENS,
                timeout_s=REQUEST_TIMEOUT_S,
            )
            with self._lock:
                tally = self._tally
                tally.sent += 1
                if result.ok:
                    tally.served += 1
                    replica = result.replica or "unknown"
                    tally.served_by[replica] = tally.served_by.get(replica, 0) + 1
                else:
                    tally.failed += 1
                    if len(tally.errors) < MAX_ERRORS:
                        tally.errors.append(result.error[:200])
            self._stop.wait(REQUEST_GAP_S)
