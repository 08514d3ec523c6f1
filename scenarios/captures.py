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
EPOCH = 10_000_000


def capture_times(path):
    """Every packet timestamp of a pcap (microsecond or nanosecond magic), in ns."""
    out = []
    with open(path, "rb") as f:
        magic = struct.unpack("<I", f.read(24)[:4])[0]
        scale = 1 if magic == 0xA1B23C4D else 1000
        while (rec := f.read(16)) and len(rec) == 16:
            sec, frac, incl, _ = struct.unpack("<IIII", rec)
            out.append(sec * 10**9 + frac * scale)
            f.seek(incl, 1)
    return out


def fuzzy_boundaries(times):
    """The epoch boundaries with a packet within SKEW of them."""
    fuzzy = set()
    for t in times:
        b = (t + EPOCH // 2) // EPOCH * EPOCH
        if abs(t - b) < SKEW:
            fuzzy.add(b)
    return fuzzy
