#!/usr/bin/env bash
# The whole test suite: formatting, lints, docs, dependency licences and sources, unit tests and the
# end-to-end suite through the HTTP API.
# Needs root (the e2e tests start real servers that create namespaces and cgroups).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/deps.sh
[ "$(id -u)" = 0 ] || { echo "test.sh: run as root (sudo $0)" >&2; exit 1; }

cargo fmt --all -- --check
cargo clippy --locked --workspace --all-targets -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --locked --workspace --no-deps
# Licences, duplicate versions (warnings only) and sources (crates.io only), as deny.toml says.
# Advisories are left out: their database is downloaded from a git host this machine cannot reach.
need_cargo_deny
cargo deny check licenses bans sources
if cargo nextest --version >/dev/null 2>&1; then
    cargo nextest run --locked --workspace --no-fail-fast
    # The fairness suite measures one tenant's service under another's abuse: it runs alone, after the rest.
    cargo nextest run --locked -p sandlot --test fairness --run-ignored only --no-capture
else
    cargo test --locked --workspace --no-fail-fast
    cargo test --locked -p sandlot --test fairness -- --ignored --test-threads 1 --nocapture
fi
