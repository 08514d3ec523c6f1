#!/usr/bin/env bash
# Compare two clarion-lab binaries' `classify` figures on the same machine,
# in the same run: the two binaries alternate N times (so drift on a shared
# machine hits both alike; within each run USS and megaflow passes
# alternate too), and per rule set the medians of USS and megaflow
# ns/packet and of the USS/megaflow ratio are printed for each binary,
# with new-over-old speed-ups.
#
#   scripts/classify-ab.sh OLD_BINARY NEW_BINARY N [clarion-lab classify flags...]
#   scripts/classify-ab.sh /tmp/clarion-lab-old target/release/clarion-lab 5 --warm --runs 3
set -euo pipefail
if [ $# -lt 3 ]; then
  sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
a=$1 b=$2 n=$3
shift 3
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for _ in $(seq "$n"); do
  for x in A B; do
    bin=$a
    [ "$x" = B ] && bin=$b
    "$bin" classify --json "$@" | python3 -c "
import json, sys
for line in sys.stdin:
    d = json.loads(line)
    u, m = d['uss'], d['megaflow']
    print('$x', d['rules'], 1e9 / u['packets_per_second'], 1e9 / m['packets_per_second'],
          d['pps_ratio_uss_over_megaflow'], u['hit_rate'], m['hit_rate'])" >>"$out"
  done
done
python3 - "$out" "$a" "$b" <<'PY'
import statistics as st
import sys
rows = [l.split() for l in open(sys.argv[1])]
sets = list(dict.fromkeys(r[1] for r in rows))
print(f"A = {sys.argv[2]}\nB = {sys.argv[3]}")
print(f"{'rules':<10} {'':>2} {'uss ns/p':>9} {'mf ns/p':>9} {'uss/mf':>7} {'uss hit':>8} {'mf hit':>8}")
med = {}
for s in sets:
    for x in ("A", "B"):
        c = [list(map(float, r[2:])) for r in rows if r[0] == x and r[1] == s]
        cols = list(zip(*c))
        med[x, s] = [st.median(col) for col in cols]
        u, m, ratio, hu, hm = med[x, s]
        print(f"{s:<10} {x:>2} {u:9.1f} {m:9.1f} {ratio:7.2f} {100 * hu:7.1f}% {100 * hm:7.1f}%")
    (ua, ma, *_), (ub, mb, *_) = med["A", s], med["B", s]
    print(f"{s:<10} {'':>2} B speed-up: USS {ua / ub:.2f}x, megaflow {ma / mb:.2f}x")
PY
