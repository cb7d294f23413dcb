"""The link degradation's parameters, its argv builders, and the nfnetlink_queue messages the
delayer sends and reads (built here byte by byte from the kernel's headers, not by the module)."""

from __future__ import annotations

import random
import socket
import struct
import sys

import pytest

from inferchaos.errors import ConfigError
from inferchaos.primitives.link_delay import (
    NF_ACCEPT,
    NF_DROP,
    NLMSG_ERROR,
    Jitter,
    LinkDegradation,
    NetlinkMessage,
    QueuedPacket,
    bind_message,
    delayer_argv,
    main,
    missing_tools,
    netlink_error,
    nfqueue_commands,
    parse_attrs,
    parse_messages,
    parse_packet,
    queue_number,
    tbf_commands,
    tbf_handle,
    verdict_message,
)

NS = "inferchaos-abc-w0"
# (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_*
PACKET_TYPE, VERDICT_TYPE, CONFIG_TYPE = 0x300, 0x301, 0x302


def _nlattr(kind: int, value: bytes) -> bytes:
    length = 4 + len(value)
    return struct.pack("=HH", length, kind) + value + b"\0" * (-length % 4)


def _packet_message(queue: int, packet_id: int, *, seq: int = 0) -> bytes:
    """An NFQNL_MSG_PACKET as the kernel sends one in copy-meta mode for a locally sent IPv4 packet:
    nfgenmsg, NFQA_PACKET_HDR (id, ETH_P_IP, hook 3 = LOCAL_OUT), an NFQA_MARK and an outdev
    index whose type carries the byte-order flag, as the kernel's do."""
    body = (
        struct.pack("!BBH", socket.AF_INET, 0, queue)
        + _nlattr(1, struct.pack("!IHB", packet_id, 0x0800, 3))
        + _nlattr(3, struct.pack("!I", 0))
        + _nlattr(6 | 0x4000, struct.pack("!I", 2))
    )
    return struct.pack("=IHHII", 16 + len(body), PACKET_TYPE, 0, seq, 0) + body


def _ack(seq: int, error: int = 0) -> bytes:
    body = struct.pack("=i", error) + struct.pack("=IHHII", 16, CONFIG_TYPE, 5, seq, 0)
    return struct.pack("=IHHII", 16 + len(body), NLMSG_ERROR, 0, seq, 0) + body


def test_a_packet_message_from_the_kernel_gives_its_queue_and_packet_id() -> None:
    (message,) = parse_messages(_packet_message(4242, 0xDEADBEEF, seq=9))
    assert (message.type, message.seq) == (PACKET_TYPE, 9)
    assert parse_packet(message) == QueuedPacket(queue=4242, packet_id=0xDEADBEEF, hw_protocol=0x0800, hook=3)
    # The byte-order flag on an attribute's type is not part of the type.
    assert set(parse_attrs(message.payload[4:])) == {1, 3, 6}


def test_one_datagram_holds_several_messages_and_an_ack_or_a_refusal_reads_as_an_errno() -> None:
    data = _packet_message(1, 7) + _ack(seq=3) + _packet_message(1, 8) + _ack(seq=4, error=-16)
    messages = list(parse_messages(data))
    assert [m.type for m in messages] == [PACKET_TYPE, NLMSG_ERROR, PACKET_TYPE, NLMSG_ERROR]
    assert [parse_packet(m).packet_id for m in messages if m.type == PACKET_TYPE] == [7, 8]
    assert [netlink_error(m) for m in messages if m.type == NLMSG_ERROR] == [0, 16]  # 16: EBUSY
    # A datagram cut short keeps the whole messages before the cut.
    assert len(list(parse_messages(data[: len(_packet_message(1, 7)) + 10]))) == 1


def test_a_message_that_is_not_a_packet_or_lacks_its_header_is_refused() -> None:
    with pytest.raises(ValueError, match="not an NFQNL_MSG_PACKET"):
        parse_packet(NetlinkMessage(NLMSG_ERROR, 0, 0, b"\0" * 20))
    with pytest.raises(ValueError, match="without its NFQA_PACKET_HDR"):
        parse_packet(NetlinkMessage(PACKET_TYPE, 0, 0, struct.pack("!BBH", socket.AF_INET, 0, 1)))


@pytest.mark.parametrize("verdict", [NF_ACCEPT, NF_DROP])
def test_a_verdict_is_one_request_naming_the_queue_the_packet_and_the_verdict(verdict: int) -> None:
    data = verdict_message(513, 0x01020304, verdict, seq=5)
    length, kind, flags, seq, portid = struct.unpack_from("=IHHII", data)
    assert (length, kind, flags, seq, portid) == (len(data), VERDICT_TYPE, 0x1, 5, 0)  # NLM_F_REQUEST
    assert struct.unpack_from("!BBH", data, 16) == (socket.AF_UNSPEC, 0, 513)
    # NFQA_VERDICT_HDR: its length, type 2, then the verdict and the packet id, big-endian.
    assert struct.unpack_from("=HH", data, 20) == (12, 2)
    assert struct.unpack_from("!II", data, 24) == (verdict, 0x01020304)
    assert len(data) == 32


def test_the_bind_asks_for_an_ack_and_copies_metadata_only() -> None:
    data = bind_message(77, seq=1)
    _, kind, flags, _, _ = struct.unpack_from("=IHHII", data)
    assert (kind, flags) == (CONFIG_TYPE, 0x1 | 0x4)  # NLM_F_REQUEST | NLM_F_ACK
    assert struct.unpack_from("!BBH", data, 16)[2] == 77
    attrs = parse_attrs(data[20:])
    assert struct.unpack("!BxH", attrs[1]) == (1, socket.AF_INET)  # NFQNL_CFG_CMD_BIND
    assert struct.unpack("!IB", attrs[2]) == (0, 1)  # copy_range 0, NFQNL_COPY_META
    assert struct.unpack("!I", attrs[4]) == struct.unpack("!I", attrs[5]) == (4,)  # NFQA_CFG_F_GSO


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"delay_ms": -1}, "delay_ms: must be at least 0, got -1"),
        ({"delay_ms": 10, "jitter_ms": -0.5}, "jitter_ms: must be at least 0, got -0.5"),
        ({"delay_ms": 10, "loss_pct": 100.5}, "loss_pct: must be at most 100, got 100.5"),
        ({"delay_ms": 10, "loss_pct": -1}, "loss_pct: must be at least 0, got -1"),
        ({"delay_ms": 10, "rate_kbit": 0}, "rate_kbit: must be more than 0, got 0"),
        ({"delay_ms": 10, "rate_kbit": 1.5}, "rate_kbit: must be a whole number of kbit/s, got 1.5"),
        ({"delay_ms": float("nan")}, "delay_ms: must be a finite number, got nan"),
        ({"delay_ms": "50"}, "delay_ms: must be a number, got str '50'"),
    ],
)
def test_a_degradation_out_of_range_is_one_line_naming_its_key(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError) as error:
        LinkDegradation(**kwargs)  # type: ignore[arg-type]
    assert str(error.value) == message


def test_the_bounds_themselves_are_valid_and_a_rate_alone_needs_no_delayer() -> None:
    assert LinkDegradation(0, 0, 100).needs_delayer
    assert LinkDegradation(0, 0, 0, rate_kbit=1).needs_delayer is False
    assert LinkDegradation(0, jitter_ms=1).needs_delayer


def test_a_drawn_delay_stays_within_its_jitter_and_never_goes_below_zero() -> None:
    rng = random.Random(1)
    assert LinkDegradation(200).sample_delay_s(rng) == 0.2
    uniform = [LinkDegradation(50, 20).sample_delay_s(rng) for _ in range(2000)]
    assert 0.030 <= min(uniform) < 0.032 and 0.068 < max(uniform) <= 0.070
    normal = [LinkDegradation(5, 10, jitter=Jitter.NORMAL).sample_delay_s(rng) for _ in range(2000)]
    assert min(normal) == 0.0 and max(normal) > 0.025


def test_the_rule_and_its_delete_are_the_same_spec_named_after_the_injection() -> None:
    append, delete = nfqueue_commands(NS, "inj-1")
    queue = str(queue_number("inj-1"))
    assert append == [
        "ip",
        "netns",
        "exec",
        NS,
        "iptables-legacy",
        "-w",
        "5",
        "-t",
        "mangle",
        "-A",
        "OUTPUT",
        "-o",
        "eth0",
        "-m",
        "comment",
        "--comment",
        "inferchaos:inj-1",
        "-j",
        "NFQUEUE",
        "--queue-num",
        queue,
        "--queue-bypass",
    ]
    assert delete == [*append[:9], "-D", *append[10:]]
    assert nfqueue_commands(NS, "inj-1", "iptables-nft")[0][4] == "iptables-nft"
    # Two injections get two queues (a second delayer on one namespace cannot share the first's).
    assert 1 <= queue_number("inj-1") <= 0xFFFF and queue_number("inj-1") != queue_number("inj-2")


def test_the_qdisc_and_its_delete_name_the_injections_handle() -> None:
    add, delete = tbf_commands(NS, "inj-1", 8000)
    handle = tbf_handle("inj-1")
    assert add == [
        "ip",
        "netns",
        "exec",
        NS,
        "tc",
        "qdisc",
        "add",
        "dev",
        "eth0",
        "root",
        "handle",
        handle,
        "tbf",
        "rate",
        "8000kbit",
        "burst",
        "10000",
        "latency",
        "200ms",
    ]
    assert delete == [*add[:6], "del", *add[7:12]]
    # A slow link's bucket still holds two full frames.
    assert tbf_commands(NS, "inj-1", 100)[0][16] == "3028"
    major = int(handle.rstrip(":"), 16)
    assert 1 <= major <= 0xFFFE and handle != tbf_handle("inj-2")


def test_the_delayer_runs_by_module_inside_the_namespace_with_what_was_asked() -> None:
    argv = delayer_argv(NS, 12, LinkDegradation(200, 5, 1.5, jitter=Jitter.NORMAL))
    assert argv == [
        "ip",
        "netns",
        "exec",
        NS,
        sys.executable,
        "-m",
        "inferchaos.primitives.link_delay",
        "--queue",
        "12",
        "--delay-ms",
        "200.0",
        "--jitter-ms",
        "5.0",
        "--loss-pct",
        "1.5",
        "--jitter",
        "normal",
    ]


def test_the_delayer_refuses_bad_arguments_before_it_binds_anything() -> None:
    assert main(["--queue", "70000"]) == 2
    assert main(["--queue", "1", "--loss-pct", "101"]) == 2


def test_a_missing_binary_names_its_package() -> None:
    assert missing_tools(("inferchaos-no-such-tool",)) == ["inferchaos-no-such-tool"]
    assert missing_tools(("sh",)) == []
