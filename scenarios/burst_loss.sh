#!/usr/bin/env bash
# Bursty losses: one TCP connection writes 96 KiB every 100 ms through a
# shallow bottleneck (tbf 20 Mbit/s, 20 KB queue: ~13 full-size packets,
# a fifth of one write's 68). Phase 1 (bursty, 1.5 s): unpaced, each write
# leaves at line rate as far as the congestion window allows, overflows the
# queue at once and loses the tail of the burst, several segments back to
# back (typically 25-55 per write). Phase 2 (paced, 1.5 s): the same
# connection, the same data, now paced at 16 Mbit/s, below the bottleneck
# rate: SO_MAX_PACING_RATE (the kernel's own TCP pacing) and each chunk
# written in 8 pieces spread at that rate (on this kernel, 6.18, the first
# write after turning pacing on left at line rate). The queue stays short
# and nothing (or next to nothing) is lost. Same average rate (7.9 Mbit/s)
# in both phases; each phase ends when all its data is ACKed, so no
# retransmission crosses the phase boundary.
#
# Usage (as root): scenarios/burst_loss.sh [OUTDIR]   (default scenarios/out)
# Writes OUTDIR/burst_loss.pcap and OUTDIR/burst_loss.json. About 10 s.
#
# Topology:
#
#   clr-sc-snd eth0 10.0.128.11 ── port snd ── clr-sc-sw bridge br0 ── port rcv ─[tbf 20 Mbit/s, 20 KB queue]─ eth0 clr-sc-rcv
#     (capture here)                                                                                          10.20.93.10 :5301
#
# Capture point: the sender's eth0 (snap length 128, nanosecond stamps),
# before the bottleneck: it holds every original transmission and every
# retransmission, and the ACKs as the sender gets them (RTTs as it sees
# them). The tbf counts the drops (bottleneck.dropped). times_ns has the
# phase boundaries; when tshark is installed the metadata also counts
# tshark's retransmissions per phase and per 100 ms write period.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"
sc_init burst_loss "${1:-}"

RATE=${RATE:-20mbit}
LIMIT=${LIMIT:-20kb}
CHUNK=${CHUNK:-98304}
PERIOD_MS=${PERIOD_MS:-100}
PACING=${PACING:-16000000}
PORT=5301
pcap=$OUT/burst_loss.pcap meta=$OUT/burst_loss.json
rm -f "$pcap" "$meta"

sc_sender_receiver
# Keep the congestion window across the 100 ms pauses between writes.
nsx "$SND" sysctl -qw net.ipv4.tcp_slow_start_after_idle=0
sc_tbf "$SC_SW" rcv "$RATE" 3kb "$LIMIT"

tmp=$(mktemp -d)
trap 'sc_teardown; rm -rf "$tmp"' EXIT
nsx "$RCV" timeout 30 python3 "$here/traffic.py" tcp-sink $PORT 20 >"$tmp/sink.json" &
sink_job=$!
sleep 0.5
sc_capture_start "$SND" eth0 "$pcap"
sleep 0.2

nsx "$SND" timeout 30 python3 "$here/traffic.py" tcp-bursts $RCV4 $PORT "$CHUNK" "$PERIOD_MS" 1.5 1.5 "$PACING" >"$tmp/client.json" ||
    sc_die "the TCP client failed"
sc_wait $sink_job
sc_capture_stop "$pcap"

tbf_drops=$(sc_qdisc_drops "$SC_SW" rcv tbf)
client=$(cat "$tmp/client.json")
sink=$(cat "$tmp/sink.json")
phases=null
if command -v tshark >/dev/null; then
    phases=$(tshark -n -r "$pcap" -Y "tcp.analysis.retransmission and tcp.srcport != $PORT" \
        -T fields -e frame.time_epoch 2>/dev/null | python3 -c '
import json, sys
c = json.loads(sys.argv[1])
period = c["period_ms"] * 1_000_000
ts = []
for line in sys.stdin:
    sec, _, frac = line.strip().partition(".")
    ts.append(int(sec) * 10**9 + int((frac + "000000000")[:9]))
out = {}
for name, start, end in (("bursty", c["bursty_start_ns"], c["paced_start_ns"]),
                         ("paced", c["paced_start_ns"], c["end_ns"])):
    mine = [t for t in ts if start <= t < end]
    per = {}
    for t in mine:
        k = (t - start) // period
        per[k] = per.get(k, 0) + 1
    out[name] = {"retransmissions": len(mine),
                 "write_periods_with_retransmissions": len(per),
                 "retransmissions_per_period": [per[k] for k in sorted(per)]}
print(json.dumps(out))
' "$client")
fi

sc_meta_str scenario burst_loss
sc_meta_str capture "$(basename "$pcap")"
sc_meta_str capture_point "clr-sc-snd eth0 (sender side, before the bottleneck)"
sc_meta hosts "{\"sender\": \"$SND4\", \"receiver\": \"$RCV4\"}"
sc_meta_str ran "traffic.py tcp-bursts $RCV4 $PORT $CHUNK $PERIOD_MS 1.5 1.5 $PACING: one TCP connection, $CHUNK bytes every $PERIOD_MS ms, 1.5 s unpaced, then 1.5 s paced at $PACING bit/s (SO_MAX_PACING_RATE, and each chunk written in 8 pieces at that rate)"
sc_meta bottleneck "{\"where\": \"clr-sc-sw port rcv egress\", \"qdisc\": \"tbf rate $RATE burst 3kb limit $LIMIT\", \"dropped\": ${tbf_drops:-null}}"
sc_meta tcp_flow "$client"
sc_meta received "$sink"
sc_meta tshark_retransmissions_by_phase "$phases"
bursty=$(python3 -c 'import json,sys; c=json.loads(sys.argv[1]); print(c["bursty_start_ns"], c["paced_start_ns"], c["end_ns"])' "$client")
read -r t_bursty t_paced t_end <<<"$bursty"
sc_meta times_ns "{\"script_start\": $SC_T0, \"bursty_start\": $t_bursty, \"paced_start\": $t_paced, \"end\": $t_end}"
sc_meta_str capture_kernel_drops "$SC_CAPTURE_KERNEL_DROPS"
sc_meta_write "$meta"
sc_log "tbf drops $tbf_drops; by phase: $phases"
sc_log "$(sc_capture_info "$pcap")"
