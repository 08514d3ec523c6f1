#!/usr/bin/env bash
# The Python readers that tests start (pyarrow, pandas, DuckDB, Polars:
# crates/parquet/tests/pyarrow.rs; DuckDB as the console's reference for
# the flows behind a firing: crates/cli/tests/console.rs), in a venv at
# target/pyenv, from PyPI
# wheels (no source builds: about 20 s and 150 MB). scripts/deps.sh runs
# this after the Debian packages.
#
# Usage: bash scripts/pyenv.sh
#   Does nothing when target/pyenv already has these versions. Needs
#   python3 with its venv module (Debian: python3-venv, installed here as
#   root with apt-get) and PyPI. Otherwise (CLARION_NO_INSTALL=1, no
#   python3, no venv module and not root, offline) says why and exits 0;
#   the tests that need it skip, saying so.
#   CLARION_REQUIRE_TOOLS=1 (CI) turns that into a failure.
set -uo pipefail
cd "$(dirname "$0")/.."

# Pinned: versions with wheels for CPython 3.11 (Debian bookworm) and later.
PACKAGES=(pyarrow==26.0.1 pandas==3.1.1 numpy==2.4.6 duckdb==2.0.1 polars==2.1.0)
venv=target/pyenv
stamp=$venv/clarion-packages.txt

if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "${PACKAGES[*]}" ] &&
  "$venv/bin/python" -c 'import pyarrow, pandas, duckdb, polars' 2>/dev/null; then
  exit 0
fi

skip() {
  echo "pyenv: not making $venv ($1); the Parquet readers' test (pyarrow, DuckDB, pandas, Polars) will be skipped" >&2
  if [ "${CLARION_REQUIRE_TOOLS:-0}" = 1 ]; then
    echo "pyenv: CLARION_REQUIRE_TOOLS=1: the Python readers are required" >&2
    exit 1
  fi
  exit 0
}

[ "${CLARION_NO_INSTALL:-0}" = 1 ] && skip "CLARION_NO_INSTALL=1"
command -v python3 >/dev/null 2>&1 || skip "no python3"
if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 ||
    skip "python3 has no venv module; run as root to install python3-venv"
  echo "deps: installing python3-venv (apt-get)" >&2
  export DEBIAN_FRONTEND=noninteractive
  { apt-get update -qq && apt-get install -y -qq --no-install-recommends python3-venv >/dev/null; } ||
    skip "apt-get install python3-venv failed (offline?)"
fi

# Made beside and moved in whole, so a failed install leaves no venv
# that the tests would take for a working one.
echo "pyenv: making $venv with ${PACKAGES[*]} (PyPI wheels, about 20 s)" >&2
rm -rf "$venv.new"
mkdir -p target
python3 -m venv "$venv.new" || skip "python3 -m venv failed"
if ! "$venv.new/bin/python" -m pip install -q --disable-pip-version-check --no-input \
  --only-binary=:all: --timeout 60 "${PACKAGES[@]}"; then
  rm -rf "$venv.new"
  skip "pip install failed (offline?)"
fi
printf '%s\n' "${PACKAGES[*]}" >"$venv.new/clarion-packages.txt"
rm -rf "$venv"
mv "$venv.new" "$venv"
