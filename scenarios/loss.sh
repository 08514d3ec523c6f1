#!/usr/bin/env bash
# Random loss: two bulk TCP flows across a 40 Mbit/s bottleneck that also
# drops ~1.5% of the sender's data segments at random, so the capture has
# real retransmissions (fast and timeout-driven) and real RTTs (the tbf
# queue adds up to ~20 ms). For validating is_lost and rtt.
#
# Usage (as root): scenarios/loss.sh [OUTDIR]   (default scenarios/out)
# Writes OUTDIR/loss.pcap and OUTDIR/loss.json. About 10 s.
# Env: LOSS (default 0.015), RATE (40mbit), SECONDS_TCP (3), FLOWS (2).
#
# Topology:
#
#   clr-sc-snd eth0 10.0.128.11 ── port snd ─┐ clr-sc-sw             ┌─ port rcv ── eth0 clr-sc-rcv
#     (capture here)        [random loss,    ├─ bridge br0 ──────────┤  [tbf 40 Mbit/s,     10.20.93.10
#                            clsact ingress]                         │   100 KB queue]      iperf3 -s :5201
#
# Capture point: the sender's eth0, snap length 128, nanosecond stamps. The
# losses happen after it (on the switch), so the capture holds every
# original transmission and every retransmission, and each ACK's time minus
# its segment's time is the RTT the sender sees (what tshark's ack_rtt
# assumes).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"
sc_init loss "${1:-}"

LOSS=${LOSS:-0.015}
RATE=${RATE:-40mbit}
LIMIT=${LIMIT:-100kb}
SECONDS_TCP=${SECONDS_TCP:-3}
FLOWS=${FLOWS:-2}
PORT=5201
pcap=$OUT/loss.pcap meta=$OUT/loss.json
rm -f "$pcap" "$meta"

sc_sender_receiver
sc_tbf "$SC_SW" rcv "$RATE" 4kb "$LIMIT"
# Only data segments (payload >= 1 byte) from the sender; the handshake,
# the ACKs and everything the receiver sends pass untouched.
sc_add_loss "$SC_SW" snd ingress "$LOSS" $SND4 1

nsx "$RCV" timeout 30 iperf3 -s -1 -p $PORT >/dev/null &
SC_PIDS+=($!)
sleep 0.5
sc_capture_start "$SND" eth0 "$pcap"
sleep 0.2

t_start=$(sc_now_ns)
nsx "$SND" timeout 30 iperf3 -c $RCV4 -p $PORT -t "$SECONDS_TCP" -P "$FLOWS" -J >"$OUT/loss.iperf3.json" ||
    sc_die "iperf3 failed: $(head -c 500 "$OUT/loss.iperf3.json")"
t_end=$(sc_now_ns)
sc_capture_stop "$pcap"

bpf_drops=$(sc_qdisc_drops "$SC_SW" snd clsact)
tbf_drops=$(sc_qdisc_drops "$SC_SW" rcv tbf)
iperf=$(python3 - "$OUT/loss.iperf3.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
streams = []
for c, s in zip(r["start"]["connected"], r["end"]["streams"]):
    streams.append({"src_port": c["local_port"], "dst_port": c["remote_port"],
                    "bytes": s["sender"]["bytes"], "retransmits": s["sender"].get("retransmits")})
print(json.dumps({"streams": streams, "bits_per_second": round(r["end"]["sum_sent"]["bits_per_second"]),
                  "retransmits": r["end"]["sum_sent"].get("retransmits")}))
EOF
)
rm -f "$OUT/loss.iperf3.json"

sc_meta_str scenario loss
sc_meta_str capture "$(basename "$pcap")"
sc_meta_str capture_point "clr-sc-snd eth0 (sender side, before the loss and the bottleneck)"
sc_meta hosts "{\"sender\": \"$SND4\", \"receiver\": \"$RCV4\"}"
sc_meta_str ran "iperf3 -c $RCV4 -p $PORT -t $SECONDS_TCP -P $FLOWS (TCP, $FLOWS parallel flows $SND4 -> $RCV4:$PORT, plus iperf3's control connection to the same port)"
sc_meta bottleneck "{\"where\": \"clr-sc-sw port rcv egress\", \"qdisc\": \"tbf rate $RATE burst 4kb limit $LIMIT\", \"dropped\": ${tbf_drops:-null}}"
sc_meta random_loss "{\"where\": \"clr-sc-sw port snd ingress (clsact, cls_bpf direct-action)\", \"probability\": $LOSS, \"applies_to\": \"IPv4 TCP from $SND4 with payload >= 1 byte\", \"bytecode\": \"$SC_LOSS_CODE\", \"dropped\": ${bpf_drops:-null}}"
sc_meta iperf3 "$iperf"
sc_meta times_ns "{\"script_start\": $SC_T0, \"tcp_start\": $t_start, \"tcp_end\": $t_end}"
sc_meta_str capture_kernel_drops "$SC_CAPTURE_KERNEL_DROPS"
sc_meta_write "$meta"
sc_log "random-loss drops $bpf_drops, tbf drops $tbf_drops, iperf3 $iperf"
sc_log "$(sc_capture_info "$pcap")"
