#!/usr/bin/env python3
"""Pins down how tshark's TCP analysis labels segments and picks RTT samples.

Crafts a small pcap of one TCP connection (client 10.0.128.11:40000 ->
server 10.20.93.10:5201) in which each case below happens at a known time,
runs tshark on it and checks every expectation; prints one line per case.
Needs only python3 and tshark; no root, no network.

Usage: scenarios/tshark-rules.py [--keep FILE.pcap]

The cases (times in ms after the SYN; the handshake RTT is 1 ms):
  A  two segments sent at 10 and 12, one ACK for both at 20
  B  a segment sent at 30, retransmitted at 60, ACKed at 65
  C  a segment sent at 70, ACKed half-way at 75, fully at 80
  D  a keep-alive (1 byte, seq = next - 1) and a bare one (0 bytes)
  E  two segments sent 0.5 ms apart in reverse sequence order
  F  a fast retransmission after three duplicate ACKs
  G  a segment resent after it was ACKed (spurious)
  H  zero-window probes (1 new byte while the peer's window is 0), twice
  I  a cumulative ACK whose number ends no segment (SACK-style repacketising)
  J  E again, 2 ms apart, on a second connection (client port 40001)
"""
import os
import struct
import subprocess
import sys
import tempfile

CLI, SRV = bytes([10, 0, 128, 11]), bytes([10, 20, 93, 10])
CPORT, SPORT = 40000, 5201
CISN, SISN = 1000000, 5000000
SYN, ACK, PSH, FIN = 0x02, 0x10, 0x08, 0x01


def csum(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def frame(src, dst, sport, dport, seq, ack, flags, payload=0, win=1000):
    data = b"x" * payload
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF,
                      5 << 4, flags, win, 0, 0) + data
    pseudo = src + dst + struct.pack("!BBH", 0, 6, len(tcp))
    c = csum(pseudo + tcp)
    tcp = tcp[:16] + struct.pack("!H", c) + tcp[18:]
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 1, 0x4000, 64, 6, 0, src, dst)
    ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
    eth = bytes.fromhex("020000000002" "020000000001") + b"\x08\x00"
    return eth + ip + tcp


class Trace:
    def __init__(self):
        self.frames = []  # (t_ms, bytes, label)

    cport = CPORT

    def c(self, t, rel_seq, rel_ack, flags, payload=0, label="", win=1000):
        """Client -> server; rel_* are relative to the ISNs (SYN = 0)."""
        self.frames.append((t, frame(CLI, SRV, self.cport, SPORT, CISN + rel_seq, SISN + rel_ack,
                                     flags, payload, win), label))

    def s(self, t, rel_seq, rel_ack, flags, payload=0, label="", win=1000):
        self.frames.append((t, frame(SRV, CLI, SPORT, self.cport, SISN + rel_seq, CISN + rel_ack,
                                     flags, payload, win), label))

    def write(self, path):
        base = 1_700_000_000 * 1_000_000  # microseconds
        with open(path, "wb") as f:
            f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
            for t, data, _ in self.frames:
                us = base + round(t * 1000)
                f.write(struct.pack("<IIII", us // 1_000_000, us % 1_000_000, len(data), len(data)))
                f.write(data)


def build():
    tr = Trace()
    tr.c(0.0, 0, 0, SYN)
    tr.s(1.0, 0, 1, SYN | ACK)
    tr.c(1.0, 1, 1, ACK)
    # A: one ACK covers two segments sent at 10 and 12 ms.
    tr.c(10, 1, 1, ACK | PSH, 1000, "A seg1")
    tr.c(12, 1001, 1, ACK | PSH, 1000, "A seg2")
    tr.s(20, 1, 2001, ACK, 0, "A ack")
    # B: sent at 30, retransmitted (same bytes) at 60, ACKed at 65.
    tr.c(30, 2001, 1, ACK | PSH, 1000, "B orig")
    tr.c(60, 2001, 1, ACK | PSH, 1000, "B rexmit")
    tr.s(65, 1, 3001, ACK, 0, "B ack")
    # C: ACK in the middle of a segment, then at its end.
    tr.c(70, 3001, 1, ACK | PSH, 1000, "C seg")
    tr.s(75, 1, 3501, ACK, 0, "C half ack")
    tr.s(80, 1, 4001, ACK, 0, "C full ack")
    # D: keep-alives: the last byte again, and 0 bytes at next - 1.
    tr.c(100, 4000, 1, ACK, 1, "D keepalive 1B")
    tr.s(100.5, 1, 4001, ACK, 0, "D ka ack")
    tr.c(101, 4000, 1, ACK, 0, "D keepalive 0B")
    tr.s(101.5, 1, 4001, ACK, 0, "D ka ack 2")
    # E: [5001,6001) is seen before [4001,5001), 0.5 ms apart.
    tr.c(110, 5001, 1, ACK | PSH, 1000, "E later seg first")
    tr.c(110.5, 4001, 1, ACK | PSH, 1000, "E earlier seg second")
    tr.s(120, 1, 6001, ACK, 0, "E ack")
    # F: fast retransmission of [6001,7001) after three duplicate ACKs.
    tr.c(130, 6001, 1, ACK | PSH, 1000, "F seg7")
    tr.c(131, 7001, 1, ACK | PSH, 1000, "F seg8")
    tr.c(132, 8001, 1, ACK | PSH, 1000, "F seg9")
    tr.s(135, 1, 6001, ACK, 0, "F dup1")
    tr.s(136, 1, 6001, ACK, 0, "F dup2")
    tr.s(137, 1, 6001, ACK, 0, "F dup3")
    tr.c(138, 6001, 1, ACK | PSH, 1000, "F fast rexmit")
    tr.s(145, 1, 9001, ACK, 0, "F ack")
    # G: [7001,8001) again, after 9001 was ACKed.
    tr.c(150, 7001, 1, ACK | PSH, 1000, "G spurious")
    # H: the server closes its window; the client probes with 1 new byte, twice.
    tr.s(160, 1, 9001, ACK, 0, "H zero window", win=0)
    tr.c(170, 9001, 1, ACK, 1, "H probe 1")
    tr.s(171, 1, 9001, ACK, 0, "H probe ack", win=0)
    tr.c(180, 9001, 1, ACK, 1, "H probe 2")
    tr.s(181, 1, 9002, ACK, 0, "H open", win=1000)
    # I: segments [9002,10002) at 190 and [10002,11002) at 192; ACK 10502.
    tr.c(190, 9002, 1, ACK | PSH, 1000, "I seg1")
    tr.c(192, 10002, 1, ACK | PSH, 1000, "I seg2")
    tr.s(200, 1, 10502, ACK, 0, "I ack mid seg2")
    tr.s(210, 1, 11002, ACK, 0, "I ack end seg2")
    tr.c(220, 11002, 1, ACK | FIN, 0, "fin")
    tr.s(221, 1, 11003, ACK | FIN, 0, "fin")
    tr.c(222, 11003, 2, ACK, 0, "last ack")
    # J: a second connection (client port 40001), handshake RTT 1 ms again;
    # two segments seen in reverse sequence order 2 ms apart (more than the
    # handshake RTT, less than tshark's 3 ms default).
    tr.cport = CPORT + 1
    tr.c(300, 0, 0, SYN)
    tr.s(301, 0, 1, SYN | ACK)
    tr.c(301, 1, 1, ACK)
    tr.c(310, 1001, 1, ACK | PSH, 1000, "J later seg first")
    tr.c(312, 1, 1, ACK | PSH, 1000, "J earlier seg second")
    tr.s(320, 1, 2001, ACK, 0, "J ack")
    return tr


FIELDS = ["frame.number", "tcp.analysis.retransmission", "tcp.analysis.fast_retransmission",
          "tcp.analysis.spurious_retransmission", "tcp.analysis.out_of_order",
          "tcp.analysis.keep_alive", "tcp.analysis.zero_window_probe",
          "tcp.analysis.ack_rtt", "tcp.analysis.acks_frame"]
SHORT = ["retr", "fast", "spur", "ooo", "ka", "zwp"]


def main():
    keep = None
    if len(sys.argv) == 3 and sys.argv[1] == "--keep":
        keep = sys.argv[2]
    elif len(sys.argv) != 1:
        sys.exit(__doc__)
    tr = build()
    path = keep or tempfile.mkstemp(suffix=".pcap")[1]
    try:
        tr.write(path)
        cmd = ["tshark", "-r", path, "-T", "fields", "-E", "separator=,", "-E", "occurrence=f"]
        for f in FIELDS:
            cmd += ["-e", f]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    finally:
        if not keep:
            os.unlink(path)
    rows = {}
    for line in out.splitlines():
        v = line.split(",")
        n = int(v[0])
        flags = [s for s, x in zip(SHORT, v[1:7]) if x]
        rtt = float(v[7]) * 1000 if v[7] else None
        rows[n] = (flags, rtt, int(v[8]) if v[8] else None)
    by_label = {}
    for i, (t, _, label) in enumerate(tr.frames, 1):
        flags, rtt, acked = rows[i]
        by_label[label] = (i, t, flags, rtt, acked)
        note = " ".join(flags) or "-"
        r = "" if rtt is None else f" ack_rtt={rtt:.3f}ms acks_frame={acked}"
        if label:
            print(f"frame {i:2d} t={t:6.1f}ms {label:22s} flags: {note}{r}")

    def rtt(label):
        return by_label[label][3]

    def flags(label):
        return set(by_label[label][2])

    checks = [
        ("A: one ACK for two segments measures from the LATER one (the segment "
         "whose end equals the ACK number): 20-12 = 8 ms, not 20-10",
         abs(rtt("A ack") - 8.0) < 1e-6),
        ("B: an ACK for retransmitted data measures from the ORIGINAL send (no Karn): "
         "65-30 = 35 ms", abs(rtt("B ack") - 35.0) < 1e-6),
        ("C: an ACK that ends inside a segment gives no ack_rtt; the later full ACK "
         "measures from the segment's send: 80-70 = 10 ms",
         rtt("C half ack") is None and abs(rtt("C full ack") - 10.0) < 1e-6),
        ("D: keep-alives (1 byte or 0 bytes at next-1) are keep_alive, not retransmission",
         flags("D keepalive 1B") == {"ka"} and flags("D keepalive 0B") == {"ka"}),
        ("E: a segment below the highest sequence seen, within the handshake RTT "
         "(1 ms here; 3 ms when unknown) of it, is out_of_order, not retransmission",
         flags("E earlier seg second") == {"ooo"}),
        ("E: the ACK covering both measures from the segment ending at the ACK "
         "number (sent at 110): 120-110 = 10 ms", abs(rtt("E ack") - 10.0) < 1e-6),
        ("J: the out-of-order window is the handshake RTT seen in the capture, not a "
         "fixed 3 ms: 2 ms after the higher segment (handshake RTT 1 ms) is retransmission",
         flags("J earlier seg second") == {"retr"}),
        ("F: a fast retransmission carries BOTH fast_retransmission and retransmission",
         flags("F fast rexmit") == {"retr", "fast"}),
        ("F: the ACK after a fast retransmit measures from the segment ending at it "
         "(seg9 at 132): 145-132 = 13 ms", abs(rtt("F ack") - 13.0) < 1e-6),
        ("G: data already ACKed, sent again, carries BOTH spurious_retransmission and "
         "retransmission", flags("G spurious") == {"retr", "spur"}),
        ("H: 1 new byte while the peer's window is 0 is zero_window_probe, and so is "
         "its repetition (not retransmission)",
         flags("H probe 1") == {"zwp"} and flags("H probe 2") == {"zwp"}),
        ("I: a cumulative ACK ending inside a segment gives no ack_rtt even though it "
         "newly ACKs a whole earlier segment",
         rtt("I ack mid seg2") is None and abs(rtt("I ack end seg2") - 18.0) < 1e-6),
    ]
    ok = True
    print()
    for text, passed in checks:
        print(("ok   " if passed else "FAIL ") + text)
        ok &= passed
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
