#!/usr/bin/env bash
# Highest packet rate each live source sustains with zero drops on a veth
# pair here, with Trumpet's 4,096 triggers installed (8 matched per packet),
# against `tcpdump -w /dev/null` on the same traffic as the baseline.
#
# Usage (as root): scripts/live-rate.sh [RATES] [PACKETS]
#   RATES    comma-separated packets/s to try, ascending (default below)
#   PACKETS  frames replayed per trial (default 3000000; 64-byte frames from `clarion-lab gen`)
# For each source (tcpdump; clarion on AF_PACKET with --ring-mode frames and
# blocks; clarion on AF_XDP) and rate it
# replays the workload with tcpreplay from one namespace into the other,
# then prints one line per trial: the rate tcpreplay achieved, frames sent
# and seen, drops at the receiver's socket or ring (what tcpdump reports as
# "dropped by kernel"; for AF_XDP the socket's XDP statistics), drops in the
# kernel's path before any socket (softnet backlog, veth and device
# counters: no capture can see those packets), Clarion's queueing delay
# (p99, max) and late sweeps. The sender and the
# kernel's receive path share one core (veth delivers on the sender's CPU);
# each receiver runs on the other core.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
RATES=${1:-250000,500000,750000,1000000,1250000,1500000}
PACKETS=${2:-3000000}
CLARION=${CLARION:-$here/target/release/clarion}
CLARION_LAB=${CLARION_LAB:-$here/target/release/clarion-lab}
for t in ip tcpreplay tcpdump ethtool taskset; do
    command -v $t >/dev/null || { echo "live-rate: missing $t (apt-get install -y iproute2 tcpreplay tcpdump ethtool util-linux)" >&2; exit 1; }
done
[ -x "$CLARION" ] && [ -x "$CLARION_LAB" ] || { echo "live-rate: build first: cargo build --release -p clarion-cli -p clarion-lab" >&2; exit 1; }
tmp=$(mktemp -d)
TX=clr-rate-tx RX=clr-rate-rx
cleanup() {
    for ns in $TX $RX; do
        for p in $(ip netns pids $ns 2>/dev/null); do kill "$p" 2>/dev/null || true; done
    done
    sleep 0.2
    ip netns del $TX 2>/dev/null || true
    ip netns del $RX 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT
cleanup 2>/dev/null; tmp=$(mktemp -d)
ip netns add $TX
ip netns add $RX
ip link add eth0 netns $TX type veth peer name eth0 netns $RX
for ns in $TX $RX; do
    ip netns exec $ns ethtool -K eth0 tx off tso off gso off gro off >/dev/null 2>&1 || true
    ip -n $ns link set eth0 up
    ip -n $ns link set lo up
done
"$CLARION_LAB" gen --out "$tmp/w.pcap" --events-out "$tmp/w.clarion" --packets "$PACKETS" 2>/dev/null

# Packets the kernel dropped before any socket: softnet backlog overflows
# (all CPUs) plus the veth pair's rx/tx drop counters.
stack_drops() {
    local n=0 d
    while read -r _ d _; do n=$((n + 16#$d)); done </proc/net/softnet_stat
    for c in "$TX tx_dropped" "$TX rx_dropped" "$RX rx_dropped" "$RX tx_dropped"; do
        set -- $c
        d=$(ip netns exec "$1" cat "/sys/class/net/eth0/statistics/$2")
        n=$((n + d))
    done
    echo $n
}

ready() { # FILE PATTERN: waits until the receiver says it is listening
    for _ in $(seq 200); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done
    echo "live-rate: receiver not ready: $(cat "$1")" >&2; return 1
}

trial() { # SOURCE RATE
    local src=$1 rate=$2 err=$tmp/err pid sent seen drops p99 max late actual
    : >"$err"
    case $src in
    tcpdump)
        ip netns exec $RX taskset -c 1 tcpdump -i eth0 -s 256 -B 65536 -w /dev/null 2>"$err" &
        pid=$!; ready "$err" "listening on" ;;
    frames|blocks|xdp)
        local how=(--source packet --ring-mode "$src")
        [ "$src" = xdp ] && how=(--source xdp)
        ip netns exec $RX "$CLARION" run -i eth0 "${how[@]}" --cpus 1 --events "$tmp/w.clarion" \
            --format json -o /dev/null --stats-every 0 --epoch-stats "$tmp/epochs.jsonl" 2>"$err" &
        pid=$!; ready "$err" "capturing on" ;;
    esac
    local before; before=$(stack_drops)
    ip netns exec $TX taskset -c 0 tcpreplay -i eth0 --pps "$rate" --preload-pcap "$tmp/w.pcap" >"$tmp/replay" 2>&1
    sent=$(awk '/Successful packets:/ {print $3}' "$tmp/replay")
    actual=$(awk '/Rated:/ {printf "%d", $(NF-1)}' "$tmp/replay")
    sleep 1
    kill -TERM $pid; wait $pid 2>/dev/null || true
    local stack=$(($(stack_drops) - before))
    [ -z "${KEEP:-}" ] || cp "$tmp/epochs.jsonl" "$KEEP/epochs-$src-$rate.jsonl" 2>/dev/null || true
    case $src in
    tcpdump)
        seen=$(awk '/packets captured/ {print $1}' "$err")
        drops=$(awk '/dropped by kernel/ {print $1}' "$err")
        p99=- max=- late=- ;;
    *)
        seen=$(awk '/ frames in / {gsub(",", "", $2); print $2}' "$err")
        drops=$(awk '/kernel drops/ {gsub(",", "", $2); print $2}' "$err")
        p99=$(sed -n 's/.*delay p99 \(.*\) max .*/\1/p' "$err")
        max=$(sed -n 's/.*delay p99 .* max \(.*\), longest.*/\1/p' "$err")
        late=$(sed -n 's/.*sweeps (\([0-9,]*\) late).*/\1/p' "$err") ;;
    esac
    printf '%-8s %10s %10s %10s %10s %8s %8s %10s %10s %5s\n' "$src" "$rate" "${actual:-?}" "${sent:-?}" "${seen:-?}" \
        "${drops:-?}" "$stack" "$p99" "$max" "$late"
}

printf '%-8s %10s %10s %10s %10s %8s %8s %10s %10s %5s\n' source rate achieved sent seen drops stack "delay p99" "delay max" late
for rate in ${RATES//,/ }; do
    for src in tcpdump frames blocks xdp; do
        trial $src "$rate"
    done
done
