#!/usr/bin/env python3
"""Traffic generators for the scenarios (run inside a namespace).

  traffic.py burst DST PORT BYTES DURATION_MS [SIZE]
      Sends BYTES of UDP payload to DST:PORT in datagrams of SIZE (default
      1400) bytes, evenly paced over DURATION_MS (busy-waiting between
      datagrams, so the pacing holds to a few microseconds). Prints JSON:
      start_ns/end_ns (CLOCK_REALTIME, like date +%s%N and the capture
      timestamps: first and last send), datagrams, bytes.
  traffic.py sink PORT IDLE_S MAX_S
      Counts datagrams arriving on PORT until IDLE_S seconds pass without
      one (after the first) or MAX_S seconds in all. Prints JSON: datagrams,
      bytes, first_ns, last_ns.
  traffic.py tcp-bursts DST PORT CHUNK PERIOD_MS BURSTY_S PACED_S PACING_BPS
      One TCP connection to DST:PORT that writes CHUNK bytes every PERIOD_MS
      (on a fixed schedule): first for BURSTY_S seconds unpaced (each chunk
      leaves at line rate, as far as the congestion window allows), then
      for PACED_S seconds paced at PACING_BPS bits/s: SO_MAX_PACING_RATE
      (the kernel paces TCP itself, no fq needed) and each chunk written in
      8 pieces spread at that rate. Each phase ends when all its data is
      ACKed. Prints JSON: src/sport, phase start times (CLOCK_REALTIME ns),
      chunks and bytes per phase, end_ns.
  traffic.py mid-epochs DST PORT EPOCHS
      For EPOCHS 10 ms epochs (aligned to Unix time, as Clarion's are),
      sends 60 UDP datagrams to DST:PORT, PORT+1 and PORT+2 (1400, 200 and
      200 bytes, in turn) and one ICMP echo request, all between 3 and 7 ms
      into the epoch: no packet comes near a boundary, so captures that
      timestamp a packet up to 3 ms apart still put it in the same epoch.
      An epoch the sender falls behind in is cut short, never overrun.
      Prints JSON: epochs, datagrams, echoes.
  traffic.py tcp-sink PORT MAX_S
      Accepts one TCP connection on PORT and reads it to the end (or for
      MAX_S seconds). Prints JSON: bytes, first_ns, last_ns.
"""
import fcntl
import json
import socket
import struct
import sys
import termios
import time


def burst(dst, port, total, duration_ms, size=1400):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    s.connect((dst, port))
    sizes = [size] * (total // size) + ([total % size] if total % size else [])
    n = len(sizes)
    step = duration_ms * 1_000_000 / max(n - 1, 1)
    payload = bytes(size)
    t0 = time.perf_counter_ns()
    start = time.time_ns()
    sent = 0
    for i, sz in enumerate(sizes):
        due = t0 + int(i * step)
        while time.perf_counter_ns() < due:
            pass
        s.send(payload[:sz])
        sent += sz
    end = time.time_ns()
    print(json.dumps({"start_ns": start, "end_ns": end, "datagrams": n, "bytes": sent}))


def icmp_echo(ident, seq):
    body = struct.pack("!BBHHH", 8, 0, 0, ident, seq) + b"clarion"
    acc = sum(struct.unpack("!%dH" % (len(body) // 2), body[: len(body) // 2 * 2]))
    if len(body) % 2:
        acc += body[-1] << 8
    while acc >> 16:
        acc = (acc & 0xFFFF) + (acc >> 16)
    return body[:2] + struct.pack("!H", ~acc & 0xFFFF) + body[4:]


def mid_epochs(dst, port, epochs):
    epoch = 10_000_000
    socks = []
    for i in range(3):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.connect((dst, port + i))
        socks.append(s)
    raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    sizes = [1400, 200, 200]
    first = (time.time_ns() // epoch + 2) * epoch
    sent = echoes = 0
    for k in range(epochs):
        base = first + k * epoch
        for j in range(61):
            due = base + 3_000_000 + j * 4_000_000 // 61
            # Sleep, never spin: on a veth the receiving side runs in this
            # CPU's softirq, which a spinning sender would hold back.
            wait = due - time.time_ns()
            if wait > 0:
                time.sleep(wait / 1e9)
            if time.time_ns() >= base + 7_000_000:
                break
            if j == 30:
                raw.sendto(icmp_echo(0x4C1E, k & 0xFFFF), (dst, 0))
                echoes += 1
            else:
                f = j % 3
                socks[f].send(bytes(sizes[f]))
                sent += 1
    print(json.dumps({"epochs": epochs, "datagrams": sent, "echoes": echoes}))


def sink(port, idle_s, max_s):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    s.bind(("0.0.0.0", port))
    deadline = time.monotonic() + max_s
    count = nbytes = 0
    first = last = None
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        s.settimeout(min(left, idle_s) if count else left)
        try:
            data = s.recv(65536)
        except socket.timeout:
            break
        now = time.time_ns()
        first = first or now
        last = now
        count += 1
        nbytes += len(data)
    print(json.dumps({"datagrams": count, "bytes": nbytes, "first_ns": first, "last_ns": last}))


SO_MAX_PACING_RATE = getattr(socket, "SO_MAX_PACING_RATE", 47)


def drain(s, limit_s=5.0):
    """Waits until the socket's send queue holds no unACKed byte."""
    t0 = time.monotonic()
    buf = bytearray(4)
    while time.monotonic() - t0 < limit_s:
        fcntl.ioctl(s.fileno(), termios.TIOCOUTQ, buf)  # SIOCOUTQ: unACKed + unsent bytes
        if struct.unpack("i", buf)[0] == 0:
            break
        time.sleep(0.002)
    return time.monotonic() - t0


def tcp_bursts(dst, port, chunk, period_ms, bursty_s, paced_s, pacing_bps):
    s = socket.create_connection((dst, port))
    data = bytes(chunk)
    out = {"src": s.getsockname()[0], "sport": s.getsockname()[1], "dst": dst, "dport": port,
           "chunk_bytes": chunk, "period_ms": period_ms}
    period = period_ms / 1000
    for phase, seconds in (("bursty", bursty_s), ("paced", paced_s)):
        pieces, gap = 1, 0.0
        if phase == "paced":
            rate = int(pacing_bps) // 8
            s.setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE, rate)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # The kernel paces within a write, but on this kernel (6.18) the
            # first write after the switch left unpaced; the application
            # spreads each chunk at the same rate too, in PIECES writes.
            pieces = PIECES
            gap = chunk / rate / pieces
            out["pacing_bytes_per_s"] = rate
            out["paced_writes_per_chunk"] = pieces
        t0 = time.monotonic()
        out[phase + "_start_ns"] = time.time_ns()
        n = 0
        while n * period < seconds:
            for k in range(pieces):
                due = t0 + n * period + k * gap
                now = time.monotonic()
                if due > now:
                    time.sleep(due - now)
                s.sendall(data[k * chunk // pieces:(k + 1) * chunk // pieces])
            n += 1
        out[phase + "_chunks"] = n
        out[phase + "_bytes"] = n * chunk
        # Wait out the period, then until every byte is ACKed (losses of the
        # last chunk recovered), so no retransmission crosses into the next
        # phase.
        time.sleep(max(0.0, t0 + n * period - time.monotonic()))
        out[phase + "_drain_s"] = round(drain(s), 3)
    s.shutdown(socket.SHUT_WR)
    s.recv(1)
    s.close()
    out["end_ns"] = time.time_ns()
    print(json.dumps(out))


PIECES = 8


def tcp_sink(port, max_s):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("0.0.0.0", port))
    ls.listen(1)
    ls.settimeout(max_s)
    c, _ = ls.accept()
    deadline = time.monotonic() + max_s
    nbytes = 0
    first = last = None
    while time.monotonic() < deadline:
        c.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            data = c.recv(1 << 20)
        except socket.timeout:
            break
        if not data:
            break
        last = time.time_ns()
        first = first or last
        nbytes += len(data)
    c.close()
    print(json.dumps({"bytes": nbytes, "first_ns": first, "last_ns": last}))


if __name__ == "__main__":
    a = sys.argv[1:]
    if a[:1] == ["burst"] and len(a) in (5, 6):
        burst(a[1], int(a[2]), int(a[3]), float(a[4]), *(int(x) for x in a[5:]))
    elif a[:1] == ["sink"] and len(a) == 4:
        sink(int(a[1]), float(a[2]), float(a[3]))
    elif a[:1] == ["tcp-bursts"] and len(a) == 8:
        tcp_bursts(a[1], int(a[2]), int(a[3]), float(a[4]), float(a[5]), float(a[6]), float(a[7]))
    elif a[:1] == ["mid-epochs"] and len(a) == 4:
        mid_epochs(a[1], int(a[2]), int(a[3]))
    elif a[:1] == ["tcp-sink"] and len(a) == 3:
        tcp_sink(int(a[1]), float(a[2]))
    else:
        sys.exit(__doc__)
