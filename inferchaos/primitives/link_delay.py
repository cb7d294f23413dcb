"""Latency, jitter, loss and a bandwidth limit on one worker namespace's link, without netem.

The kernels measured here have no ``netem`` qdisc (CONFIG_NET_SCH_NETEM unset), no tc ``gact``,
no nft ``queue`` expression (CONFIG_NFT_QUEUE unset) and no ``fq`` qdisc. They do have the
nfnetlink queue and the xtables NFQUEUE target, so a packet can be handed to a userspace
process that holds it and gives its verdict later: this module is that process (a pure-Python
reader of the nfnetlink_queue protocol over a raw netlink socket, run as
``python -m inferchaos.primitives.link_delay``), plus the argv that sends a namespace's packets
to it and a TBF qdisc for the bandwidth limit.

Where the delay applies, and why there only: the rule sits in the worker namespace's
``mangle OUTPUT`` chain, matching ``-o eth0``, so everything the worker *sends* on its link is
held, and nothing it receives. Every round trip across the link, whichever end starts it,
crosses that one direction exactly once (the worker's request on its way out, or its reply to
the head), so ``delay_ms`` is what each round trip gains, as with ``netem delay`` on one
interface's egress. Holding both directions (OUTPUT and PREROUTING at half the delay each)
would add the same RTT with twice the packets through Python and two rules to revert. Loss is
the delayer's own ``NF_DROP`` verdict, drawn per packet, on that same direction: a packet
dropped after it was queued is lost the way a wire loses it (the sender's syscall returned long
ago), where an nft ``drop`` in OUTPUT would fail the ``sendto`` with EPERM, which no real link
does. The TBF qdisc sits on the namespace's ``eth0`` root, the same egress, after the delay.

The rule goes in with ``iptables-legacy``, which drives the xtables NFQUEUE target directly.
nft's own ``queue`` statement is refused here (CONFIG_NFT_QUEUE unset); ``iptables-nft`` 1.8.9
also works on these kernels, but only because it wraps the xtables target in nft's compat
expression (CONFIG_NFT_COMPAT), which an iptables that translates NFQUEUE natively would lose,
so it is an option (``iptables=``), not the default. ``--queue-bypass`` lets packets through
untouched while no process is bound to the queue, so a delayer that dies opens the link rather
than cutting it. Everything is named after one injection id (the rule's comment, the queue
number, the qdisc's handle), so a revert removes exactly what its injection added.

One degradation per namespace at a time: a queued packet accepted by its verdict resumes at the
next hook, not at the next rule, so a second NFQUEUE rule in the same chain would never see a
packet (and a second root qdisc is refused by tc).
"""

from __future__ import annotations

import argparse
import errno
import heapq
import logging
import random
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Literal

import psutil

from inferchaos.errors import ConfigError
from inferchaos.params import InvalidValue, number
from inferchaos.primitives.netns import NS_IFACE, NetnsError, run_commands
from inferchaos.primitives.processes import end_processes, same_process, spawn_process_group

# The module's own name also when it runs as `python -m` (where __name__ is "__main__"): it is
# what the delayer's argv runs, and its logger hangs under "inferchaos" either way.
MODULE = "inferchaos.primitives.link_delay"
logger = logging.getLogger(MODULE)

Command = list[str]

# The legacy binary loads the xtables NFQUEUE target itself; see the module's docstring for
# iptables-nft.
IPTABLES = "iptables-legacy"
TOOLS = {"ip": "iproute2", "tc": "iproute2", IPTABLES: "iptables"}
TABLE, CHAIN = "mangle", "OUTPUT"

# --- the nfnetlink_queue protocol (linux/netlink.h, linux/netfilter/nfnetlink*.h) -------------

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET = 0
NFQNL_MSG_VERDICT = 1
NFQNL_MSG_CONFIG = 2
NLM_F_REQUEST = 0x1
NLM_F_ACK = 0x4
NLMSG_NOOP, NLMSG_ERROR, NLMSG_DONE = 1, 2, 3
NFNETLINK_V0 = 0
# Attribute types carry two flag bits above the type itself.
NLA_TYPE_MASK = 0x3FFF

NFQNL_CFG_CMD_BIND = 1
NFQNL_CFG_CMD_UNBIND = 2
NFQA_CFG_CMD, NFQA_CFG_PARAMS, NFQA_CFG_QUEUE_MAXLEN, NFQA_CFG_MASK, NFQA_CFG_FLAGS = 1, 2, 3, 4, 5
NFQNL_COPY_META = 1
# Hand GSO packets over whole: the delayer never reads a payload, so splitting a 64 KiB TCP
# segment into 45 messages (and verdicts) would only cost time.
NFQA_CFG_F_GSO = 1 << 2

NFQA_PACKET_HDR = 1
NFQA_VERDICT_HDR = 2
NF_DROP, NF_ACCEPT = 0, 1

_NLMSGHDR = struct.Struct("=IHHII")  # length, type, flags, seq, portid: host byte order
_NFGENMSG = struct.Struct("!BBH")  # family, version, res_id (the queue number, big-endian)
_NLATTR = struct.Struct("=HH")  # length, type
_PACKET_HDR = struct.Struct("!IHB")  # packet_id, hw_protocol, hook
_VERDICT_HDR = struct.Struct("!II")  # verdict, packet_id

# Packets the kernel holds for one queue before it drops new ones (the default is 1024, which a
# 500 ms delay on a busy link fills). Only metadata is copied, so each costs a few hundred bytes.
QUEUE_MAXLEN = 16_384
# The receive buffer (SO_RCVBUFFORCE, root): a burst the delayer falls behind on is buffered
# here; past it the kernel reports ENOBUFS and the messages it could not deliver are lost.
RCVBUF_BYTES = 8 * 1024 * 1024
_SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)


def _align(length: int) -> int:
    return (length + 3) & ~3


def _attr(kind: int, value: bytes) -> bytes:
    length = _NLATTR.size + len(value)
    return _NLATTR.pack(length, kind) + value + b"\0" * (_align(length) - length)


def _message(msg: int, queue: int, attrs: bytes, *, seq: int, flags: int) -> bytes:
    body = _NFGENMSG.pack(socket.AF_UNSPEC, NFNETLINK_V0, queue) + attrs
    kind = (NFNL_SUBSYS_QUEUE << 8) | msg
    return _NLMSGHDR.pack(_NLMSGHDR.size + len(body), kind, flags, seq, 0) + body


def bind_message(queue: int, *, seq: int, copy_range: int = 0) -> bytes:
    """The NFQNL_MSG_CONFIG that binds ``queue`` to the sending socket, copies metadata only,
    raises the queue's length and takes GSO packets whole; it asks for an ack."""
    attrs = (
        _attr(NFQA_CFG_CMD, struct.pack("!BxH", NFQNL_CFG_CMD_BIND, socket.AF_INET))
        + _attr(NFQA_CFG_PARAMS, struct.pack("!IB", copy_range, NFQNL_COPY_META))
        + _attr(NFQA_CFG_QUEUE_MAXLEN, struct.pack("!I", QUEUE_MAXLEN))
        + _attr(NFQA_CFG_FLAGS, struct.pack("!I", NFQA_CFG_F_GSO))
        + _attr(NFQA_CFG_MASK, struct.pack("!I", NFQA_CFG_F_GSO))
    )
    return _message(NFQNL_MSG_CONFIG, queue, attrs, seq=seq, flags=NLM_F_REQUEST | NLM_F_ACK)


def unbind_message(queue: int, *, seq: int) -> bytes:
    """The NFQNL_MSG_CONFIG that unbinds ``queue`` (closing the socket does too; this says so first)."""
    attrs = _attr(NFQA_CFG_CMD, struct.pack("!BxH", NFQNL_CFG_CMD_UNBIND, socket.AF_INET))
    return _message(NFQNL_MSG_CONFIG, queue, attrs, seq=seq, flags=NLM_F_REQUEST | NLM_F_ACK)


def verdict_message(queue: int, packet_id: int, verdict: int, *, seq: int = 0) -> bytes:
    """The NFQNL_MSG_VERDICT that gives ``verdict`` (NF_ACCEPT, NF_DROP) to one queued packet.

    No ack: the kernel answers only when it refuses one (a packet it no longer holds).
    """
    attrs = _attr(NFQA_VERDICT_HDR, _VERDICT_HDR.pack(verdict, packet_id))
    return _message(NFQNL_MSG_VERDICT, queue, attrs, seq=seq, flags=NLM_F_REQUEST)


@dataclass(frozen=True)
class NetlinkMessage:
    """One netlink message: its header's fields and what follows the header."""

    type: int
    flags: int
    seq: int
    payload: bytes


def parse_messages(data: bytes) -> Iterator[NetlinkMessage]:
    """The netlink messages of one datagram, in order; a truncated tail is left out."""
    offset = 0
    while offset + _NLMSGHDR.size <= len(data):
        length, kind, flags, seq, _ = _NLMSGHDR.unpack_from(data, offset)
        if length < _NLMSGHDR.size or offset + length > len(data):
            logger.warning("truncated netlink message at offset %d of %d bytes", offset, len(data))
            return
        yield NetlinkMessage(kind, flags, seq, data[offset + _NLMSGHDR.size : offset + length])
        offset += _align(length)


def parse_attrs(data: bytes) -> dict[int, bytes]:
    """Attribute type (flag bits cleared) to value, for a run of netlink attributes."""
    attrs: dict[int, bytes] = {}
    offset = 0
    while offset + _NLATTR.size <= len(data):
        length, kind = _NLATTR.unpack_from(data, offset)
        if length < _NLATTR.size or offset + length > len(data):
            break
        attrs[kind & NLA_TYPE_MASK] = data[offset + _NLATTR.size : offset + length]
        offset += _align(length)
    return attrs


def netlink_error(message: NetlinkMessage) -> int:
    """The errno an NLMSG_ERROR carries: 0 for an ack."""
    (error,) = struct.unpack_from("=i", message.payload)
    return -int(error)


@dataclass(frozen=True)
class QueuedPacket:
    """What the delayer reads of one NFQNL_MSG_PACKET: which queue, which packet, which hook."""

    queue: int
    packet_id: int
    hw_protocol: int
    hook: int


def parse_packet(message: NetlinkMessage) -> QueuedPacket:
    """The queue and packet id of an NFQNL_MSG_PACKET; ValueError when it is something else."""
    if message.type != (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
        raise ValueError(f"netlink message type {message.type:#x} is not an NFQNL_MSG_PACKET")
    _family, _version, queue = _NFGENMSG.unpack_from(message.payload)
    header = parse_attrs(message.payload[_NFGENMSG.size :]).get(NFQA_PACKET_HDR)
    if header is None or len(header) < _PACKET_HDR.size:
        raise ValueError("NFQNL_MSG_PACKET without its NFQA_PACKET_HDR")
    packet_id, hw_protocol, hook = _PACKET_HDR.unpack_from(header)
    return QueuedPacket(queue, packet_id, hw_protocol, hook)


# --- what is asked ---------------------------------------------------------------------------


class Jitter(StrEnum):
    """How a packet's delay is drawn around ``delay_ms``."""

    # delay ± jitter, evenly: netem's own default.
    UNIFORM = "uniform"
    # A normal distribution with jitter as its standard deviation.
    NORMAL = "normal"


@dataclass(frozen=True)
class LinkDegradation:
    """What one worker's link suffers: each sent packet is held ``delay_ms`` (± ``jitter_ms``,
    never below 0), dropped with probability ``loss_pct`` / 100, and the link is limited to
    ``rate_kbit`` (None: no limit). ConfigError in one line for a value out of range.

    With jitter, packets leave in the order of their drawn release times, so a flow's packets
    reorder, as netem's do; a jitter above the delay is clamped at 0, which raises the mean.
    """

    delay_ms: float
    jitter_ms: float = 0.0
    loss_pct: float = 0.0
    rate_kbit: int | None = None
    jitter: Jitter = Jitter.UNIFORM

    def __post_init__(self) -> None:
        for key in ("delay_ms", "jitter_ms", "loss_pct"):
            if number(getattr(self, key), key) < 0:
                raise InvalidValue(key, f"must be at least 0, got {getattr(self, key)!r}")
        if self.loss_pct > 100:
            raise InvalidValue("loss_pct", f"must be at most 100, got {self.loss_pct!r}")
        if self.rate_kbit is not None:
            if isinstance(self.rate_kbit, bool) or not isinstance(self.rate_kbit, int):
                raise InvalidValue("rate_kbit", f"must be a whole number of kbit/s, got {self.rate_kbit!r}")
            if self.rate_kbit <= 0:
                raise InvalidValue("rate_kbit", f"must be more than 0, got {self.rate_kbit!r}")

    @property
    def needs_delayer(self) -> bool:
        """Whether any packet is held or dropped (a rate limit alone is the qdisc's)."""
        return self.delay_ms > 0 or self.jitter_ms > 0 or self.loss_pct > 0

    def sample_delay_s(self, rng: random.Random) -> float:
        """One packet's delay in seconds, clamped at 0 (a jitter above the delay skews it up)."""
        if self.jitter_ms == 0:
            return self.delay_ms / 1000
        if self.jitter == Jitter.NORMAL:
            drawn = rng.gauss(self.delay_ms, self.jitter_ms)
        else:
            drawn = rng.uniform(self.delay_ms - self.jitter_ms, self.delay_ms + self.jitter_ms)
        return max(0.0, drawn) / 1000


# --- argv builders ---------------------------------------------------------------------------


def missing_tools(tools: Sequence[str] = tuple(TOOLS)) -> list[str]:
    """The distribution packages to install for the binaries in ``tools`` that are not on PATH."""
    return sorted({TOOLS.get(tool, tool) for tool in tools if shutil.which(tool) is None})


def queue_number(handle_id: str) -> int:
    """The NFQUEUE number of one injection: from its id, so a second delayer on the same
    namespace fails to bind (EBUSY) rather than sharing the queue. 0 is left to others."""
    return 1 + zlib.crc32(handle_id.encode()) % 0xFFFF


def rule_comment(handle_id: str) -> str:
    """The comment that names one injection's rule in ``iptables -S``."""
    return f"inferchaos:{handle_id}"


def nfqueue_commands(namespace: str, handle_id: str, iptables: str = IPTABLES) -> tuple[Command, Command]:
    """(append, delete) argv of the rule that queues what ``namespace`` sends on its link to the
    injection's queue. The delete names the same rule by its whole spec, comment included, so it
    removes that rule and no other. ``iptables``: the binary (``iptables-nft`` where the kernel
    has NFT_COMPAT but no legacy xtables; apply and revert must use the same one)."""
    spec = [
        "-o",
        NS_IFACE,
        "-m",
        "comment",
        "--comment",
        rule_comment(handle_id),
        "-j",
        "NFQUEUE",
        "--queue-num",
        str(queue_number(handle_id)),
        "--queue-bypass",
    ]
    base = ["ip", "netns", "exec", namespace, iptables, "-w", "5", "-t", TABLE]
    return [*base, "-A", CHAIN, *spec], [*base, "-D", CHAIN, *spec]


def tbf_handle(handle_id: str) -> str:
    """The root qdisc handle of one injection (``major:``): a delete that names it removes that
    qdisc only, where a bare ``root`` would remove whatever sits there."""
    # Majors 1..0xfffe: 0 is "let the kernel pick" and 0xffff is the ingress qdisc's.
    return f"{1 + zlib.crc32(handle_id.encode()) % 0xFFFE:x}:"


def tbf_commands(namespace: str, handle_id: str, rate_kbit: int) -> tuple[Command, Command]:
    """(add, delete) argv of a TBF qdisc limiting ``namespace``'s ``eth0`` egress to ``rate_kbit``.

    The bucket holds 10 ms of the rate, and at least two full frames, so a lone packet is never
    larger than the bucket; a packet waits at most 200 ms in it before it is dropped, which is
    what a router's buffer on a slow link does.
    """
    burst = max(rate_kbit * 1000 // 8 // 100, 2 * 1514)
    base = ["ip", "netns", "exec", namespace, "tc", "qdisc"]
    where = ["dev", NS_IFACE, "root", "handle", tbf_handle(handle_id)]
    return (
        [*base, "add", *where, "tbf", "rate", f"{rate_kbit}kbit", "burst", str(burst), "latency", "200ms"],
        [*base, "del", *where],
    )


def delayer_argv(
    namespace: str, queue: int, degradation: LinkDegradation, *, python: str = sys.executable
) -> Command:
    """The argv that runs the delayer for ``queue`` inside ``namespace`` (``ip netns exec`` execs
    it, so the pid started is the delayer's own)."""
    return [
        "ip",
        "netns",
        "exec",
        namespace,
        python,
        "-m",
        MODULE,
        "--queue",
        str(queue),
        "--delay-ms",
        repr(float(degradation.delay_ms)),
        "--jitter-ms",
        repr(float(degradation.jitter_ms)),
        "--loss-pct",
        repr(float(degradation.loss_pct)),
        "--jitter",
        degradation.jitter.value,
    ]


# --- running them ----------------------------------------------------------------------------

# What `ip netns exec`, iptables and tc say about a thing a revert finds gone already: the
# namespace torn down; a rule not there (legacy says the first, iptables-nft the second); a
# qdisc not there, or another one at the root ("Invalid handle": the handle is not ours).
GONE = (
    "Cannot open network namespace",
    "No such file or directory",
    "No chain/target/match by that name",
    "does a matching rule exist",
    "Cannot find device",
    "Invalid handle",
)


def bound_queues(namespace: str) -> set[int]:
    """The queue numbers a process has bound inside ``namespace``
    (/proc/net/netfilter/nfnetlink_queue, read from inside it)."""
    argv = ["ip", "netns", "exec", namespace, "cat", "/proc/net/netfilter/nfnetlink_queue"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    if done.returncode != 0:
        return set()
    return {int(line.split()[0]) for line in done.stdout.splitlines() if line.split()}


@dataclass(frozen=True)
class AppliedDegradation:
    """What one injection made on one namespace: enough for its revert, also from a ledger."""

    namespace: str
    handle_id: str
    rate_kbit: int | None
    # The delayer's pid and start time (a pid is reused); None when nothing is held or dropped.
    delayer_pid: int | None = None
    delayer_started: float | None = None
    iptables: str = IPTABLES


def apply_link_degradation(
    namespace: str,
    handle_id: str,
    degradation: LinkDegradation,
    log_path: Path,
    env: Mapping[str, str],
    *,
    bind_timeout_s: float = 10.0,
    iptables: str = IPTABLES,
) -> AppliedDegradation:
    """Degrade ``namespace``'s link: start the delayer (its own process group, output to
    ``log_path``) and wait until it has bound its queue, then add the rule that feeds it, then
    the qdisc. Whatever was made is removed again when a later step fails (NetnsError)."""
    applied = AppliedDegradation(namespace, handle_id, degradation.rate_kbit, iptables=iptables)
    try:
        if degradation.needs_delayer:
            queue = queue_number(handle_id)
            pid = spawn_process_group(delayer_argv(namespace, queue, degradation), env, log_path)
            try:
                started = psutil.Process(pid).create_time()
            except psutil.NoSuchProcess as e:
                raise NetnsError(f"the delayer for {namespace} exited at once; see {log_path}") from e
            applied = AppliedDegradation(namespace, handle_id, degradation.rate_kbit, pid, started, iptables)
            # The rule goes in only once the queue is bound: with --queue-bypass nothing would be
            # delayed before then, and a measurement starting at once would see a clean link.
            deadline = time.monotonic() + bind_timeout_s
            while queue not in bound_queues(namespace):
                if time.monotonic() > deadline or same_process(pid, started) is None:
                    raise NetnsError(
                        f"the delayer for queue {queue} in {namespace} did not bind; see {log_path}"
                    )
                time.sleep(0.05)
            run_commands([nfqueue_commands(namespace, handle_id, iptables)[0]])
        if degradation.rate_kbit is not None:
            run_commands([tbf_commands(namespace, handle_id, degradation.rate_kbit)[0]])
    except NetnsError:
        revert_link_degradation(applied)
        raise
    return applied


def revert_link_degradation(applied: AppliedDegradation, grace_s: float = 5.0) -> None:
    """Remove what :func:`apply_link_degradation` made, each piece tolerating its absence: the rule
    first (so nothing more is queued), then the delayer (which lets what it holds go on SIGTERM),
    then the qdisc."""
    delete_rule = nfqueue_commands(applied.namespace, applied.handle_id, applied.iptables)[1]
    run_commands([delete_rule], tolerate_gone=True, gone=GONE)
    if applied.delayer_pid is not None and applied.delayer_started is not None:
        proc = same_process(applied.delayer_pid, applied.delayer_started)
        if proc is not None:
            end_processes([proc], grace_s=grace_s)
    if applied.rate_kbit is not None:
        delete = tbf_commands(applied.namespace, applied.handle_id, applied.rate_kbit)[1]
        run_commands([delete], tolerate_gone=True, gone=GONE)


# --- the delayer -----------------------------------------------------------------------------


class Delayer:
    """Holds each packet of one queue for its drawn delay, then accepts it (or drops it at once).

    One thread: a heap of (release time, packet id) and a select() whose timeout is the next
    release, so no packet waits on another's timer.
    """

    def __init__(self, queue: int, degradation: LinkDegradation, rng: random.Random | None = None) -> None:
        self.queue = queue
        self.degradation = degradation
        self.rng = rng or random.Random()
        self.held: list[tuple[float, int]] = []
        self.accepted = 0
        self.dropped = 0
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, _SO_RCVBUFFORCE, RCVBUF_BYTES)
        except PermissionError:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF_BYTES)
        self.sock.bind((0, 0))
        self._seq = 0

    def _request(self, message: bytes) -> None:
        """Send one config message and wait for its ack; NetnsError with the kernel's errno."""
        self.sock.sendto(message, (0, 0))
        (_, _, _, seq, _) = _NLMSGHDR.unpack_from(message)
        self.sock.settimeout(5.0)
        try:
            while True:
                for reply in parse_messages(self.sock.recv(65536)):
                    if reply.type == NLMSG_ERROR and reply.seq == seq:
                        if code := netlink_error(reply):
                            raise NetnsError(
                                f"queue {self.queue}: config refused: {errno.errorcode.get(code, code)}"
                            )
                        return
        finally:
            self.sock.settimeout(None)

    def bind(self) -> None:
        """Bind the queue to this socket (EBUSY when another process holds it)."""
        self._seq += 1
        self._request(bind_message(self.queue, seq=self._seq))
        logger.info("bound queue %d: %s", self.queue, self.degradation)

    def _verdict(self, packet_id: int, verdict: int) -> None:
        try:
            self.sock.send(verdict_message(self.queue, packet_id, verdict))
        except OSError as e:
            logger.warning("verdict for packet %d not sent: %s", packet_id, e)

    def _receive(self, now: float) -> None:
        """Read every message waiting on the socket: hold or drop each packet."""
        while True:
            try:
                data = self.sock.recv(65536, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return
            except OSError as e:
                if e.errno != errno.ENOBUFS:
                    raise
                # The kernel could not deliver some packets' messages: they stay queued with no
                # verdict until the queue is unbound. Say so; the rest keeps flowing.
                logger.warning("receive buffer overrun (ENOBUFS): some packets were not seen")
                continue
            for message in parse_messages(data):
                if message.type == NLMSG_ERROR:
                    if code := netlink_error(message):
                        logger.debug("kernel refused a verdict: %s", errno.errorcode.get(code, code))
                    continue
                try:
                    packet = parse_packet(message)
                except ValueError as e:
                    logger.debug("ignored: %s", e)
                    continue
                if self.degradation.loss_pct and self.rng.random() * 100 < self.degradation.loss_pct:
                    self._verdict(packet.packet_id, NF_DROP)
                    self.dropped += 1
                else:
                    heapq.heappush(
                        self.held, (now + self.degradation.sample_delay_s(self.rng), packet.packet_id)
                    )

    def _release(self, now: float) -> None:
        while self.held and self.held[0][0] <= now:
            _, packet_id = heapq.heappop(self.held)
            self._verdict(packet_id, NF_ACCEPT)
            self.accepted += 1

    def run(self, stop: socket.socket) -> None:
        """Serve the queue until ``stop`` is readable, then accept what is still held and unbind."""
        while True:
            timeout = None if not self.held else max(0.0, self.held[0][0] - time.monotonic())
            readable, _, _ = select.select([self.sock, stop], [], [], timeout)
            if stop in readable:
                break
            if self.sock in readable:
                self._receive(time.monotonic())
            self._release(time.monotonic())
        # Let what is held (and what has arrived meanwhile) go now: unbinding drops every packet
        # still queued without a verdict, and a stopped fault should leave a clean link, not a loss.
        self._receive(time.monotonic())
        self._release(float("inf"))
        self._seq += 1
        try:
            self._request(unbind_message(self.queue, seq=self._seq))
        except (NetnsError, OSError) as e:
            logger.warning("unbind of queue %d: %s (closing the socket unbinds it)", self.queue, e)
        self.sock.close()
        logger.info("queue %d done: %d accepted, %d dropped", self.queue, self.accepted, self.dropped)


def _parse_args(argv: Sequence[str] | None) -> tuple[int, LinkDegradation]:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__.split("\n")[0])
    parser.add_argument("--queue", type=int, required=True, help="NFQUEUE number to bind (1-65535)")
    parser.add_argument("--delay-ms", type=float, default=0.0)
    parser.add_argument("--jitter-ms", type=float, default=0.0)
    parser.add_argument("--loss-pct", type=float, default=0.0)
    parser.add_argument("--jitter", choices=[j.value for j in Jitter], default=Jitter.UNIFORM.value)
    args = parser.parse_args(argv)
    if not 0 <= args.queue <= 0xFFFF:
        raise InvalidValue("--queue", f"must be 0-65535, got {args.queue}")
    return args.queue, LinkDegradation(
        args.delay_ms, args.jitter_ms, args.loss_pct, None, Jitter(args.jitter)
    )


def main(argv: Sequence[str] | None = None) -> Literal[0, 1, 2]:
    """The delayer's entry point: bind, serve until SIGTERM or SIGINT, exit 0."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        queue, degradation = _parse_args(argv)
    except ConfigError as e:
        logger.error("%s", e)
        return 2
    # The signal only writes a byte to this pair; select() sees it, so the loop ends between
    # packets and never inside a verdict.
    stop, wake = socket.socketpair()
    wake.setblocking(False)
    signal.set_wakeup_fd(wake.fileno(), warn_on_full_buffer=False)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    try:
        delayer = Delayer(queue, degradation)
        delayer.bind()
    except (NetnsError, OSError) as e:
        logger.error("queue %d: %s", queue, e)
        return 1
    delayer.run(stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
