#!/usr/bin/env bash
# Builds sandlot, starts a server in the background (state in /var/lib/sandlot, log in
# /var/lib/sandlot/serve.log) and runs one command in a fresh sandbox on the default `host` image.
# Needs root (namespaces, cgroups, per-sandbox uid ranges) and a Rust toolchain (cargo).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/deps.sh
[ "$(id -u)" = 0 ] || { echo "quickstart: run as root (sudo $0): sandlot creates namespaces and cgroups" >&2; exit 1; }
command -v cargo >/dev/null || { echo "quickstart: cargo not found; install Rust from https://rustup.rs" >&2; exit 1; }

cargo build --release --locked -p sandlot
install -m 0755 target/release/sandlot /usr/local/bin/sandlot

state=${SANDLOT_STATE_DIR:-/var/lib/sandlot}
export SANDLOT_URL=${SANDLOT_URL:-http://127.0.0.1:7423}
if ! curl -fsS "$SANDLOT_URL/healthz" >/dev/null 2>&1; then
    mkdir -p "$state"
    nohup sandlot serve --state-dir "$state" >"$state/serve.log" 2>&1 &
    for _ in $(seq 1 100); do
        curl -fsS "$SANDLOT_URL/healthz" >/dev/null 2>&1 && break
        sleep 0.1
    done
    echo "sandlot: server started (pid $!, log $state/serve.log)"
fi
export SANDLOT_API_KEY=$(cat "$state/admin.key")
echo "sandlot: running a command in a fresh sandbox"
sandlot run -- python3 -c 'import os, socket; print("hello from", socket.gethostname(), "as uid", os.getuid())'
echo
echo "Next: export SANDLOT_API_KEY=\$(sudo cat $state/admin.key) and try \`sandlot run -- sh -c 'ls /; id'\`"
