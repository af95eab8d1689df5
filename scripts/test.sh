#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit tests and the end-to-end suite through the HTTP API.
# Needs root (the e2e tests start real servers that create namespaces and cgroups).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/deps.sh
[ "$(id -u)" = 0 ] || { echo "test.sh: run as root (sudo $0)" >&2; exit 1; }

cargo fmt --all -- --check
cargo clippy --locked --workspace --all-targets -- -D warnings
if cargo nextest --version >/dev/null 2>&1; then
    cargo nextest run --locked --workspace --no-fail-fast
    # The fairness suite measures one tenant's service under another's abuse: it runs alone, after the rest.
    cargo nextest run --locked -p sandlot --test fairness --run-ignored only --no-capture
else
    cargo test --locked --workspace --no-fail-fast
    cargo test --locked -p sandlot --test fairness -- --ignored --test-threads 1 --nocapture
fi
