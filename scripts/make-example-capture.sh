#!/usr/bin/env bash
# Builds examples/demo.pcap: a few seconds of real traffic between network
# namespaces, captured on the server's link, for the README's first command
# and for examples/demo.clarion. See examples/README.md for what it contains.
#
# Usage (as root): scripts/make-example-capture.sh [OUTPUT.pcap]
# Needs: iproute2 (ip, tc), iperf3, tcpdump, ping (iputils-ping), ethtool,
# python3. Everything it creates is named clr-* and removed on exit.
#
# Topology (one L2 segment; subnets are reached by on-link routes, so no
# router rewrites TTLs):
#
#   clr-c1  eth0 10.0.128.11  fd00:0:128::11 ─┐
#                                              ├─ clr-sw: bridge br0 ── port srv ──(tbf 50 Mbit/s)── eth0 clr-srv
#   clr-c2  eth0 10.0.128.12  fd00:0:128::12 ─┘                                        10.20.93.10 fd00:20:93::10
#
# Capture point: clr-srv eth0, snap length 128 (the monitor reads header
# length fields, not captured length, so the file stays small).
#
# VLAN: client c2's frames are meant to arrive on VLAN 100 over a trunk.
# Kernels without 802.1Q support (CONFIG_VLAN_8021Q, bridge VLAN filtering)
# can't build that, so the tag is added after capture to every frame sent
# by or to c2's MAC address; timing, sizes and headers stay as captured.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../examples/demo.pcap}
raw=$(mktemp --suffix=.pcap)

for tool in ip tc iperf3 tcpdump ping ethtool python3; do
    command -v "$tool" >/dev/null || { echo "make-example-capture: missing $tool" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "make-example-capture: must run as root (network namespaces)" >&2; exit 1; }

NS=(clr-c1 clr-c2 clr-sw clr-srv)
C1_MAC=02:00:0a:00:80:0b
C2_MAC=02:00:0a:00:80:0c
SRV_MAC=02:00:0a:14:5d:0a
SRV4=10.20.93.10
SRV6=fd00:20:93::10

teardown() {
    # Processes still running in our namespaces were started by this script.
    for ns in "${NS[@]}"; do
        for pid in $(ip netns pids "$ns" 2>/dev/null); do kill "$pid" 2>/dev/null || true; done
    done
    sleep 0.2
    for ns in "${NS[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
}
trap 'teardown; rm -f "$raw"' EXIT
teardown # leftovers of an interrupted run

nsx() { local ns=$1; shift; ip netns exec "$ns" "$@"; }

for ns in "${NS[@]}"; do
    ip netns add "$ns"
    nsx "$ns" ip link set lo up
    # Set before links exist so that every new interface inherits them:
    # no DAD wait for IPv6, no reverse-path check on the on-link routes.
    nsx "$ns" sysctl -qw net.ipv6.conf.default.accept_dad=0 net.ipv6.conf.all.accept_dad=0 \
        net.ipv4.conf.default.rp_filter=0 net.ipv4.conf.all.rp_filter=0
done
# c1 asks for ECN, c2 does not (the default only accepts it), so the capture
# has both ECN-capable and not-ECT TCP.
nsx clr-c1 sysctl -qw net.ipv4.tcp_ecn=1

ip -n clr-sw link add br0 type bridge
ip -n clr-sw link set br0 type bridge mcast_snooping 0
ip -n clr-sw link add c1 type veth peer name eth0 netns clr-c1
ip -n clr-sw link add c2 type veth peer name eth0 netns clr-c2
ip -n clr-sw link add srv type veth peer name eth0 netns clr-srv
ip -n clr-c1 link set eth0 address $C1_MAC
ip -n clr-c2 link set eth0 address $C2_MAC
ip -n clr-srv link set eth0 address $SRV_MAC
for port in c1 c2 srv; do ip -n clr-sw link set "$port" master br0 up; done
ip -n clr-sw link set br0 up

# Segmentation offloads would show 64 KB "packets" in the capture; real
# NICs put MTU-sized frames on the wire.
for pair in clr-sw:c1 clr-sw:c2 clr-sw:srv clr-c1:eth0 clr-c2:eth0 clr-srv:eth0; do
    nsx "${pair%%:*}" ethtool -K "${pair#*:}" tx off tso off gso off gro off >/dev/null
done

addr() { # ns v4 v6 remote-v4-net remote-v6-net
    ip -n "$1" addr add "$2" dev eth0
    ip -n "$1" -6 addr add "$3" dev eth0 nodad
    ip -n "$1" link set eth0 up
    ip -n "$1" route add "$4" dev eth0
    ip -n "$1" -6 route add "$5" dev eth0
}
addr clr-c1 10.0.128.11/24 fd00:0:128::11/64 10.20.93.0/24 fd00:20:93::/64
addr clr-c2 10.0.128.12/24 fd00:0:128::12/64 10.20.93.0/24 fd00:20:93::/64
addr clr-srv $SRV4/24 $SRV6/64 10.0.128.0/24 fd00:0:128::/64

# The bottleneck: a token bucket in front of the server, so bursts queue
# (and, during the UDP burst, overflow and drop).
tc -n clr-sw qdisc add dev srv root tbf rate 50mbit burst 32kbit latency 20ms

# Every iperf3 runs under a timeout: a test that can't connect must not
# leave the script waiting forever.
for port in 5201 5202 5203 5204; do
    nsx clr-srv timeout 30 iperf3 -s -1 -p $port >/dev/null &
done
sleep 0.5
nsx clr-c1 ping -q -c 1 -W 1 $SRV4 >/dev/null
nsx clr-c2 ping -q -c 1 -W 1 $SRV6 >/dev/null

# Not through nsx: a backgrounded function is a subshell, and the signal
# that stops tcpdump must reach tcpdump itself (ip netns exec execs it).
# --immediate-mode: without it, packets still in the kernel's buffer when
# tcpdump is stopped are lost silently (seen in scenarios/).
ip netns exec clr-srv tcpdump -i eth0 -s 128 -n -Z root --immediate-mode -w "$raw" 2>/dev/null &
tcpdump_pid=$!
sleep 1
kill -0 $tcpdump_pid 2>/dev/null || { echo "make-example-capture: tcpdump did not start" >&2; exit 1; }

# Traffic, about 7 s in all (t = 0 when the first flow starts):
#   0.0-5.0  ICMP echo c1 -> server and ICMPv6 echo c2 -> server, 5 per second
#   0.0-4.0  TCP over IPv4 with ECN: c1 -> :5201, paced at 20 Mbit/s
#   0.5-3.5  TCP over IPv6 without ECN: c2 -> :5202, paced at 15 Mbit/s
#   1.5-2.5  UDP burst over IPv4: c2 -> :5203 at 40 Mbit/s (overflows the bottleneck)
#   4.1-4.3  a 2 MB TCP transfer, not paced: c1 -> :5204 (fills the bottleneck)
#   4.5-5.2  traceroute-like ICMP echo from c1 with TTL 1..5, 0.15 s apart
#   5.3-6.9  c2 tries 100 closed ports of the server, ~65 per second (SYN, answered by RST)
# Pacing (SO_MAX_PACING_RATE, honoured by TCP itself without the fq qdisc)
# keeps the long flows smooth, so only the bulk transfer fills 10 ms windows.
nsx clr-c1 ping -q -c 25 -i 0.2 $SRV4 >/dev/null &
nsx clr-c2 ping -q -c 25 -i 0.2 $SRV6 >/dev/null &
nsx clr-c1 timeout 30 iperf3 -c $SRV4 -p 5201 -t 4 --fq-rate 20M >/dev/null &
sleep 0.5
nsx clr-c2 timeout 30 iperf3 -c $SRV6 -p 5202 -t 3 --fq-rate 15M >/dev/null &
sleep 1
nsx clr-c2 timeout 30 iperf3 -c $SRV4 -p 5203 -u -t 1 -b 40M -l 1200 >/dev/null &
sleep 2.6
nsx clr-c1 timeout 30 iperf3 -c $SRV4 -p 5204 -n 2M >/dev/null &
sleep 0.4
for ttl in 1 2 3 4 5; do
    nsx clr-c1 ping -q -c 1 -W 0.1 -t $ttl $SRV4 >/dev/null || true
    sleep 0.15
done
nsx clr-c2 bash -c "for p in \$(seq 8000 8099); do (echo > /dev/tcp/$SRV4/\$p) 2>/dev/null; sleep 0.01; done; true"

wait_jobs() {
    for pid in $(jobs -p); do [ "$pid" = "$tcpdump_pid" ] || wait "$pid" || true; done
}
wait_jobs
sleep 0.5
kill -INT $tcpdump_pid
wait $tcpdump_pid || true

# Put c2's frames on VLAN 100 (see the header): insert an 802.1Q tag after
# the MAC addresses, keep the snap length, count the tag in the wire length.
python3 - "$raw" "$out" "$C2_MAC" <<'EOF'
import struct, sys
src, dst, mac = sys.argv[1], sys.argv[2], bytes.fromhex(sys.argv[3].replace(":", ""))
data = open(src, "rb").read()
magic = data[:4]
endian = {b"\xd4\xc3\xb2\xa1": "<", b"\xa1\xb2\xc3\xd4": ">", b"\x4d\x3c\xb2\xa1": "<", b"\xa1\xb2\x3c\x4d": ">"}[magic]
snaplen, linktype = struct.unpack(endian + "II", data[16:24])
assert linktype == 1, "expected Ethernet"
out, off, tagged = [data[:24]], 24, 0
while off + 16 <= len(data):
    ts_s, ts_f, incl, orig = struct.unpack(endian + "IIII", data[off:off + 16])
    frame = data[off + 16:off + 16 + incl]
    off += 16 + incl
    if mac in (frame[0:6], frame[6:12]):
        frame = (frame[:12] + b"\x81\x00\x00\x64" + frame[12:])[:snaplen]
        orig += 4
        tagged += 1
    out.append(struct.pack(endian + "IIII", ts_s, ts_f, len(frame), orig) + frame)
open(dst, "wb").write(b"".join(out))
print(f"make-example-capture: tagged {tagged} frames with VLAN 100", file=sys.stderr)
EOF

chmod 644 "$out"
if command -v capinfos >/dev/null; then capinfos -c -u -d -s "$out"; else ls -l "$out"; fi
