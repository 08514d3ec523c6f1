#!/usr/bin/env bash
# Per-flow TCP loss and RTT summary of a capture, by tshark's TCP analysis:
# the yardstick the monitor's is_lost and rtt are compared with.
#
# Usage: scenarios/tshark-summary.sh CAPTURE.pcap
# Needs: tshark (apt-get install -y tshark), python3.
#
# Prints one JSON line per TCP flow (one direction: src, sport, dst, dport;
# IPv4 and IPv6), sorted by those four fields:
#   packets, data_packets (TCP payload > 0), payload_bytes,
#   retransmission, fast_retransmission, spurious_retransmission,
#   out_of_order, keep_alive, zero_window_probe, lost_segment,
#     each the number of the flow's packets tshark labels so
#     (tcp.analysis.*; a fast or spurious retransmission also carries
#     "retransmission", so those two are subsets of it),
#   retransmission_or_out_of_order: packets with either label, the count
#     to hold against the monitor's sum(is_lost) (see README.md),
#   rtt: {count, min_ns, median_ns, max_ns} of tcp.analysis.ack_rtt over
#     the ACKs for this flow's data. ack_rtt is a field of the ACK, which
#     belongs to the reverse flow; it is attributed here to the flow whose
#     data was acknowledged. median_ns is the lower median (a real sample).
#     rtt is null when the flow has no sample.
#   rtt_karn: the same over the ACKs that newly acknowledge no byte sent
#     more than once (no part of a segment tshark labels a retransmission
#     or out-of-order, sent before the ACK, lies between the previous
#     highest ACK and this one; at a sender-side capture an out-of-order
#     segment is a resend that came soon after the highest one): Karn's rule, which the monitor applies and tshark does not
#     (null when none). Sequence numbers are tshark's relative ones.
# tshark's timestamps carry the capture's precision (nanoseconds for the
# scenario captures), so the RTTs are exact to the nanosecond.
set -euo pipefail
[ $# = 1 ] || { echo "usage: $0 CAPTURE.pcap" >&2; exit 1; }
[ -r "$1" ] || { echo "tshark-summary: cannot read $1" >&2; exit 1; }
for tool in tshark python3; do
    command -v $tool >/dev/null || { echo "tshark-summary: missing $tool (apt-get install -y $tool)" >&2; exit 1; }
done

fields=(ip.src ipv6.src tcp.srcport ip.dst ipv6.dst tcp.dstport tcp.len
    tcp.analysis.retransmission tcp.analysis.fast_retransmission
    tcp.analysis.spurious_retransmission tcp.analysis.out_of_order
    tcp.analysis.keep_alive tcp.analysis.zero_window_probe tcp.analysis.lost_segment
    tcp.analysis.ack_rtt tcp.seq tcp.ack)
args=()
for f in "${fields[@]}"; do args+=(-e "$f"); done

# -E occurrence=f: the first value of each field, so tunnelled (ICMP-quoted)
# headers don't add columns. Frames tshark can't read as TCP are filtered out.
tshark -n -r "$1" -Y tcp -T fields -E separator=, -E occurrence=f "${args[@]}" 2>/dev/null |
python3 -c '
import ipaddress, json, sys

LABELS = ["retransmission", "fast_retransmission", "spurious_retransmission",
          "out_of_order", "keep_alive", "zero_window_probe", "lost_segment"]
flows = {}
resent = {}    # flow -> [(seq, end)] of its retransmissions so far
highest = {}   # flow -> highest ACK number received for its data so far

def flow(key):
    f = flows.get(key)
    if f is None:
        f = flows[key] = {"packets": 0, "data_packets": 0, "payload_bytes": 0,
                          **{k: 0 for k in LABELS},
                          "retransmission_or_out_of_order": 0, "_rtt": [], "_rtt_karn": []}
    return f

for line in sys.stdin:
    v = line.rstrip("\n").split(",")
    if len(v) < 17 or not v[2] or not v[5]:
        continue
    src, dst = v[0] or v[1], v[3] or v[4]
    sport, dport = int(v[2]), int(v[5])
    f = flow((src, sport, dst, dport))
    f["packets"] += 1
    n = int(v[6] or 0)
    if n > 0:
        f["data_packets"] += 1
        f["payload_bytes"] += n
    for k, x in zip(LABELS, v[7:14]):
        if x:
            f[k] += 1
    if v[7] or v[10]:
        f["retransmission_or_out_of_order"] += 1
    if (v[7] or v[10]) and v[15]:
        resent.setdefault((src, sport, dst, dport), []).append((int(v[15]), int(v[15]) + n))
    data_flow = (dst, dport, src, sport)
    prev = highest.get(data_flow)
    ack = int(v[16]) if v[16] else None
    if v[14]:
        # ack_rtt is on the ACK; the sample belongs to the reverse flow.
        sec, _, frac = v[14].partition(".")
        ns = int(sec) * 10**9 + int((frac + "000000000")[:9])
        acked = flow(data_flow)
        acked["_rtt"].append(ns)
        lo = prev if prev is not None else 0
        if ack is not None and not any(s < ack and lo < e for s, e in resent.get(data_flow, [])):
            acked["_rtt_karn"].append(ns)
    if ack is not None:
        highest[data_flow] = max(prev or 0, ack)

def sort_key(k):
    a, b = ipaddress.ip_address(k[0]), ipaddress.ip_address(k[2])
    return (a.version, a, k[1], b.version, b, k[3])

for key in sorted(flows, key=sort_key):
    f = flows[key]
    def stats(samples):
        s = sorted(samples)
        return {"count": len(s), "min_ns": s[0], "median_ns": s[(len(s) - 1) // 2],
                "max_ns": s[-1]} if s else None
    rtt, karn = stats(f.pop("_rtt")), stats(f.pop("_rtt_karn"))
    out = {"src": key[0], "sport": key[1], "dst": key[2], "dport": key[3], **f,
           "rtt": rtt, "rtt_karn": karn}
    print(json.dumps(out))
'
