#!/usr/bin/env bash
# Runs the README's test command as a newcomer's fresh machine would: with
# nothing but a Rust toolchain. The Debian tools of scripts/deps.sh are
# hidden (in a private mount namespace each is covered by an empty file
# that cannot be executed, so `command -v` and exec both miss it) and
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
hide=(nats-server openssl ip tc iperf3 tcpdump tshark capinfos ethtool ping python3 curl)
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
# shellcheck disable=SC2016
unshare --mount --propagation private bash -c '
  set -euo pipefail
  blank=$(mktemp)
  chmod 0644 "$blank"
  for tool in "$@"; do
    for p in $(command -v "$tool" 2>/dev/null) /usr/sbin/$tool /usr/bin/$tool /sbin/$tool /bin/$tool; do
      [ -e "$p" ] || continue
      mount --bind "$blank" "$(readlink -f "$p")"
    done
    if command -v "$tool" >/dev/null 2>&1; then echo "fresh-machine: cannot hide $tool" >&2; exit 1; fi
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
