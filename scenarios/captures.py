"""What the live scenarios (live.sh, agents.sh) read of captures, to compare
a live run with a run on tcpdump's capture of the same traffic."""
import struct

# TCP segments between namespaces carry the sender's departure time (a
# monotonic EDT stamp), which packet sockets do not use: each capture reads
# the clock itself when the segment reaches it, so Clarion's and tcpdump's
# timestamps of a segment differ by about a microsecond (other packets are
# stamped once, in the stack, and agree to the nanosecond). A packet within
# SKEW of an epoch boundary may therefore fall on either side of it.
SKEW = 20_000
# On a shared virtual machine the CPU can be taken away between the two
# captures' reads of the clock (steal time), so a TCP segment's two stamps
# can be far more apart: a segment 1 ms at most from a boundary may also
# fall on either side of it (seen on CI, 26 Nov 2026: one iperf segment
# counted in the epochs on both sides of a boundary, none within 20 us).
TCP_SKEW = 1_000_000
EPOCH = 10_000_000


def packets(path):
    """Every packet of a pcap (microsecond or nanosecond magic): its
    timestamp in ns and its captured bytes."""
    with open(path, "rb") as f:
        magic = struct.unpack("<I", f.read(24)[:4])[0]
        scale = 1 if magic == 0xA1B23C4D else 1000
        while (rec := f.read(16)) and len(rec) == 16:
            sec, frac, incl, _ = struct.unpack("<IIII", rec)
            yield sec * 10**9 + frac * scale, f.read(incl)


def capture_times(path):
    """Every packet timestamp of a pcap, in ns."""
    return [t for t, _ in packets(path)]


def tcp_times(path):
    """The timestamps (ns) of an Ethernet pcap's TCP segments (IPv4 and IPv6)."""
    out = []
    for t, data in packets(path):
        ethertype = data[12:14]
        proto = data[23:24] if ethertype == b"\x08\x00" else data[20:21] if ethertype == b"\x86\xdd" else b""
        if proto == b"\x06":
            out.append(t)
    return out


def fuzzy_boundaries(times, tcp=()):
    """The epoch boundaries with a packet within SKEW of them, or a TCP
    segment (of `tcp`) within TCP_SKEW."""
    fuzzy = set()
    for ts, skew in ((times, SKEW), (tcp, TCP_SKEW)):
        for t in ts:
            b = (t + EPOCH // 2) // EPOCH * EPOCH
            if abs(t - b) < skew:
                fuzzy.add(b)
    return fuzzy
