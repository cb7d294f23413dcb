"""How close the NFQUEUE delayer comes to the latency asked of a worker's link, without netem.

Prints, measured side by side in one run on a real namespace off a bridge (as `env up` makes
for each worker):
- the baseline TCP connect round trip from the worker's namespace to the head's address;
- for 10, 50, 200 and 500 ms asked (no jitter), the median and p95 round trip *added*
  (measured minus the baseline median) over --samples connects, and the median's error;
- for 200 ms ± 50 ms, uniform and normal, the spread of what was added (p5, median, p95,
  standard deviation) beside what the distribution asks (uniform: 50/sqrt(3) = 28.9 ms).

Target (the issue): the measured median within 5 ms of what was asked, for 50, 200 and 500 ms.
A connect is one round trip: the SYN the worker sends is held, the SYN-ACK it gets back is not
(the delay sits on the worker's egress only), so each sample crosses the delay once.

Run as root: .venv/bin/python bench/link_latency.py [--samples 30]   (about 45 s)
It makes and removes its own namespace on --subnet (10.213.252.0/29), apart from any environment.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from inferchaos.primitives.link_delay import (
    Jitter,
    LinkDegradation,
    apply_link_degradation,
    revert_link_degradation,
)
from inferchaos.primitives.netns import NetnsPlan, parse_subnet, run_commands

PORT = 39_937


def connect_rtts_ms(plan: NetnsPlan, count: int) -> list[float]:
    """``count`` TCP connect times from worker 0's namespace to the head, in ms, one after another."""
    code = (
        "import json, socket, time\nout = []\n"
        f"for _ in range({count}):\n"
        "    t = time.perf_counter()\n"
        f"    socket.create_connection(('{plan.head_address}', {PORT}), timeout=5).close()\n"
        "    out.append((time.perf_counter() - t) * 1000)\n"
        "print(json.dumps(out))"
    )
    argv = ["ip", "netns", "exec", plan.namespace(0), sys.executable, "-c", code]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True)
    rtts: list[float] = json.loads(done.stdout)
    return rtts


@contextmanager
def head_server(plan: NetnsPlan) -> Iterator[None]:
    """A server on the head's address that accepts and closes every connection."""
    server = socket.create_server((str(plan.head_address), PORT), backlog=128)
    server.settimeout(0.2)
    stop = threading.Event()

    def drain() -> None:
        while not stop.is_set():
            try:
                server.accept()[0].close()
            except TimeoutError:
                continue

    thread = threading.Thread(target=drain, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        server.close()


def added_ms(
    plan: NetnsPlan, degradation: LinkDegradation, samples: int, baseline: float, logs: Path
) -> list[float]:
    """What ``degradation`` adds to each of ``samples`` round trips, reverted afterwards."""
    handle_id = f"bench-{uuid.uuid4().hex[:8]}"
    applied = apply_link_degradation(
        plan.namespace(0), handle_id, degradation, logs / f"{handle_id}.log", dict(os.environ)
    )
    try:
        return [rtt - baseline for rtt in connect_rtts_ms(plan, samples)]
    finally:
        revert_link_degradation(applied)


def p(values: list[float], pct: int) -> float:
    """The ``pct``-th percentile (inclusive method: within the samples)."""
    return statistics.quantiles(values, n=100, method="inclusive")[pct - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--subnet", default="10.213.252.0/29")
    args = parser.parse_args()
    plan = NetnsPlan(f"b{uuid.uuid4().hex[:10]}", parse_subnet(args.subnet), workers=1)
    logs = Path(tempfile.mkdtemp(prefix="inferchaos-bench-link-"))
    run_commands(plan.up_commands())
    try:
        with head_server(plan):
            connect_rtts_ms(plan, 3)  # warm the ARP entry and the page cache outside the timings
            base = connect_rtts_ms(plan, args.samples)
            baseline = statistics.median(base)
            print(
                f"baseline connect RTT: median {baseline:.2f} ms, p95 {p(base, 95):.2f} ms ({args.samples} samples)"
            )
            print()
            print(f"{'asked ms':>9} {'median added':>13} {'p95 added':>10} {'error':>8}  within 5 ms")
            for asked in (10, 50, 200, 500):
                added = added_ms(plan, LinkDegradation(asked), args.samples, baseline, logs)
                median = statistics.median(added)
                ok = "yes" if abs(median - asked) <= 5 else "NO"
                print(f"{asked:>9} {median:>13.2f} {p(added, 95):>10.2f} {median - asked:>+8.2f}  {ok}")
            print()
            print(f"{'200 ± 50 ms':>12} {'p5':>7} {'median':>7} {'p95':>7} {'stdev':>7} {'asked stdev':>12}")
            for jitter, asked_stdev in ((Jitter.UNIFORM, 50 / math.sqrt(3)), (Jitter.NORMAL, 50.0)):
                added = added_ms(plan, LinkDegradation(200, 50, jitter=jitter), args.samples, baseline, logs)
                print(
                    f"{jitter.value:>12} {p(added, 5):>7.1f} {statistics.median(added):>7.1f} "
                    f"{p(added, 95):>7.1f} {statistics.stdev(added):>7.1f} {asked_stdev:>12.1f}"
                )
    finally:
        run_commands(plan.down_commands(), tolerate_gone=True)


if __name__ == "__main__":
    main()
