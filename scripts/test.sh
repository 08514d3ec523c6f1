#!/usr/bin/env bash
# Runs every check CI runs: formatting, lints, and all tests (unit, property,
# golden, documentation), then the live scenarios (real TCP between network
# namespaces; as root, else skipped with the reason).
# Usage: bash scripts/test.sh
# First installs the Debian packages the tests call when run as root
# (scripts/deps.sh says which); without them those tests skip, saying why.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== test tools (scripts/deps.sh)"
bash scripts/deps.sh
echo "== web console (console/: npm ci, rebuild, committed dist, typecheck)"
# Before cargo test: the console's Playwright test uses console/node_modules.
if command -v npm >/dev/null 2>&1 && node -e 'process.exit(Number(process.versions.node.split(".")[0]) < 20 ? 1 : 0)'; then
  (cd console && npm ci --no-audit --no-fund --loglevel=error && npm run --silent build && npm run --silent typecheck)
  if [ -n "$(git status --porcelain -- console/dist)" ]; then
    git status --short -- console/dist
    echo "console/dist is not the build of console/src: run 'npm run build' in console/ and commit console/dist"
    exit 1
  fi
else
  echo "skipped: npm with Node.js 20 or later is not installed (the console's Playwright test skips too)"
fi
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== import circles between a crate's files (scripts/import-cycles.py)"
if command -v python3 >/dev/null 2>&1; then
  python3 scripts/import-cycles.py crates/cli crates/agent crates/host-api crates/host crates/live crates/pipeline
else
  echo "skipped: python3 is not installed"
fi
echo "== cargo test (unit, property, golden, doc)"
# Property tests run 10,000 generated cases each unless PROPTEST_CASES says otherwise.
cargo test --workspace --locked --release
echo "== live scenarios (network namespaces; skipped where not permitted)"
bash scenarios/check.sh
echo "== all checks passed"
