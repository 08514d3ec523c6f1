#!/usr/bin/env bash
# The NATS transport on the bundled example, on one machine: a nats-server on
# a free loopback port with per-host keys (clarion credentials), the capture
# split into one file per host, a manager and one agent per host, each with
# its own key. Prints the network-wide reports (JSON lines).
# Usage: bash scripts/nats-demo.sh   (needs nats-server: apt-get install nats-server)
# CLARION names the binary (default: target/release/clarion, built if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
clarion=${CLARION:-$root/target/release/clarion}
if [ ! -x "$clarion" ]; then
  cargo build --release -q -p clarion-cli
fi
nats_server=$(command -v nats-server || true)
[ -z "$nats_server" ] && [ -x /usr/sbin/nats-server ] && nats_server=/usr/sbin/nats-server
[ -n "$nats_server" ] || { echo "nats-demo: nats-server not found (apt-get install nats-server)" >&2; exit 2; }
work=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cleanup() { kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
"$clarion" credentials --inventory examples/demo-hosts.txt --out-dir "$work/creds" -q
"$nats_server" -c "$work/creds/nats-server.conf" -a 127.0.0.1 -p "$port" >"$work/nats.log" 2>&1 &
server=$!
for _ in $(seq 100); do (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.05; done

"$clarion" split --pcap examples/demo.pcap --inventory examples/demo-hosts.txt --out-dir "$work/hosts" 2>/dev/null
"$clarion" manager --nats "nats://127.0.0.1:$port" --nats-nkey "$work/creds/manager.nk" --inventory examples/demo-hosts.txt \
  --events examples/network.clarion --no-store --no-api --until-finished \
  --format json -o "$work/reports.jsonl" 2>"$work/manager.log" &
manager=$!
agents=()
for host in sender-1 sender-2 receiver; do
  "$clarion" agent --nats "nats://127.0.0.1:$port" --nats-nkey "$work/creds/$host.nk" --host "$host" \
    --pcap "$work/hosts/$host.pcap" --quiet 2>>"$work/agents.log" &
  agents+=($!)
done
wait "$manager"
wait "${agents[@]}"
cat "$work/reports.jsonl"
grep -E "^clarion: manager:" "$work/manager.log" >&2
