#!/usr/bin/env bash
# Root cause of congestion (Trumpet §2's use case): two long TCP flows share
# a 100 Mbit/s bottleneck with room to spare, until a third host sends a
# 512 KiB UDP burst within 40 ms; the queue overflows and both TCP flows lose
# packets. An event on the TCP flows' losses, and one on the burst (bytes
# per 10 ms per flow), should fire in the same windows.
#
# Usage (as root): scenarios/congestion.sh [OUTDIR]   (default scenarios/out)
# Writes OUTDIR/congestion.pcap (receiver), OUTDIR/congestion-sw.pcap
# (switch) and OUTDIR/congestion.json. About 10 s.
#
# Topology:
#
#   clr-sc-s1 eth0 10.0.128.11 ── port s1 ─┐
#   clr-sc-s2 eth0 10.0.128.12 ── port s2 ─┼─ clr-sc-sw bridge br0 ── port rcv ─[tbf 100 Mbit/s, 64 KB queue]─ eth0 clr-sc-rcv
#   clr-sc-s3 eth0 10.0.128.13 ── port s3 ─┘   (capture 2)                                (capture 1)       10.20.93.10
#
# Traffic (t = 0 when the TCP flows start):
#   0.0-3.0  TCP s1 -> rcv:5201 and s2 -> rcv:5202, each paced at 25 Mbit/s
#            (SO_MAX_PACING_RATE via iperf3 --fq-rate), together half the
#            bottleneck, so without the burst the queue stays short.
#   ~1.0     UDP burst s3 -> rcv:5301: 524288 bytes in 1400-byte datagrams,
#            evenly paced over 40 ms (~105 Mbit/s); its exact start and end
#            are in the metadata (times_ns.udp_burst_start/_end).
#
# Capture points (snap length 128, nanosecond stamps, same clock):
#  1. congestion.pcap: the receiver's eth0, after the bottleneck, as a
#     monitor on the receiving host sees it: the burst as the bottleneck
#     delivered it, and the TCP retransmissions that fill the holes the
#     drops left. A segment dropped at the tail of a flight leaves no hole
#     (nothing later arrives before its retransmission), so here its
#     retransmission looks like a first transmission: a receiver-side
#     capture undercounts losses.
#  2. congestion-sw.pcap: the bridge br0 in promiscuous mode, i.e. every
#     frame as it enters the switch, before the bottleneck: what the
#     senders sent (the burst as sent, every original and every
#     retransmission) and the receiver's ACKs. The sender links add no
#     delay, so this is each sender's view as well (RTTs included).
# The tbf counts the drops (bottleneck.dropped in the metadata).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"
sc_init congestion "${1:-}"

RATE=${RATE:-100mbit}
LIMIT=${LIMIT:-64kb}
TCP_RATE=${TCP_RATE:-25M}
BURST_BYTES=${BURST_BYTES:-524288}
BURST_MS=${BURST_MS:-40}
S1=${SC_PREFIX}s1 S2=${SC_PREFIX}s2 S3=${SC_PREFIX}s3 RCV=${SC_PREFIX}rcv
S1_4=10.0.128.11 S2_4=10.0.128.12 S3_4=10.0.128.13 RCV4=10.20.93.10
pcap=$OUT/congestion.pcap pcap_sw=$OUT/congestion-sw.pcap meta=$OUT/congestion.json
rm -f "$pcap" "$pcap_sw" "$meta"

sc_switch
sc_host "$S1" s1 $S1_4/24 02:00:0a:00:80:0b 10.20.93.0/24
sc_host "$S2" s2 $S2_4/24 02:00:0a:00:80:0c 10.20.93.0/24
sc_host "$S3" s3 $S3_4/24 02:00:0a:00:80:0d 10.20.93.0/24
sc_host "$RCV" rcv $RCV4/24 02:00:0a:14:5d:0a 10.0.128.0/24
sc_tbf "$SC_SW" rcv "$RATE" 16kb "$LIMIT"

tmp=$(mktemp -d)
trap 'sc_teardown; rm -rf "$tmp"' EXIT
nsx "$RCV" timeout 30 iperf3 -s -1 -p 5201 >/dev/null &
nsx "$RCV" timeout 30 iperf3 -s -1 -p 5202 >/dev/null &
nsx "$RCV" timeout 30 python3 "$here/traffic.py" sink 5301 1 20 >"$tmp/sink.json" &
sink_job=$!
sleep 0.5
sc_capture_start "$RCV" eth0 "$pcap"
sc_capture_start "$SC_SW" br0 "$pcap_sw"
sleep 0.2

t_tcp=$(sc_now_ns)
nsx "$S1" timeout 30 iperf3 -c $RCV4 -p 5201 -t 3 --fq-rate "$TCP_RATE" -J >"$tmp/s1.json" &
j1=$!
nsx "$S2" timeout 30 iperf3 -c $RCV4 -p 5202 -t 3 --fq-rate "$TCP_RATE" -J >"$tmp/s2.json" &
j2=$!
sleep 1
nsx "$S3" timeout 10 python3 "$here/traffic.py" burst $RCV4 5301 "$BURST_BYTES" "$BURST_MS" 1400 >"$tmp/burst.json"
sc_wait $j1 $j2
t_end=$(sc_now_ns)
sc_wait $sink_job
sc_capture_stop "$pcap"
drops_rcv=$SC_CAPTURE_KERNEL_DROPS
sc_capture_stop "$pcap_sw"
drops_sw=$SC_CAPTURE_KERNEL_DROPS

tbf_drops=$(sc_qdisc_drops "$SC_SW" rcv tbf)
burst=$(cat "$tmp/burst.json")
sink=$(cat "$tmp/sink.json")
tcp=$(python3 - "$tmp/s1.json" "$tmp/s2.json" <<'EOF'
import json, sys
out = []
for path in sys.argv[1:]:
    r = json.load(open(path))
    c = r["start"]["connected"][0]
    s = r["end"]["sum_sent"]
    out.append({"src": c["local_host"], "sport": c["local_port"], "dst": c["remote_host"],
                "dport": c["remote_port"], "bytes": s["bytes"],
                "bits_per_second": round(s["bits_per_second"]), "retransmits": s.get("retransmits")})
print(json.dumps(out))
EOF
)

sc_meta_str scenario congestion
sc_meta captures "[{\"file\": \"$(basename "$pcap")\", \"point\": \"clr-sc-rcv eth0 (receiver host, after the bottleneck)\", \"kernel_drops\": \"$drops_rcv\"}, {\"file\": \"$(basename "$pcap_sw")\", \"point\": \"clr-sc-sw br0, promiscuous (every frame entering the switch, before the bottleneck)\", \"kernel_drops\": \"$drops_sw\"}]"
sc_meta hosts "{\"tcp_sender_1\": \"$S1_4\", \"tcp_sender_2\": \"$S2_4\", \"udp_burst_sender\": \"$S3_4\", \"receiver\": \"$RCV4\"}"
sc_meta_str ran "iperf3 -c $RCV4 -p 5201 -t 3 --fq-rate $TCP_RATE (from $S1_4) and -p 5202 (from $S2_4); 1 s later traffic.py burst $RCV4 5301 $BURST_BYTES bytes in $BURST_MS ms, 1400-byte datagrams (from $S3_4)"
sc_meta bottleneck "{\"where\": \"clr-sc-sw port rcv egress\", \"qdisc\": \"tbf rate $RATE burst 16kb limit $LIMIT\", \"dropped\": ${tbf_drops:-null}}"
sc_meta tcp_flows "$tcp"
sc_meta udp_burst "{\"src\": \"$S3_4\", \"dst\": \"$RCV4\", \"dport\": 5301, \"sent\": $burst, \"received\": $sink}"
burst_start=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["start_ns"])' "$burst")
burst_end=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["end_ns"])' "$burst")
sc_meta times_ns "{\"script_start\": $SC_T0, \"tcp_start\": $t_tcp, \"udp_burst_start\": $burst_start, \"udp_burst_end\": $burst_end, \"tcp_end\": $t_end}"
sc_meta_write "$meta"
sc_log "tbf drops $tbf_drops; burst sent $burst; received $sink"
sc_log "tcp $tcp"
sc_log "$(basename "$pcap"): $(sc_capture_info "$pcap")"
sc_log "$(basename "$pcap_sw"): $(sc_capture_info "$pcap_sw")"
