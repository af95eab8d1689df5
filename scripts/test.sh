#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit tests and the end-to-end suite through the HTTP API.
# Needs root (the e2e tests start real servers that create namespaces and cgroups).
set -euo pipefail
cd "$(dirname "$0")/.."
# btrfs-progs: the layers volume (per-sandbox disk limits); bubblewrap: the benchmark's baseline.
need=()
command -v mkfs.btrfs >/dev/null || need+=(btrfs-progs)
command -v bwrap >/dev/null || need+=(bubblewrap)
if [ ${#need[@]} -gt 0 ] && [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
[ "$(id -u)" = 0 ] || { echo "test.sh: run as root (sudo $0)" >&2; exit 1; }

cargo fmt --all -- --check
cargo clippy --locked --workspace --all-targets -- -D warnings
if cargo nextest --version >/dev/null 2>&1; then
    cargo nextest run --locked --workspace --no-fail-fast
else
    cargo test --locked --workspace --no-fail-fast
fi
