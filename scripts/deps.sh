#!/usr/bin/env bash
# The Debian packages the tests call, in one place; scripts/test.sh and
# .ci/run run this first.
#
# Usage: bash scripts/deps.sh
#   As root with apt-get: installs the missing ones, saying which.
#   Otherwise (not root, no apt-get, CLARION_NO_INSTALL=1, or apt-get
#   failing, e.g. offline): says what is missing and which tests will skip,
#   and exits 0; those tests skip with the reason.
#   CLARION_REQUIRE_TOOLS=1 (CI) turns every missing tool into a failure.
#   Then scripts/pyenv.sh makes the venv of the Python readers (PyPI).
set -uo pipefail

# tool:package:the tests that need it
DEPS=(
  "nats-server:nats-server:the NATS transport (a real server)"
  "openssl:openssl:NATS over TLS"
  "ip:iproute2:live capture and the scenarios (network namespaces)"
  "tc:iproute2:the scenarios (shaped links)"
  "iperf3:iperf3:the scenarios (TCP and UDP traffic)"
  "tcpdump:tcpdump:live capture and the scenarios (reference captures, BPF filters)"
  "tshark:tshark:the scenarios (loss and RTT reference)"
  "capinfos:wireshark-common:pcapng files read by Wireshark's tools (crates/capture/tests/pcapng_tools.rs)"
  "ethtool:ethtool:the scenarios (offloads off)"
  "ping:iputils-ping:the scenarios (links up)"
  "python3:python3:live capture and the scenarios (traffic senders)"
  "curl:curl:the scenarios (metrics scrape)"
  "nfcapd:nfdump:IPFIX export to a real collector (crates/ipfix/tests/nfcapd.rs)"
  "nfdump:nfdump:IPFIX export to a real collector (crates/ipfix/tests/nfcapd.rs)"
  "tshark:tshark:exported header frames read by tshark (crates/headers/tests/frames.rs)"
  "tcpreplay:tcpreplay:export policies on live capture (crates/cli/tests/exports_live.rs, exports_runtime.rs)"
  "tcpreplay:tcpreplay:degraded mode live (crates/cli/tests/adapt_live.rs)"
  "taskset:util-linux:co-runners on another CPU than the monitor (crates/cli/tests/adapt_live.rs)"
  "prometheus:prometheus:the Grafana dashboard's series scraped by a real Prometheus (crates/cli/tests/prometheus.rs)"
  "promtool:prometheus:the metrics pages linted by Prometheus's parser (crates/cli/tests/prometheus.rs)"
  "nats-server:nats-server:the manager's alerts (crates/cli/tests/manager_alerts.rs)"
  "nats-server:nats-server:flow records and reports to a JetStream stream (crates/cli/tests/records_stream.rs)"
  "clickhouse-server:clickhouse-server:flow records inserted into a real ClickHouse (crates/cli/tests/records_clickhouse.rs)"
  "promtool:prometheus:the manager's alert delivery series linted (crates/cli/tests/manager_alerts.rs)"
  "prometheus-alertmanager:prometheus-alertmanager:alerts to a real Alertmanager, one firing and one resolved per episode (crates/alerts/tests/alertmanager.rs)"
  "objcopy:binutils:the Debian package (scripts/package-deb.sh splits the debug information off)"
  "mmdebstrap:mmdebstrap:the Debian package installed on a clean Debian (crates/cli/tests/package.rs)"
  "systemd-nspawn:systemd-container:the package's systemd unit started by systemd (crates/cli/tests/package.rs)"
  "tcpdump:tcpdump:outer and inner captures of real tunnel devices (crates/cli/tests/tunnels.rs)"
  "python3:python3:TCP through real tunnel devices (crates/cli/tests/tunnels.rs)"
  "ip:iproute2:VXLAN, Geneve, GRE and GRE-tap devices between namespaces (crates/cli/tests/tunnels.rs)"
  "ovs-vswitchd:openvswitch-switch:Geneve, GRE and VXLAN made by Open vSwitch's userspace datapath (crates/cli/tests/tunnels.rs)"
  "ovsdb-server:openvswitch-switch:Open vSwitch's database for the tunnel tests (crates/cli/tests/tunnels.rs)"
  "ovs-vsctl:openvswitch-switch:Open vSwitch's bridges and tunnel ports (crates/cli/tests/tunnels.rs)"
  "ovs-ofctl:openvswitch-switch:Open vSwitch's flows for GRE carrying IP (crates/cli/tests/tunnels.rs)"
  "chromium:chromium:the web console in headless Chromium, driven by Playwright (crates/cli/tests/console.rs; Node.js 20+ and npm come from elsewhere: Debian 12 has 18)"
  "tcpreplay:tcpreplay:the console's flows behind a firing, a capture replayed onto loopback under a live host (crates/cli/tests/console.rs)"
)

# Ends here: the Python readers after the Debian packages (python3 first).
python_readers() { bash "$(dirname "$0")/pyenv.sh"; exit $?; }

have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || [ -x "/sbin/$1" ]; }

missing_tools=() missing_pkgs=() missing_why=()
for d in "${DEPS[@]}"; do
  tool=${d%%:*} rest=${d#*:}
  pkg=${rest%%:*} why=${rest#*:}
  have "$tool" && continue
  missing_tools+=("$tool")
  missing_why+=("  $tool ($pkg): $why")
  case " ${missing_pkgs[*]} " in *" $pkg "*) ;; *) missing_pkgs+=("$pkg") ;; esac
done
[ ${#missing_tools[@]} = 0 ] && python_readers

why_not=""
if [ "${CLARION_NO_INSTALL:-0}" = 1 ]; then
  why_not="CLARION_NO_INSTALL=1"
elif [ "$(id -u)" != 0 ]; then
  why_not="not root"
elif ! command -v apt-get >/dev/null 2>&1; then
  why_not="no apt-get"
fi

if [ -z "$why_not" ]; then
  echo "deps: installing ${missing_pkgs[*]} (apt-get, about a minute):" >&2
  printf '%s\n' "${missing_why[@]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  # tshark asks whether non-root users may capture; answer no.
  echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections 2>/dev/null
  if apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing_pkgs[@]}" >/dev/null; then
    python_readers
  fi
  why_not="apt-get failed (offline?)"
fi

echo "deps: not installing ${missing_pkgs[*]} ($why_not); these tests will be skipped, each saying why:" >&2
printf '%s\n' "${missing_why[@]}" >&2
if [ "${CLARION_REQUIRE_TOOLS:-0}" = 1 ]; then
  echo "deps: CLARION_REQUIRE_TOOLS=1: every tool is required" >&2
  exit 1
fi
[ "$why_not" = "not root" ] && echo "deps: run as root (sudo bash scripts/test.sh) to install them" >&2
python_readers
