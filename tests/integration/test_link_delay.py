"""A worker's link made slow, lossy and narrow on real namespaces, without netem, and made whole again.

Runs as root with iproute2 and iptables (`iptables-legacy`; `.ci/run` installs iptables where it
is missing) and skips, saying why, elsewhere. It measures what a user of the worker sees: TCP
connect round trips to the head, datagrams that arrive, bytes per second; and it checks that a
revert leaves no rule, qdisc, bound queue or process behind, and the host's names as they were.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
from netns_hosts import worker_hosts

from inferchaos.primitives.link_delay import (
    IPTABLES,
    AppliedDegradation,
    LinkDegradation,
    apply_link_degradation,
    bound_queues,
    queue_number,
    revert_link_degradation,
)
from inferchaos.primitives.netns import NetnsPlan

pytestmark = pytest.mark.integration

SUBNET = "10.213.251.0/29"
PORT = 39_927
ASKED_MS = 200

Degrade = Callable[[str, LinkDegradation], AppliedDegradation]


@pytest.fixture
def plan() -> Iterator[NetnsPlan]:
    with worker_hosts(SUBNET, degraded_links=True) as made:
        yield made


@pytest.fixture
def head(plan: NetnsPlan) -> Iterator[socket.socket]:
    """A TCP server on the head's address that accepts and drops every connection, and a UDP
    socket on the same port that counts what arrives."""
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
        yield server
    finally:
        stop.set()
        thread.join()
        server.close()


def _in_namespace(namespace: str, code: str, timeout_s: float = 30) -> str:
    done = subprocess.run(
        ["ip", "netns", "exec", namespace, sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=True,
    )
    return done.stdout


def _connect_rtts_ms(plan: NetnsPlan, worker: int, count: int = 10) -> list[float]:
    """``count`` TCP connect times (one round trip each: SYN out, SYN-ACK back) to the head, in ms."""
    code = (
        "import json, socket, time\nout = []\n"
        f"for _ in range({count}):\n"
        "    t = time.perf_counter()\n"
        f"    socket.create_connection(('{plan.head_address}', {PORT}), timeout=5).close()\n"
        "    out.append((time.perf_counter() - t) * 1000)\n"
        "print(json.dumps(out))"
    )
    rtts: list[float] = json.loads(_in_namespace(plan.namespace(worker), code))
    return rtts


def _connects(plan: NetnsPlan, worker: int, timeout_s: float) -> bool:
    code = f"import socket; socket.create_connection(('{plan.head_address}', {PORT}), timeout={timeout_s})"
    try:
        _in_namespace(plan.namespace(worker), code)
    except subprocess.CalledProcessError:
        return False
    return True


def _udp_arrivals(plan: NetnsPlan, worker: int, sent: int) -> int:
    """How many of ``sent`` datagrams from the worker reach the head."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sink:
        sink.bind((str(plan.head_address), PORT))
        sink.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        code = (
            "import socket, time; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            f"for _ in range({sent}):\n"
            f"    s.sendto(b'x', ('{plan.head_address}', {PORT})); time.sleep(0.001)"
        )
        _in_namespace(plan.namespace(worker), code)
        sink.settimeout(0.5)
        arrived = 0
        try:
            while sink.recv(8):
                arrived += 1
        except TimeoutError:
            return arrived
    return arrived


def _link_state(namespace: str) -> tuple[str, str]:
    """The namespace's mangle rules and qdiscs, as `iptables -S` and `tc -j` print them."""
    rules = subprocess.run(
        ["ip", "netns", "exec", namespace, IPTABLES, "-t", "mangle", "-S"],
        capture_output=True,
        text=True,
        check=True,
    )
    qdiscs = subprocess.run(
        ["ip", "netns", "exec", namespace, "tc", "-j", "qdisc", "show"],
        capture_output=True,
        text=True,
        check=True,
    )
    return rules.stdout, qdiscs.stdout


def _delayers() -> list[int]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if "inferchaos.primitives.link_delay" in (proc.info["cmdline"] or []):
            found.append(proc.pid)
    return found


@pytest.fixture
def degrade(plan: NetnsPlan, tmp_path: Path) -> Iterator[Degrade]:
    """Apply a degradation to worker 0 (``degrade(handle_id, degradation)``); every one applied is
    reverted at the end, and the namespace must then be as it was before the first."""
    namespace = plan.namespace(0)
    before, delayers = _link_state(namespace), set(_delayers())
    applied: list[AppliedDegradation] = []

    def apply(handle_id: str, degradation: LinkDegradation) -> AppliedDegradation:
        made = apply_link_degradation(
            namespace, handle_id, degradation, tmp_path / f"{handle_id}.log", dict(os.environ)
        )
        applied.append(made)
        return made

    try:
        yield apply
    finally:
        for made in applied:
            revert_link_degradation(made)
        assert _link_state(namespace) == before, "no rule or qdisc of the degradation is left"
        assert bound_queues(namespace) == set(), "no queue is left bound"
        assert set(_delayers()) == delayers, "no delayer process is left"


def test_the_asked_delay_is_added_to_each_round_trip_only_on_that_worker_and_its_revert_restores_it(
    plan: NetnsPlan, head: socket.socket, degrade: Degrade
) -> None:
    baseline = statistics.median(_connect_rtts_ms(plan, 0))
    made = degrade("slow-link", LinkDegradation(ASKED_MS))
    during = statistics.median(_connect_rtts_ms(plan, 0))
    assert ASKED_MS <= during < ASKED_MS + 50, (
        f"asked {ASKED_MS} ms; baseline {baseline:.1f}, during {during:.1f}"
    )
    assert statistics.median(_connect_rtts_ms(plan, 1, count=3)) < 50, "the other worker's link is untouched"
    assert queue_number("slow-link") in bound_queues(plan.namespace(0))
    revert_link_degradation(made)
    after = statistics.median(_connect_rtts_ms(plan, 0))
    assert after < baseline + 20, (
        f"back near the baseline {baseline:.1f} ms after the revert, got {after:.1f}"
    )
    # A second revert finds everything gone, which is no error for a cleanup.
    revert_link_degradation(made)


def test_loss_drops_its_share_of_what_the_worker_sends_and_all_of_it_cuts_the_link(
    plan: NetnsPlan, head: socket.socket, degrade: Degrade
) -> None:
    assert _udp_arrivals(plan, 0, 200) == 200
    made = degrade("lossy-link", LinkDegradation(0, loss_pct=50))
    arrived = _udp_arrivals(plan, 0, 200)
    # Binomial(200, 0.5): 100 ± 7; four standard deviations either side.
    assert 70 <= arrived <= 130, f"50% loss let {arrived} of 200 datagrams through"
    revert_link_degradation(made)
    assert _udp_arrivals(plan, 0, 200) == 200
    degrade("cut-link", LinkDegradation(0, loss_pct=100))
    assert not _connects(plan, 0, timeout_s=1.5), "every SYN is lost"


def test_a_delayer_that_dies_leaves_the_link_open_rather_than_cut(
    plan: NetnsPlan, head: socket.socket, degrade: Degrade
) -> None:
    made = degrade("dying-delayer", LinkDegradation(0, loss_pct=100))
    assert made.delayer_pid is not None and not _connects(plan, 0, timeout_s=1.5)
    os.kill(made.delayer_pid, signal.SIGKILL)
    os.waitpid(made.delayer_pid, 0)  # spawned by this process: reap it, or it lingers as a zombie
    # The rule is still there; --queue-bypass lets every packet through while no one holds the queue.
    assert queue_number("dying-delayer") not in bound_queues(plan.namespace(0))
    assert statistics.median(_connect_rtts_ms(plan, 0, count=3)) < 50


def test_a_rate_limit_caps_what_the_worker_sends(plan: NetnsPlan, degrade: Degrade) -> None:
    rate_kbit, size = 8000, 600_000  # 1 MB/s, so 0.6 s of it
    code = (
        "import socket, time\n"
        f"s = socket.create_connection(('{plan.head_address}', {PORT}), timeout=10)\n"
        f"t = time.perf_counter(); s.sendall(b'x' * {size}); s.shutdown(socket.SHUT_WR); s.recv(1)\n"
        "print(time.perf_counter() - t)"
    )
    with socket.create_server((str(plan.head_address), PORT)) as server:

        def sink() -> None:
            conn, _ = server.accept()
            with conn:
                while conn.recv(65536):
                    pass

        def throughput_kbit() -> float:
            thread = threading.Thread(target=sink, daemon=True)
            thread.start()
            elapsed = float(_in_namespace(plan.namespace(0), code))
            thread.join(timeout=10)
            return size * 8 / 1000 / elapsed

        free = throughput_kbit()
        degrade("narrow-link", LinkDegradation(0, rate_kbit=rate_kbit))
        limited = throughput_kbit()
    assert free > 4 * rate_kbit, f"the free link carries {free:.0f} kbit/s"
    assert 0.6 * rate_kbit < limited < 1.2 * rate_kbit, (
        f"limited to {rate_kbit} kbit/s, measured {limited:.0f}"
    )
