#!/usr/bin/env bash
# Clarion's file path against flow exporters, measured in the same run
# (issue 19): nfdump's nfpcapd and softflowd read the same capture from the
# page cache, and Clarion's packets/s is printed with its ratio to the
# faster of the two.
#
# Usage: bash scripts/peers.sh [--runs N] [--trace FILE]... [--no-dense]
#   --runs N      runs of each tool per trace (default 5), taken in
#                 alternation (round r runs every tool once, starting from a
#                 different one each round); the median wall time counts
#   --trace FILE  measure FILE instead of the default traces (repeatable)
#   --no-dense    skip the dense TCP trace (see below)
#
# Default traces, made once and cached under target/peers/:
#   replicated   ../shared/captures/pathspider_real.pcap copied 16 times,
#                copy i with new addresses (tcprewrite --seed=i) and shifted
#                by i µs (editcap -t), merged in time order (mergecap):
#                1.0 M packets of 74 B average, 198 k flows
#   dense        real Linux TCP between two network namespaces this script
#                creates (iperf3, 8 streams of 50 Mbit/s for 6 s, offloads
#                off so packets are at most 1,514 B), captured by tcpdump on
#                the receiver: about 200 k packets of 1.5 KB average, so
#                reading weighs more. Needs root and network namespaces;
#                skipped, saying why, otherwise (then pass --trace FILE).
#
# Clarion is measured four ways, as in issue 19's table: examples/demo.clarion
# with one worker and with --workers 2, one 5-tuple event
# (scripts/peers-5tuple.clarion) and an event that matches nothing
# (scripts/peers-nothing.clarion), each `clarion run --pcap TRACE -q -o
# /dev/null`. The peers: `nfpcapd -r TRACE -w DIR` (nfcapd files into a
# scratch directory) and `softflowd -r TRACE -c none -d -n 127.0.0.1:PORT`
# (-c none: no control socket, so it exits at the end of the file; PORT is a
# UDP port nobody listens on). Packets are counted by capinfos.
#
# Needs tcprewrite (tcpreplay), editcap, mergecap and capinfos
# (wireshark-common), nfpcapd (nfdump), softflowd, and for the dense trace
# ip (iproute2), iperf3, tcpdump and ethtool: installed with apt-get when
# root and missing, otherwise the script says what to install.
# CLARION names the binary (default: target/release/clarion, built if missing).
# Timings are wall time on whatever else the machine is doing: the load
# average is printed before and after; compare ratios within one run.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

runs=5 dense=1 traces=()
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --runs) [ $# -ge 2 ] || usage; runs=$2; shift 2 ;;
    --trace) [ $# -ge 2 ] || usage; traces+=("$2"); shift 2 ;;
    --no-dense) dense=0; shift ;;
    -h|--help) usage ;;
    *) echo "peers: unknown argument '$1'" >&2; usage ;;
  esac
done
case $runs in ''|*[!0-9]*|0) echo "peers: --runs needs a positive number, not '$runs'" >&2; exit 2 ;; esac
for t in ${traces[@]+"${traces[@]}"}; do
  [ -r "$t" ] || { echo "peers: cannot read trace '$t'" >&2; exit 2; }
done

log() { echo "peers: $*" >&2; }
die() { echo "peers: $*" >&2; exit 1; }

# --- tools -------------------------------------------------------------------
have() { command -v "$1" >/dev/null 2>&1; }
# tool:package
tools=(tcprewrite:tcpreplay editcap:wireshark-common mergecap:wireshark-common
  capinfos:wireshark-common nfpcapd:nfdump softflowd:softflowd)
dense_tools=(ip:iproute2 iperf3:iperf3 tcpdump:tcpdump ethtool:ethtool)
[ ${#traces[@]} = 0 ] && [ $dense = 1 ] && [ "$(id -u)" = 0 ] && tools+=("${dense_tools[@]}")
PATH=$PATH:/usr/sbin:/sbin
missing=()
for tp in "${tools[@]}"; do
  have "${tp%%:*}" && continue
  case " ${missing[*]-} " in *" ${tp#*:} "*) ;; *) missing+=("${tp#*:}") ;; esac
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && have apt-get && [ "${CLARION_NO_INSTALL:-0}" != 1 ]; then
    log "installing ${missing[*]} (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    # wireshark-common asks whether non-root users may capture; answer no.
    echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections 2>/dev/null || true
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; } ||
      die "apt-get install ${missing[*]} failed (offline?)"
  else
    die "missing packages: ${missing[*]}; install with: apt-get install -y ${missing[*]}"
  fi
fi

clarion=${CLARION:-$root/target/release/clarion}
if [ ! -x "$clarion" ]; then
  log "building $clarion (cargo build --release -p clarion-cli; about 6 minutes on 2 cores)"
  cargo build --release -q -p clarion-cli
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/clarion-peers.XXXXXX")
netns=() pids=()
cleanup() {
  local p ns
  for p in ${pids[@]+"${pids[@]}"}; do kill "$p" 2>/dev/null || true; done
  for ns in ${netns[@]+"${netns[@]}"}; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill "$p" 2>/dev/null || true; done
  done
  [ ${#netns[@]} = 0 ] || sleep 0.3
  for ns in ${netns[@]+"${netns[@]}"}; do ip netns del "$ns" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cache=$root/target/peers
mkdir -p "$cache"

# --- traces ------------------------------------------------------------------
# make_replicated OUT: the pathspider capture 16 times with new addresses and
# a µs skew each, merged in time order.
make_replicated() {
  local out=$1 src=$root/../shared/captures/pathspider_real.pcap i
  [ -r "$src" ] || die "no $src (the shared captures sit beside the checkout as ../shared/)"
  log "making $out: $(basename "$src") x16 (tcprewrite --seed=i, editcap -t i µs, mergecap)"
  mkdir -p "$work/rep"
  for i in $(seq 1 16); do
    tcprewrite --seed="$i" --infile="$src" --outfile="$work/rep/seed$i.pcap"
    editcap -F pcap -t "$(printf '0.%06d' "$i")" "$work/rep/seed$i.pcap" "$work/rep/copy$i.pcap"
    rm "$work/rep/seed$i.pcap"
  done
  mergecap -F pcap -w "$work/rep/merged.pcap" "$work/rep"/copy*.pcap
  mv "$work/rep/merged.pcap" "$out"
  rm -rf "$work/rep"
}

# dense_possible: true when this process may create network namespaces and
# veth pairs; otherwise false, saying why.
dense_possible() {
  local probe=clr-peers-probe-$$
  [ "$(id -u)" = 0 ] || { log "no dense trace: network namespaces need root (or pass --trace FILE)"; return 1; }
  ip netns add "$probe" 2>/dev/null ||
    { log "no dense trace: cannot create a network namespace here (or pass --trace FILE)"; return 1; }
  if ! ip -n "$probe" link add pa type veth peer name pb 2>/dev/null; then
    ip netns del "$probe" 2>/dev/null || true
    log "no dense trace: cannot create veth pairs (or pass --trace FILE)"; return 1
  fi
  ip netns del "$probe"
}

# make_dense OUT: iperf3 between two namespaces, 8 TCP streams of 50 Mbit/s
# for 6 s, captured whole by tcpdump on the receiving side.
make_dense() {
  local out=$1 a=clr-peers-$$-a b=clr-peers-$$-b ns dev server capture
  log "making $out: iperf3 between namespaces $a and $b, captured by tcpdump (about 10 s)"
  ip netns add "$a"; netns+=("$a")
  ip netns add "$b"; netns+=("$b")
  ip link add pa netns "$a" type veth peer name pb netns "$b"
  ip -n "$a" addr add 10.77.0.1/24 dev pa
  ip -n "$b" addr add 10.77.0.2/24 dev pb
  for ns in "$a" "$b"; do
    dev=p${ns: -1}
    ip -n "$ns" link set lo up
    ip -n "$ns" link set "$dev" up
    # Wire-sized packets: no segmentation or receive offloads.
    ip netns exec "$ns" ethtool -K "$dev" tso off gso off gro off tx off rx off >/dev/null 2>&1 || true
  done
  ip netns exec "$b" iperf3 -s -B 10.77.0.2 >"$work/iperf3-server.log" 2>&1 &
  server=$!; pids+=("$server")
  ip netns exec "$b" tcpdump -i pb -s 0 -B 32768 -Z root -w "$work/dense.pcap" 2>"$work/tcpdump.err" &
  capture=$!; pids+=("$capture")
  for _ in $(seq 100); do grep -q "listening on" "$work/tcpdump.err" 2>/dev/null && break; sleep 0.05; done
  grep -q "listening on" "$work/tcpdump.err" || die "tcpdump did not start: $(cat "$work/tcpdump.err")"
  for _ in $(seq 100); do ip netns exec "$a" bash -c 'echo >/dev/tcp/10.77.0.2/5201' 2>/dev/null && break; sleep 0.05; done
  ip netns exec "$a" iperf3 -c 10.77.0.2 -t 6 -P 8 -b 50M >"$work/iperf3-client.log" 2>&1 ||
    die "iperf3 failed: $(tail -3 "$work/iperf3-client.log")"
  sleep 0.3
  kill -INT "$capture"; wait "$capture" || true
  kill "$server"; wait "$server" 2>/dev/null || true
  pids=()
  grep -E "dropped by kernel" "$work/tcpdump.err" | sed 's/^/peers: tcpdump: /' >&2 || true
  for ns in "$a" "$b"; do ip netns del "$ns"; done
  netns=()
  mv "$work/dense.pcap" "$out"
}

if [ ${#traces[@]} = 0 ]; then
  rep=$cache/pathspider_real_x16.pcap
  [ -s "$rep" ] || make_replicated "$rep"
  traces+=("$rep")
  if [ $dense = 1 ]; then
    dense_trace=$cache/dense_tcp.pcap
    if [ -s "$dense_trace" ]; then
      traces+=("$dense_trace")
    elif dense_possible; then
      make_dense "$dense_trace"
      traces+=("$dense_trace")
    fi
  fi
fi

# --- measuring ---------------------------------------------------------------
# nfpcapd's output directory flag: -w in nfdump 1.7 (Debian 12), -l in later versions.
nf_dir_flag=-w
nfpcapd -h 2>&1 | grep -qE '^-w' || nf_dir_flag=-l
udp_port=$(python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo 9)

names=("Clarion, demo.clarion" "Clarion, demo.clarion, --workers 2" "Clarion, one 5-tuple event"
  "Clarion, an event that matches nothing" "nfpcapd" "softflowd")
# run_tool K TRACE: runs tool K once on TRACE, its output discarded.
run_tool() {
  local trace=$2
  case $1 in
    0) "$clarion" run --pcap "$trace" --events examples/demo.clarion --progress never -q -o /dev/null ;;
    1) "$clarion" run --pcap "$trace" --events examples/demo.clarion --workers 2 --progress never -q -o /dev/null ;;
    2) "$clarion" run --pcap "$trace" --events scripts/peers-5tuple.clarion --progress never -q -o /dev/null ;;
    3) "$clarion" run --pcap "$trace" --events scripts/peers-nothing.clarion --progress never -q -o /dev/null ;;
    4) rm -rf "$work/nf"; mkdir "$work/nf"; nfpcapd -r "$trace" "$nf_dir_flag" "$work/nf" >/dev/null ;;
    5) softflowd -r "$trace" -c none -d -p "$work/softflowd.pid" -n "127.0.0.1:$udp_port" >/dev/null ;;
  esac
}
ntools=${#names[@]}

median() { sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
# mps PACKETS SECONDS: millions of packets/s, two decimals.
mps() { awk -v p="$1" -v s="$2" 'BEGIN {printf "%.2f", p / s / 1e6}'; }

echo "# scripts/peers.sh --runs $runs: $(nproc) cores, $(uname -r), $(date -u +%Y-%m-%dT%H:%MZ)"
echo "# $("$clarion" --version 2>/dev/null || echo clarion), nfdump $(dpkg-query -W -f='${Version}' nfdump 2>/dev/null || echo '?'), softflowd $(dpkg-query -W -f='${Version}' softflowd 2>/dev/null || echo '?')"
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
summary=()
for trace in "${traces[@]}"; do
  packets=$(capinfos -T -r -c -M "$trace" | awk -F'\t' '{print $2}')
  size=$(capinfos -T -r -z -M "$trace" | awk -F'\t' '{printf "%.0f", $2}')
  # Warm-up: the file into the page cache, and one untimed run of each tool
  # (Clarion's summary gives the flow count).
  cat "$trace" >/dev/null
  flows=$("$clarion" run --pcap "$trace" --events scripts/peers-nothing.clarion --progress never -o /dev/null 2>&1 |
    sed -n 's/^ *flows \([0-9,]*\) created.*/\1/p')
  for k in $(seq 0 $((ntools - 1))); do
    run_tool "$k" "$trace" 2>"$work/err" || die "${names[$k]} failed on $trace: $(tail -3 "$work/err")"
  done
  log "$(basename "$trace"): $packets packets, $runs runs of ${ntools} tools"
  for k in $(seq 0 $((ntools - 1))); do : >"$work/times.$k"; done
  for r in $(seq 0 $((runs - 1))); do
    for j in $(seq 0 $((ntools - 1))); do
      k=$(((j + r) % ntools))
      t0=$EPOCHREALTIME
      run_tool "$k" "$trace" 2>"$work/err" || die "${names[$k]} failed on $trace: $(tail -3 "$work/err")"
      t1=$EPOCHREALTIME
      awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.6f\n", b - a}' >>"$work/times.$k"
    done
  done
  declare -a med=() rate=()
  for k in $(seq 0 $((ntools - 1))); do
    med[k]=$(median <"$work/times.$k")
    rate[k]=$(mps "$packets" "${med[k]}")
  done
  best_peer=4
  awk -v a="${rate[5]}" -v b="${rate[4]}" 'BEGIN {exit !(a > b)}' && best_peer=5
  echo
  echo "$(basename "$trace"): ${packets} packets, ${size} B average, ${flows:-?} flows (Clarion's count); median of $runs runs"
  echo
  echo "| tool | median s | min–max s | M packets/s | ratio to ${names[$best_peer]} |"
  echo "|---|---|---|---|---|"
  for k in $(seq 0 $((ntools - 1))); do
    spread=$(sort -g "$work/times.$k" | awk 'NR==1 {a=$1} {b=$1} END {printf "%.3f–%.3f", a, b}')
    ratio=$(awk -v a="${rate[k]}" -v b="${rate[best_peer]}" 'BEGIN {printf "%.2f×", a / b}')
    printf '| %s | %.3f | %s | %s | %s |\n' "${names[$k]}" "${med[k]}" "$spread" "${rate[k]}" "$ratio"
  done
  for k in 0 1; do
    summary+=("$(basename "$trace"): ${names[$k]} $(awk -v a="${rate[k]}" -v b="${rate[best_peer]}" 'BEGIN {printf "%.2f×", a / b}') ${names[$best_peer]}")
  done
done
echo
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# issue 19's targets: replicated trace >= 5x the faster peer with one worker, >= 8x with --workers 2; dense TCP >= 3x"
printf '# %s\n' "${summary[@]}"
