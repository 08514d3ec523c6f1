#!/usr/bin/env bash
# Runs the README's test command as a newcomer's fresh machine would: with
# nothing but a Rust toolchain. The Debian tools of scripts/deps.sh are
# hidden (in a private mount namespace, each directory holding one is
# covered by an overlay in which its name is deleted) and
# installing is off (CLARION_NO_INSTALL=1). The command must pass, and the
# tests needing those tools must say they were skipped and why.
#
# Usage (as root): bash .ci/fresh-machine.sh   (.ci/run runs it first)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ] || ! command -v unshare >/dev/null; then
  echo "fresh-machine: needs root and unshare (a private mount namespace); not checked" >&2
  exit 0
fi
hide=(nats-server openssl ip tc iperf3 tcpdump tshark capinfos ethtool ping python3 curl nfcapd nfdump tcpreplay prometheus promtool prometheus-alertmanager clickhouse-server chromium mmdebstrap systemd-nspawn ovs-vswitchd ovsdb-server ovsdb-tool ovs-vsctl ovs-appctl ovs-ofctl)
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
# shellcheck disable=SC2016
unshare --mount --propagation private bash -c '
  set -euo pipefail
  # Each directory holding a hidden tool gets an overlay whose upper layer
  # has a whiteout (a 0/0 character device) for it: the name is gone.
  scratch=$(mktemp -d)
  mount -t tmpfs fresh "$scratch"
  declare -A dirs=()
  for tool in "$@"; do
    for p in $(type -ap "$tool") /usr/sbin/$tool /sbin/$tool /usr/bin/$tool /bin/$tool; do
      [ -e "$p" ] || continue
      d=$(readlink -f "$(dirname "$p")")
      dirs[$d]+=" $tool"
    done
  done
  n=0
  for d in "${!dirs[@]}"; do
    n=$((n + 1))
    mkdir -p "$scratch/$n/upper" "$scratch/$n/work"
    for tool in ${dirs[$d]}; do
      [ -e "$scratch/$n/upper/$tool" ] || mknod "$scratch/$n/upper/$tool" c 0 0
    done
    mount -t overlay fresh -o "lowerdir=$d,upperdir=$scratch/$n/upper,workdir=$scratch/$n/work" "$d"
  done
  for tool in "$@"; do
    for p in $(type -ap "$tool") /usr/sbin/$tool /sbin/$tool; do
      [ -e "$p" ] || continue
      echo "fresh-machine: cannot hide $tool ($p)" >&2
      exit 1
    done
  done
  echo "fresh-machine: hidden: $*" >&2
  CLARION_NO_INSTALL=1 bash scripts/test.sh
' fresh "${hide[@]}" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
if [ "$status" != 0 ]; then
  echo "fresh-machine: the README's test command failed (status $status) without the optional tools" >&2
  exit 1
fi
for said in "deps: not installing" "scenarios: skipped the live scenario runs" "== all checks passed"; do
  if ! grep -qF "$said" "$log"; then
    echo "fresh-machine: expected the output to say \"$said\"" >&2
    exit 1
  fi
done
echo "fresh-machine: the README's test command passed without the optional tools, saying what it skipped" >&2
