# shellcheck shell=bash
# Shared helpers for the scenario scripts; source it, don't run it.
#
#   here=$(cd "$(dirname "$0")" && pwd); . "$here/lib.sh"
#   sc_init loss "$@"        # name, output dir; checks, cleanup trap, leftovers
#
# Everything a scenario creates is a network namespace named clr-sc-*, so
# removing those namespaces (after ending the processes inside them, which
# the scenario started) removes every link, bridge, qdisc and filter too.
# sc_init removes leftovers of an aborted run first, and an EXIT trap removes
# what this run made however it ends.
#
# Hosts hang off one bridge (namespace clr-sc-sw, bridge br0). Senders live
# in 10.0.128.0/24, receivers in 10.20.93.0/24; each host reaches the other
# subnet by an on-link route, so frames are bridged, never routed, and TTLs
# arrive unchanged (as in scripts/make-example-capture.sh).

SC_PREFIX=clr-sc-
SC_SW=${SC_PREFIX}sw
SC_NS=()          # namespaces this run created
SC_PIDS=()        # background processes this run started (outside sc_ns_pids)
SC_META=()        # metadata entries, "key<TAB>json"
SC_NAME=scenario

sc_log() { echo "$SC_NAME: $*" >&2; }
sc_die() { echo "$SC_NAME: $*" >&2; exit 1; }

# apt package that provides each tool we use.
declare -A SC_PKG=([ip]=iproute2 [tc]=iproute2 [iperf3]=iperf3 [tcpdump]=tcpdump
    [tshark]=tshark [capinfos]=tshark [ethtool]=ethtool [python3]=python3 [timeout]=coreutils [ping]=iputils-ping [curl]=curl [taskset]=util-linux [nats-server]=nats-server)

# sc_missing_tools TOOL...: prints what is missing and the apt packages to
# install; false when something is.
sc_missing_tools() {
    local t missing=() pkgs=()
    for t in "$@"; do
        command -v "$t" >/dev/null 2>&1 && continue
        missing+=("$t")
        pkgs+=("${SC_PKG[$t]:-$t}")
    done
    [ ${#missing[@]} = 0 ] && return 0
    echo "missing ${missing[*]}; install with: apt-get install -y $(printf '%s\n' "${pkgs[@]}" | sort -u | tr '\n' ' ')"
    return 1
}

# sc_need_tools TOOL...: exits with the apt packages to install when any is missing.
sc_need_tools() {
    local why
    why=$(sc_missing_tools "$@") || sc_die "$why"
}

# sc_have_tools TOOL...: false, saying what to install, when any is missing.
sc_have_tools() {
    local why
    why=$(sc_missing_tools "$@") || { sc_log "$why"; return 1; }
}

# can_use_netns: true when this process may create network namespaces, veth
# pairs and clsact/tbf qdiscs; otherwise false, with the reason on stderr.
can_use_netns() {
    local probe=${SC_PREFIX}probe-$$
    if [ "$(id -u)" != 0 ]; then
        echo "$SC_NAME: network namespaces need root (run with sudo)" >&2
        return 1
    fi
    if ! ip netns add "$probe" 2>/dev/null; then
        echo "$SC_NAME: cannot create a network namespace here (container without CAP_SYS_ADMIN, or /run/netns not writable)" >&2
        return 1
    fi
    local ok=0 why=""
    if ! ip netns exec "$probe" true 2>/dev/null; then
        ok=1 why="cannot enter a network namespace (ip netns exec failed)"
    elif ! ip -n "$probe" link add pa type veth peer name pb 2>/dev/null; then
        ok=1 why="cannot create veth pairs (kernel without CONFIG_VETH?)"
    elif ! tc -n "$probe" qdisc add dev pa root tbf rate 10mbit burst 4kb limit 10kb 2>/dev/null; then
        ok=1 why="cannot add a tbf qdisc (kernel without CONFIG_NET_SCH_TBF?)"
    elif ! { tc -n "$probe" qdisc add dev pb clsact &&
             tc -n "$probe" filter add dev pb egress bpf da bytecode "1,6 0 0 0"; } 2>/dev/null; then
        ok=1 why="cannot attach a classic BPF filter to clsact (kernel without CONFIG_NET_CLS_BPF / CONFIG_NET_SCH_INGRESS?)"
    fi
    ip netns del "$probe" 2>/dev/null
    [ $ok = 0 ] || echo "$SC_NAME: $why" >&2
    return $ok
}

# sc_ns_kill NS...: ends the processes running in the namespaces (this
# script's: every clr-sc-* namespace is made by these scripts).
sc_ns_kill() {
    local ns pid
    for ns in "$@"; do
        for pid in $(ip netns pids "$ns" 2>/dev/null); do kill "$pid" 2>/dev/null || true; done
    done
}

# sc_cleanup_leftovers: removes clr-sc-* namespaces left by an aborted run.
sc_cleanup_leftovers() {
    local left
    left=$(ip netns list 2>/dev/null | awk '{print $1}' | grep "^${SC_PREFIX}" || true)
    [ -n "$left" ] || return 0
    sc_log "removing leftovers of an earlier run: $(echo "$left" | tr '\n' ' ')"
    # shellcheck disable=SC2086
    sc_ns_kill $left
    sleep 0.3
    for ns in $left; do ip netns del "$ns" 2>/dev/null || true; done
}

sc_teardown() {
    local pid ns
    for pid in "${SC_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    [ ${#SC_NS[@]} = 0 ] && return 0
    sc_ns_kill "${SC_NS[@]}"
    sleep 0.3
    for ns in "${SC_NS[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
    SC_NS=()
}

# sc_init NAME [OUTDIR]: checks tools and permissions, installs the cleanup
# trap, removes leftovers, creates OUTDIR (default scenarios/out). Sets OUT.
sc_init() {
    SC_NAME=$1
    local here
    here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
    OUT=${2:-$here/out}
    sc_need_tools ip tc iperf3 tcpdump ethtool python3 timeout
    can_use_netns || exit 2
    trap 'sc_teardown' EXIT
    trap 'exit 130' INT TERM
    sc_cleanup_leftovers
    mkdir -p "$OUT"
    OUT=$(cd "$OUT" && pwd)
    # shellcheck disable=SC2034 # for the scenario's metadata
    SC_T0=$(sc_now_ns)
}

sc_now_ns() { date +%s%N; }
nsx() { local ns=$1; shift; ip netns exec "$ns" "$@"; }

# sc_ns_add NAME: a namespace with lo up, IPv6 off (no router/MLD chatter in
# the captures) and no reverse-path filtering on the on-link routes.
sc_ns_add() {
    local ns=$1
    ip netns add "$ns"
    SC_NS+=("$ns")
    nsx "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1 \
        net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0
    ip -n "$ns" link set lo up
}

# sc_switch: the bridge namespace clr-sc-sw with bridge br0.
sc_switch() {
    sc_ns_add "$SC_SW"
    ip -n "$SC_SW" link add br0 type bridge
    ip -n "$SC_SW" link set br0 type bridge mcast_snooping 0 stp_state 0 forward_delay 0
    ip -n "$SC_SW" link set br0 up
}

# sc_offloads_off NS DEV: no TSO/GSO/GRO (and no checksum offload), so the
# captures show wire-size segments with valid checksums, as a NIC would send.
sc_offloads_off() {
    nsx "$1" ethtool -K "$2" tx off tso off gso off gro off >/dev/null 2>&1 ||
        sc_log "warning: could not turn offloads off on $1/$2"
}

# sc_host NS PORT ADDR/24 MAC REMOTE-NET...: a host namespace NS whose eth0
# is plugged into switch port PORT, with on-link routes to the remote nets.
sc_host() {
    local ns=$1 port=$2 addr=$3 mac=$4
    shift 4
    sc_ns_add "$ns"
    ip -n "$SC_SW" link add "$port" type veth peer name eth0 netns "$ns"
    ip -n "$ns" link set eth0 address "$mac"
    ip -n "$SC_SW" link set "$port" master br0 up
    sc_offloads_off "$SC_SW" "$port"
    sc_offloads_off "$ns" eth0
    ip -n "$ns" addr add "$addr" dev eth0
    ip -n "$ns" link set eth0 up
    local net
    for net in "$@"; do ip -n "$ns" route add "$net" dev eth0; done
}

# sc_sender_receiver: the switch with two hosts, a sender SND (SND4, port
# snd) and a receiver RCV (RCV4, port rcv), in their own /24s: the layout
# loss.sh and burst_loss.sh share (and their golden captures carry).
sc_sender_receiver() {
    SND=${SC_PREFIX}snd RCV=${SC_PREFIX}rcv
    SND4=10.0.128.11 RCV4=10.20.93.10
    sc_switch
    sc_host "$SND" snd $SND4/24 02:00:0a:00:80:0b 10.20.93.0/24
    sc_host "$RCV" rcv $RCV4/24 02:00:0a:14:5d:0a 10.0.128.0/24
}

# sc_tbf NS DEV RATE BURST LIMIT: token-bucket bottleneck on DEV's egress;
# packets that find LIMIT bytes queued are dropped.
sc_tbf() {
    tc -n "$1" qdisc add dev "$2" root tbf rate "$3" burst "$4" limit "$5"
}

# ---------------------------------------------------------------------------
# Random loss without netem: a classic BPF program on the clsact hook, run by
# cls_bpf in direct-action mode ("da"): the program's return value is the tc
# verdict itself, TC_ACT_SHOT (2) drops the packet, TC_ACT_UNSPEC (-1) leaves
# it alone. (The kernel here has no act_gact, so "action drop" is not
# available; direct action needs no action module. Without "da", a non-zero
# return would mean "match" and the attached action would decide.)
#
# The program drops, with probability P, IPv4 TCP segments from SRC that
# carry at least MIN payload bytes (handshakes, pure ACKs, FINs and the
# other direction are never dropped). The skb starts at the Ethernet header
# on both the ingress and egress hooks (cls_bpf pushes the MAC header back
# at ingress). Opcodes (linux/filter.h):
#   0x28 ldh [k]        BPF_LD|BPF_H|BPF_ABS     0x30 ldb [k]      BPF_LD|BPF_B|BPF_ABS
#   0x20 ld  [k]        BPF_LD|BPF_W|BPF_ABS     0xb1 ldxb 4*([k]&0xf)  BPF_LDX|BPF_B|BPF_MSH
#   0x50 ldb [x+k]      BPF_LD|BPF_B|BPF_IND     0x60 ld M[k]      BPF_LD|BPF_MEM
#   0x02 st M[k]        BPF_ST                   0x07 tax          BPF_MISC|BPF_TAX
#   0x1c sub x          BPF_ALU|BPF_SUB|BPF_X    0x74 rsh #k       BPF_ALU|BPF_RSH|BPF_K
#   0x64 lsh #k         BPF_ALU|BPF_LSH|BPF_K    0x15 jeq #k       BPF_JMP|BPF_JEQ|BPF_K
#   0x35 jge #k         BPF_JMP|BPF_JGE|BPF_K    0x45 jset #k      BPF_JMP|BPF_JSET|BPF_K
#   0x06 ret #k         BPF_RET|BPF_K
# "ld rand" is the ancillary load ld [SKF_AD_OFF + SKF_AD_RANDOM] =
# ld [0xfffff000 + 0x38] = ld [0xfffff038] (4294963256): a uniform 32-bit
# random number (prandom_u32) per packet; the packet is dropped when it is
# below P * 2^32.
#
# sc_loss_bytecode P SRC [MIN]: prints the "N,op jt jf k,..." string.
sc_loss_bytecode() {
    local p=$1 src=$2 min=${3:-1}
    local thr srcnum
    thr=$(python3 -c "import sys; p=float(sys.argv[1]); assert 0<=p<=1; print(min(int(p*2**32), 2**32-1))" "$p") ||
        sc_die "bad loss probability $p"
    srcnum=$(python3 -c "import ipaddress,sys; print(int(ipaddress.IPv4Address(sys.argv[1])))" "$src") ||
        sc_die "bad IPv4 address $src"
    # Each line: opcode jt jf k; jt/jf may name the labels PASS or DROP.
    local prog=(
        "0x28 0 0 12"              # ldh [12]            ethertype
        "0x15 0 PASS 0x0800"       # jeq #IPv4
        "0x30 0 0 23"              # ldb [23]            IP protocol
        "0x15 0 PASS 6"            # jeq #TCP
        "0x20 0 0 26"              # ld [26]             source address
        "0x15 0 PASS $srcnum"      # jeq #SRC
        "0x28 0 0 20"              # ldh [20]            flags + fragment offset
        "0x45 PASS 0 0x1fff"       # jset #0x1fff        later fragment: no TCP header
        "0xb1 0 0 14"              # ldxb 4*([14]&0xf)   X = IP header length
        "0x28 0 0 16"              # ldh [16]            IP total length
        "0x1c 0 0 0"               # sub x
        "0x02 0 0 0"               # st M[0]             M0 = total - IP header
        "0x50 0 0 26"              # ldb [x+26]          TCP data offset byte (14+12)
        "0x74 0 0 4"               # rsh #4
        "0x64 0 0 2"               # lsh #2              A = TCP header length
        "0x07 0 0 0"               # tax
        "0x60 0 0 0"               # ld M[0]
        "0x1c 0 0 0"               # sub x               A = payload length
        "0x35 0 PASS $min"         # jge #MIN
        "0x20 0 0 0xfffff038"      # ld rand
        "0x35 PASS DROP $thr"      # jge #THR: keep when rand >= P*2^32
        "DROP:0x06 0 0 2"          # ret #TC_ACT_SHOT
        "PASS:0x06 0 0 0xffffffff" # ret #TC_ACT_UNSPEC
    )
    local i n=${#prog[@]} drop=0 pass=0 out line op jt jf k
    out=$n
    for ((i = 0; i < n; i++)); do
        case ${prog[$i]} in DROP:*) drop=$i ;; PASS:*) pass=$i ;; esac
    done
    for ((i = 0; i < n; i++)); do
        line=${prog[$i]#*:}
        read -r op jt jf k <<<"$line"
        [ "$jt" = PASS ] && jt=$((pass - i - 1))
        [ "$jt" = DROP ] && jt=$((drop - i - 1))
        [ "$jf" = PASS ] && jf=$((pass - i - 1))
        [ "$jf" = DROP ] && jf=$((drop - i - 1))
        out+=",$((op)) $jt $jf $((k))"
    done
    echo "$out"
}

# sc_add_loss NS DEV ingress|egress P SRC [MIN]: attach the loss program.
sc_add_loss() {
    local ns=$1 dev=$2 dir=$3 p=$4 src=$5 min=${6:-1} code
    code=$(sc_loss_bytecode "$p" "$src" "$min")
    tc -n "$ns" qdisc add dev "$dev" clsact 2>/dev/null || true
    tc -n "$ns" filter add dev "$dev" "$dir" bpf da bytecode "$code" ||
        sc_die "could not attach the loss filter to $ns/$dev $dir"
    # shellcheck disable=SC2034 # for the scenario's metadata
    SC_LOSS_CODE=$code
}

# sc_qdisc_drops NS DEV KIND: the "dropped" counter of DEV's qdisc KIND
# (clsact counts the packets its filters shot; tbf its queue overflows).
sc_qdisc_drops() {
    tc -n "$1" -s qdisc show dev "$2" |
        awk -v kind="$3" '$1 == "qdisc" { on = ($2 == kind) } on && /dropped/ {
            for (i = 1; i <= NF; i++) if ($i == "(dropped") { sub(",", "", $(i+1)); print $(i+1); exit } }'
}

# ---------------------------------------------------------------------------
# Capture: tcpdump in NS on DEV into FILE, snap length 128, nanosecond
# stamps. Several may run at once; each is known by its FILE.
# --immediate-mode matters: without it libpcap hands packets over in ring
# blocks (up to a second's worth), and the SIGINT that stops tcpdump throws
# away the blocks not yet read: the capture would end up to ~1 s early,
# silently (not counted as "dropped by kernel").
# Not through nsx: the signal that stops tcpdump must reach tcpdump itself
# (ip netns exec execs it, so $! is tcpdump).
declare -A SC_CAP_PID=() SC_CAP_ERR=()
sc_capture_start() {
    local ns=$1 dev=$2 file=$3 err pid i
    err=$(mktemp)
    ip netns exec "$ns" tcpdump -i "$dev" -s 128 -B 16384 -n -Z root --immediate-mode \
        --time-stamp-precision=nano -w "$file" 2>"$err" &
    pid=$!
    SC_PIDS+=("$pid")
    SC_CAP_PID[$file]=$pid
    SC_CAP_ERR[$file]=$err
    for i in $(seq 50); do
        grep -q "listening on" "$err" && return 0
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    cat "$err" >&2
    sc_die "tcpdump did not start on $ns/$dev"
}

# sc_capture_stop FILE: stops that tcpdump; sets SC_CAPTURE_KERNEL_DROPS to
# the number of packets it reports the kernel dropped (0 if all were saved).
sc_capture_stop() {
    local file=$1
    sleep 0.5
    kill -INT "${SC_CAP_PID[$file]}" 2>/dev/null || true
    wait "${SC_CAP_PID[$file]}" 2>/dev/null || true
    SC_CAPTURE_KERNEL_DROPS=$(awk '/dropped by kernel/ {print $1}' "${SC_CAP_ERR[$file]}")
    SC_CAPTURE_KERNEL_DROPS=${SC_CAPTURE_KERNEL_DROPS:-unknown}
    rm -f "${SC_CAP_ERR[$file]}"
}

# sc_wait PID...: waits for the given background jobs, ignoring their status.
sc_wait() { local p; for p in "$@"; do wait "$p" 2>/dev/null || true; done; }

# ---------------------------------------------------------------------------
# Metadata: a small JSON object written next to the capture.
# sc_meta KEY JSON-VALUE / sc_meta_str KEY STRING / sc_meta_write FILE
sc_meta() { SC_META+=("$1"$'\t'"$2"); }
sc_meta_str() { sc_meta "$1" "$(python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$2")"; }
sc_meta_write() {
    printf '%s\n' "${SC_META[@]}" | python3 -c '
import json, sys
obj = {}
for line in sys.stdin.read().splitlines():
    if not line:
        continue
    key, value = line.split("\t", 1)
    obj[key] = json.loads(value)
json.dump(obj, open(sys.argv[1], "w"), indent=2)
open(sys.argv[1], "a").write("\n")
' "$1"
}

# sc_capture_info FILE: one line of packet count and size.
sc_capture_info() {
    if command -v capinfos >/dev/null; then
        capinfos -M -c -s -u "$1" | awk -F': *' 'NR > 1 { printf "%s=%s ", $1, $2 } END { print "" }' | sed 's/  */ /g'
    else
        ls -l "$1"
    fi
}
