#!/usr/bin/env bash
# The whole test suite: formatting, lints, docs, dependency licences and sources, unit tests and the
# end-to-end suite through the HTTP API.
# Needs root (the e2e tests start real servers that create namespaces and cgroups).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/deps.sh
[ "$(id -u)" = 0 ] || { echo "test.sh: run as root (sudo $0)" >&2; exit 1; }
# The Debian 12 image the images_debian e2e tests import (built with mmdebstrap once per machine; two
# statements, so that set -e stops here when it cannot be built).
SANDLOT_DEBIAN_IMAGE=$(scripts/debian-image.sh)
export SANDLOT_DEBIAN_IMAGE

cargo fmt --all -- --check
cargo clippy --locked --workspace --all-targets -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --locked --workspace --no-deps
# Licences, duplicate versions (warnings only) and sources (crates.io only), as deny.toml says.
# Advisories are left out: their database is downloaded from a git host this machine cannot reach.
need_cargo_deny
cargo deny check licenses bans sources
# The control layer's tests (state machine, quotas, expiry, recovery over the fake driver) need no root:
# run them as `nobody` too, so a change that makes them need it fails here.
control_tests=$(cargo test --locked -p sandlot-control --lib --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("profile", {}).get("test") and m.get("executable"):
        print(m["executable"])')
(cd /tmp && su nobody -s /bin/sh -c "$control_tests -q")
# On a pure cgroup v2 host a daemon needs a cgroup of its own, and the suites make one per test server
# beside the test process's cgroup: run them from a leaf of a cgroup that delegates memory, pids and cpu.
# (This moves only this script's own shell, and puts it back when the script ends.)
if [ -f /sys/fs/cgroup/cgroup.controllers ] && ! grep -q ' - cgroup cgroup .*memory' /proc/self/mountinfo; then
    v2_home=$(sed -n 's/^0:://p' /proc/self/cgroup)
    v2_tests=/sys/fs/cgroup/sandlot-tests-$$
    mkdir -p "$v2_tests/runner"
    grep -qw memory /sys/fs/cgroup/cgroup.subtree_control || echo "+memory +pids +cpu" >/sys/fs/cgroup/cgroup.subtree_control
    echo $$ >"$v2_tests/runner/cgroup.procs"
    echo "+memory +pids +cpu" >"$v2_tests/cgroup.subtree_control"
    trap 'echo $$ >"/sys/fs/cgroup$v2_home/cgroup.procs" 2>/dev/null; rmdir "$v2_tests/runner" "$v2_tests" 2>/dev/null' EXIT
fi
if cargo nextest --version >/dev/null 2>&1; then
    cargo nextest run --locked --workspace --no-fail-fast
    # The fairness suite measures one tenant's service under another's abuse: it runs alone, after the rest.
    cargo nextest run --locked -p sandlot --test fairness --run-ignored only --no-capture
else
    cargo test --locked --workspace --no-fail-fast
    cargo test --locked -p sandlot --test fairness -- --ignored --test-threads 1 --nocapture
fi
# The fuzz targets of fuzz/ (docs/TESTING.md, "Fuzzing"), 20 s each on their seed corpora: about four minutes.
scripts/fuzz.sh 20
# The E2B-compatibility suite: the official `e2b` and `e2b-code-interpreter` SDKs (pinned, in a venv made
# once per machine) against a real server (docs/TESTING.md, "The E2B suite").
e2b_venv=$(scripts/e2b-venv.sh)
cargo build --locked -p sandlot
SANDLOT_BIN=$PWD/target/debug/sandlot "$e2b_venv/bin/pytest" -q tests/e2b
# The reference suite (docs/IMAGES.md, docs/TESTING.md): Dockerfile builds compared file by file with
# Debian's buildah, pulls with skopeo + umoci, shell background jobs with bwrap's. About two and a half
# minutes.
SANDLOT_BIN=$PWD/target/debug/sandlot "$e2b_venv/bin/pytest" -q -p no:asyncio tests/reference
# E2B's own SDK and code-interpreter test suites, vendored unchanged in tests/e2b-upstream, against a real
# server with a TLS listener and a wildcard DNS stand-in; each test's expected outcome is in the suite's
# outcomes.txt (docs/TESTING.md, "E2B's own suites"): the Python and the JavaScript ones. About eleven minutes.
"$(scripts/e2b-upstream-venv.sh)/bin/python" tests/e2b-upstream/run.py --suite all
# The `e2b` npm package's main calls, pinned in tests/e2b-node/package-lock.json.
(cd tests/e2b-node && npm ci --no-audit --no-fund --silent && SANDLOT_BIN=$PWD/../../target/debug/sandlot node --test)
# The code interpreter's runner (resources/code-interpreter/server.py) on the host, in a venv of its
# pinned packages (ipykernel, matplotlib, numpy, pandas).
"$(scripts/interp-test-venv.sh)" -m pytest -q tests/code-interpreter
# The Python SDK (sdk/python) against a real server, sync and async; its mypy --strict check is a test.
sdk_venv=$(scripts/sdk-python-venv.sh)
SANDLOT_BIN=$PWD/target/debug/sandlot "$sdk_venv/bin/pytest" -q sdk/python/tests
# The TypeScript SDK (sdk/typescript): built with its pinned tsc, then its suite against a real server.
(cd sdk/typescript && npm ci --no-audit --no-fund --silent && npm run build --silent &&
    SANDLOT_BIN=$PWD/../../target/debug/sandlot node --test test/)
# The web dashboard (/ui/) in headless Chromium through puppeteer-core (pinned in tests/ui/package-lock.json),
# and its vendored xterm.js files against the pinned npm packages they came from.
(cd tests/ui && npm ci --no-audit --no-fund --silent && SANDLOT_BIN=$PWD/../../target/debug/sandlot node --test)
scripts/vendor-ui.sh --check
# The agent framework examples (examples/): their tools called the frameworks' own way against a real server.
examples_venv=$(scripts/examples-venv.sh)
SANDLOT_BIN=$PWD/target/debug/sandlot "$examples_venv/bin/pytest" -q examples/tests
# The MCP tools with the official MCP Python client, over stdio (`sandlot mcp`) and streamable HTTP (`/mcp`).
SANDLOT_BIN=$PWD/target/debug/sandlot "$(scripts/mcp-venv.sh)/bin/pytest" -q tests/mcp
# GET /metrics read by Prometheus's own text parser (prometheus-client), with the scrape token.
SANDLOT_BIN=$PWD/target/debug/sandlot "$(scripts/metrics-venv.sh)/bin/pytest" -q tests/metrics
# The OpenAPI document (docs/API.md, "OpenAPI"): valid OpenAPI 3.1, the Python SDK's models agree with it,
# and schemathesis finds no 5xx and no undocumented answer from a real server (docs/TESTING.md, "The OpenAPI checks").
SANDLOT_BIN=$PWD/target/debug/sandlot "$(scripts/openapi-venv.sh)/bin/pytest" -q tests/openapi
