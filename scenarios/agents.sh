#!/usr/bin/env bash
# Trumpet's deployment, live: a NATS server, an event manager and four
# live agents (`clarion agent -i eth0`), one per host namespace, on a
# switch; real traffic between the hosts (iperf3 TCP, UDP bursts). The
# network-wide reports the manager decides must equal those of
# `clarion run --inventory` on tcpdump's captures of the same four
# interfaces (window, group, values, completeness), with no drop; the
# manager's time from a window's end to its decision is reported.
#
# The control plane (NATS) runs on a network of its own (namespace
# clr-sc-ctl, each host's second interface ctl0), as a management network
# would, so the agents' captures hold only the data traffic.
#
# Usage (as root): scenarios/agents.sh [OUTDIR] [-- extra agent flags]
#   e.g. scenarios/agents.sh /tmp/agents -- --workers 2
# Writes OUTDIR/manager.jsonl (live network-wide reports), HOST.pcap,
# file.jsonl (reports from the captures), manager.err (its summary).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"
outdir=${1:-}
shift || true
[ "${1:-}" = "--" ] && shift
sc_init agents "$outdir"
sc_need_tools nats-server iperf3 tcpdump python3
CLARION=${CLARION:-$here/../target/release/clarion}
[ -x "$CLARION" ] || sc_die "no clarion binary at $CLARION (cargo build --release -p clarion-cli)"
events=$here/agents.clarion
CTL=${SC_PREFIX}ctl
hosts=(s1 s2 r1 r2)
declare -A addr=([s1]=10.0.128.11 [s2]=10.0.128.12 [r1]=10.20.93.10 [r2]=10.20.93.11)
declare -A remote=([s1]=10.20.93.0/24 [s2]=10.20.93.0/24 [r1]=10.0.128.0/24 [r2]=10.0.128.0/24)

# Data network: the switch and the four hosts.
sc_switch
i=0
for h in "${hosts[@]}"; do
    i=$((i + 1))
    sc_host "$SC_PREFIX$h" "$h" "${addr[$h]}/24" "02:00:00:00:00:0$i" "${remote[$h]}"
done
# Control network: a bridge in clr-sc-ctl (192.168.77.1) and ctl0 on each host.
sc_ns_add "$CTL"
ip -n "$CTL" link add ctlbr type bridge
ip -n "$CTL" addr add 192.168.77.1/24 dev ctlbr
ip -n "$CTL" link set ctlbr up
i=0
for h in "${hosts[@]}"; do
    i=$((i + 1))
    ip -n "$CTL" link add "c-$h" type veth peer name ctl0 netns "$SC_PREFIX$h"
    ip -n "$CTL" link set "c-$h" master ctlbr up
    ip -n "$SC_PREFIX$h" addr add "192.168.77.$((10 + i))/24" dev ctl0
    ip -n "$SC_PREFIX$h" link set ctl0 up
done
for h in "${hosts[@]}"; do echo "$h ${addr[$h]}/32"; done >"$OUT/hosts.txt"

url=nats://192.168.77.1:4222
nats=$(command -v nats-server || echo /usr/sbin/nats-server)
ip netns exec "$CTL" "$nats" -a 192.168.77.1 -p 4222 >"$OUT/nats.log" 2>&1 &
SC_PIDS+=($!)
for _ in $(seq 100); do nsx "$CTL" bash -c 'echo >/dev/tcp/192.168.77.1/4222' 2>/dev/null && break; sleep 0.05; done
ip netns exec "$CTL" "$CLARION" manager --nats "$url" --inventory "$OUT/hosts.txt" --events "$events" \
    --no-store --no-api --until-finished --poll-timeout 1s --format json -o "$OUT/manager.jsonl" \
    2>"$OUT/manager.err" &
SC_PIDS+=($!)
manager_pid=$!

# tcpdump on each host's data interface, then its agent.
agent_pids=() tcpdump_pids=()
for h in "${hosts[@]}"; do
    ip netns exec "$SC_PREFIX$h" tcpdump -i eth0 -s 256 --time-stamp-precision nano --immediate-mode -U \
        -w "$OUT/$h.pcap" 2>"$OUT/$h.tcpdump.err" &
    SC_PIDS+=($!)
    tcpdump_pids+=($!)
done
for h in "${hosts[@]}"; do
    # Each agent serves the control API for its own events on its loopback.
    ip netns exec "$SC_PREFIX$h" "$CLARION" agent --nats "$url" --host "$h" -i eth0 --duration 60s \
        --stats-every 0 --api 127.0.0.1:8701 --format json -o "$OUT/$h.own.jsonl" "$@" 2>"$OUT/$h.agent.err" &
    SC_PIDS+=($!)
    agent_pids+=($!)
done
for h in "${hosts[@]}"; do
    for _ in $(seq 200); do
        grep -q "listening on" "$OUT/$h.tcpdump.err" && grep -q "capturing on" "$OUT/$h.agent.err" && break
        sleep 0.05
    done
    grep -q "capturing on" "$OUT/$h.agent.err" || { cat "$OUT/$h.agent.err" >&2; sc_die "agent $h did not start"; }
done

# A host event added at runtime on r1's agent, before the traffic: it must
# report from the window its answer names on, with no restart.
cat >"$OUT/r1-own.clarion" <<'EV'
event r1_udp_in
  filter proto = udp
  when count(packets) > 10
  per dst_port
  every 10ms
EV
nsx "${SC_PREFIX}r1" "$CLARION" events --api http://127.0.0.1:8701 add "$OUT/r1-own.clarion" >/dev/null ||
    sc_die "could not add an event to r1's agent ($(cat "$OUT/r1.agent.err"))"

# Traffic from one CPU (see live.sh): two TCP transfers into the receivers
# at once, then UDP bursts from each sender.
cpu0="taskset -c 0"
nsx "${SC_PREFIX}r1" $cpu0 timeout 20 iperf3 -s -1 -p 5201 >/dev/null &
nsx "${SC_PREFIX}r2" $cpu0 timeout 20 iperf3 -s -1 -p 5202 >/dev/null &
nsx "${SC_PREFIX}r1" $cpu0 timeout 20 python3 "$here/traffic.py" sink 5301 1 15 >/dev/null &
nsx "${SC_PREFIX}r2" $cpu0 timeout 20 python3 "$here/traffic.py" sink 5302 1 15 >/dev/null &
sleep 0.3
ip netns exec "${SC_PREFIX}s1" $cpu0 timeout 20 iperf3 -c "${addr[r1]}" -p 5201 -t 1 -b 100M >/dev/null &
first=$!
nsx "${SC_PREFIX}s2" $cpu0 timeout 20 iperf3 -c "${addr[r2]}" -p 5202 -t 1 -b 60M >/dev/null
wait $first || true
nsx "${SC_PREFIX}s1" $cpu0 timeout 10 python3 "$here/traffic.py" burst "${addr[r1]}" 5301 1000000 200 1000 >/dev/null
nsx "${SC_PREFIX}s2" $cpu0 timeout 10 python3 "$here/traffic.py" burst "${addr[r2]}" 5302 600000 100 600 >/dev/null
sleep 1

# SIGTERM: each agent finishes its epoch's sweep, sends its last reports
# and tells the manager its input ended; the manager then decides the rest.
for p in "${agent_pids[@]}"; do kill -TERM "$p"; done
for i in "${!agent_pids[@]}"; do
    wait "${agent_pids[$i]}" || sc_die "agent ${hosts[$i]} exited with status $? ($(cat "$OUT/${hosts[$i]}.agent.err"))"
done
for p in "${tcpdump_pids[@]}"; do kill -TERM "$p"; done
for p in "${tcpdump_pids[@]}"; do wait "$p" 2>/dev/null || true; done
for _ in $(seq 200); do kill -0 $manager_pid 2>/dev/null || break; sleep 0.05; done
kill -0 $manager_pid 2>/dev/null && sc_die "the manager did not finish after every agent did ($(cat "$OUT/manager.err"))"
wait $manager_pid || sc_die "manager exited with status $? ($(cat "$OUT/manager.err"))"

captures=()
for h in "${hosts[@]}"; do captures+=(--pcap "$h=$OUT/$h.pcap"); done
"$CLARION" run --inventory "$OUT/hosts.txt" "${captures[@]}" --events "$events" --format json \
    -o "$OUT/file.jsonl" --quiet

PYTHONPATH="$here" python3 - "$OUT" "${hosts[@]}" <<'PY'
import json, re, sys
from captures import SKEW, capture_times, fuzzy_boundaries
out, hosts = sys.argv[1], sys.argv[2:]
live = [json.loads(l) for l in open(f"{out}/manager.jsonl")]
file = [json.loads(l) for l in open(f"{out}/file.jsonl")]
for h in hosts:
    err = open(f"{out}/{h}.tcpdump.err").read()
    if not re.search(r"^0 packets dropped by kernel", err, re.M):
        sys.exit(f"agents: tcpdump on {h} dropped packets ({err.strip()}); the comparison needs none")
    agent = open(f"{out}/{h}.agent.err").read()
    m = re.search(r"live: ([0-9,]+) kernel drops", agent)
    if not m or m.group(1) != "0":
        sys.exit(f"agents: agent {h} dropped packets or said nothing: {agent.strip()}")
all_times = [t for h in hosts for t in capture_times(f"{out}/{h}.pcap")]
first_ts, last_ts = min(all_times), max(all_times)
# As in live.sh: windows touching a boundary with a packet within SKEW of
# it are excused (captures.py), within a bound on how many boundaries differ.
fuzzy = fuzzy_boundaries(all_times)
def key(r):
    return (r["event"], r["window"]["start_ns"], json.dumps(r["group"], sort_keys=True))
def body(r):
    b = {k: v for k, v in r.items() if k not in ("host", "worker")}
    w = r["window"]
    c = dict(r["completeness"], out_of_order=None)
    # The live run observed in full the windows the captures start or end in.
    if w["start_ns"] < first_ts or w["end_ns"] > last_ts:
        c["complete"] = None
    b["completeness"] = c
    return b
# The manager writes each event's reports in window order.
for e in {r["event"] for r in live}:
    order = [r["window"]["start_ns"] for r in live if r["event"] == e]
    if order != sorted(order):
        sys.exit(f"agents: the manager wrote {e}'s reports out of window order")
L, F = {key(r): r for r in live}, {key(r): r for r in file}
bad, excused, implicated = [], [], set()
for k in sorted(set(L) | set(F)):
    a, b = L.get(k), F.get(k)
    if a is not None and b is not None and body(a) == body(b):
        continue
    w = (a or b)["window"]
    near = {w["start_ns"], w["end_ns"]} & fuzzy
    if near:
        excused.append(k)
        implicated |= near
    else:
        bad.append(k)
incomplete = [r for r in live if not r["completeness"]["complete"]
              and first_ts <= r["window"]["start_ns"] and r["window"]["end_ns"] <= last_ts]
left = {}
for h in hosts:
    m = re.search(r"satisfaction reports left (.*) after their window closed here \(its end plus the clock's lag, (.*)\)",
                  open(f"{out}/{h}.agent.err").read())
    if m:
        left[h] = f"{m.group(1)} (lag {m.group(2)})"
man = open(f"{out}/manager.err").read()
lat = re.search(r"window end to decision \(live hosts\): (.*)", man)
events = sorted({r["event"] for r in file})
print(f"agents: {len(live)} network-wide reports live, {len(file)} from the captures ({', '.join(events)}); "
      f"{len(excused)} excused at {len(implicated)} of {len(fuzzy)} boundaries with a packet within {SKEW // 1000} us; "
      f"window end to decision: {lat.group(1) if lat else 'not reported'}", file=sys.stderr)
for h, l in left.items():
    print(f"agents: {h}: satisfaction reports left {l} after their window closed", file=sys.stderr)
for k in bad[:5]:
    print(f"agents: differs: {k}\n  live: {L.get(k)}\n  file: {F.get(k)}", file=sys.stderr)
if bad or len(live) != len(L):
    sys.exit(f"agents: {len(bad)} network-wide reports differ")
if incomplete:
    sys.exit(f"agents: {len(incomplete)} live reports inside the captures are incomplete: {incomplete[0]}")
if len(implicated) > max(2, len(fuzzy) // 2):
    sys.exit(f"agents: reports differ at {len(implicated)} of {len(fuzzy)} boundaries; too many to call the runs equal")
if len(events) < 3 or len(file) < 10:
    sys.exit(f"agents: the traffic fired too little to compare ({len(file)} reports of {events})")
if not lat:
    sys.exit("agents: the manager reported no window-end-to-decision time")
# The event added at runtime on r1: reports from the window named on.
own = [json.loads(l) for l in open(f"{out}/r1.own.jsonl")]
said = re.search(r"event r1_udp_in added; its first window starts at (\S+)", open(f"{out}/r1.agent.err").read())
starts = sorted(r["window"]["start"] for r in own if r["event"] == "r1_udp_in")
if not said or len(starts) < 5 or starts[0] < said.group(1):
    sys.exit(f"agents: r1's runtime event: announced {said and said.group(1)}, reported {starts[:3]} ({len(starts)})")
print(f"agents: r1_udp_in, added at runtime on r1's agent from {said.group(1)}: {len(starts)} reports", file=sys.stderr)
PY
sc_log "ok: $OUT"
