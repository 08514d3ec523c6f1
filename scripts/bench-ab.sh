#!/usr/bin/env bash
# Compare two clarion-lab binaries on the same machine, in the same run:
# `clarion-lab bench` alternates between them N times (so drift on a shared
# machine hits both alike) and the medians and minima of each figure are
# printed.
#
#   scripts/bench-ab.sh OLD_BINARY NEW_BINARY N [clarion-lab bench flags...]
#   scripts/bench-ab.sh /tmp/clarion-lab-old target/release/clarion-lab 5 --packets 5000000
set -euo pipefail
if [ $# -lt 3 ]; then
  sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'
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
    "$bin" bench --verify-prefix 0 --json "$@" 2>/dev/null | python3 -c "
import json, sys
d = json.load(sys.stdin)
print('$x', d['ns_per_packet']['mean'], d['ns_per_packet']['median'],
      d['sweep_ns']['median'] / 1000, d['sweep_ns']['p99'] / 1000)" >>"$out"
  done
done
python3 - "$out" "$a" "$b" <<'PY'
import statistics as st
import sys
rows = [l.split() for l in open(sys.argv[1])]
names = ["ns/packet mean", "median batch ns", "sweep median us", "sweep p99 us"]
for x, path in (("A", sys.argv[2]), ("B", sys.argv[3])):
    cols = list(zip(*[map(float, r[1:]) for r in rows if r[0] == x]))
    print(f"{x} ({path}):")
    for name, c in zip(names, cols):
        print(f"  {name:16} median {st.median(c):9.1f}  min {min(c):9.1f}")
PY
