#!/usr/bin/env bash
# Runs the scenarios live (real TCP between network namespaces) and the
# scenario tests on their fresh captures, as they run on the committed ones
# in scenarios/golden/ (crates/conformance/tests/scenarios.rs).
#
# Usage (as root): scenarios/check.sh   (scripts/test.sh runs it)
# Skips, with the reason, where network namespaces are not permitted (not
# root, a container without CAP_SYS_ADMIN, a kernel without veth, tbf or
# cls_bpf) or a tool they call is missing (scripts/deps.sh installs them);
# with CLARION_REQUIRE_TOOLS=1 (CI) a missing tool fails. About a minute.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"
SC_NAME=scenarios

tools=(ip tc iperf3 tcpdump tshark ethtool python3 timeout ping taskset curl nats-server)
if [ "${CLARION_REQUIRE_TOOLS:-0}" = 1 ]; then
    sc_need_tools "${tools[@]}"
elif ! sc_have_tools "${tools[@]}"; then
    echo "scenarios: skipped the live scenario runs (see the reason above; scripts/deps.sh installs them as root); the committed captures are still tested" >&2
    exit 0
fi
if ! can_use_netns; then
    echo "scenarios: skipped the live scenario runs (see the reason above); the committed captures are still tested" >&2
    exit 0
fi

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$here/run-all.sh" "$out"
cd "$here/.."
CLARION_SCENARIOS_DIR=$out cargo test --release --locked -p clarion-conformance --test scenarios -- --nocapture
# Live capture against tcpdump's capture of the same traffic: AF_PACKET and
# AF_XDP (native and generic XDP), one worker and two merged ones.
cargo build --release --locked -p clarion-cli
"$here/live.sh" "$out/live"
"$here/live.sh" "$out/live-2" -- --workers 2
"$here/live.sh" "$out/xdp" -- --source xdp --xdp-mode generic
"$here/live.sh" "$out/xdp-2" -- --source xdp --xdp-mode native --workers 2
# Network-wide events from live agents over NATS against the captures of
# their interfaces: one worker each, and two merged.
"$here/agents.sh" "$out/agents"
"$here/agents.sh" "$out/agents-2" -- --workers 2
