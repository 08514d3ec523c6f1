#!/usr/bin/env bash
# Runs every scenario and tshark's per-flow summary of each capture.
#
# Usage (as root): scenarios/run-all.sh [OUTDIR]   (default scenarios/out)
# Writes into OUTDIR, per scenario: NAME.pcap (congestion also
# congestion-sw.pcap), NAME.json (metadata) and, per capture,
# CAPTURE.tshark.jsonl (scenarios/tshark-summary.sh). Also checks
# tshark's labelling and RTT rules on a crafted trace (tshark-rules.py).
# About 30 s.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
command -v tshark >/dev/null || { echo "run-all: missing tshark (apt-get install -y tshark)" >&2; exit 1; }

echo "== tshark rules (crafted trace)"
python3 "$here/tshark-rules.py" | sed -n '/^ok\|^FAIL/p'

for s in loss congestion burst_loss; do
    echo "== $s"
    "$here/$s.sh" "$out"
done

for pcap in "$out"/loss.pcap "$out"/congestion.pcap "$out"/congestion-sw.pcap "$out"/burst_loss.pcap; do
    sum=${pcap%.pcap}.tshark.jsonl
    "$here/tshark-summary.sh" "$pcap" >"$sum"
    echo "== $(basename "$pcap"): $(stat -c %s "$pcap") bytes; TCP flows with data (tshark):"
    python3 - "$sum" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    f = json.loads(line)
    if f["data_packets"] < 10:
        continue
    r = f["rtt"] or {}
    print(f'  {f["src"]}:{f["sport"]} -> {f["dst"]}:{f["dport"]}  data {f["data_packets"]}'
          f'  retr {f["retransmission"]} (fast {f["fast_retransmission"]}, spurious {f["spurious_retransmission"]})'
          f'  ooo {f["out_of_order"]}  ka {f["keep_alive"]}  zwp {f["zero_window_probe"]}'
          f'  rtt n={r.get("count", 0)} min={r.get("min_ns", 0)/1e6:.3f} med={r.get("median_ns", 0)/1e6:.3f}'
          f' max={r.get("max_ns", 0)/1e6:.3f} ms')
EOF
done
