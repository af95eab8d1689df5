#!/usr/bin/env bash
# Makes, once per machine, the Python venv of E2B's own test suites (tests/e2b-upstream): the `e2b`
# and `e2b-code-interpreter` SDKs at the versions the vendored suites were taken from, and the pytest
# plugins those suites use, pinned in tests/e2b-upstream/requirements.txt, from PyPI. Prints the venv's
# directory.
#
# Cached as /var/cache/sandlot-e2b-upstream/venv-<hash> (SANDLOT_E2B_UPSTREAM_CACHE changes the
# directory); see scripts/pinned-venv.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/pinned-venv.sh
venv=$(pinned_venv e2b-upstream-venv tests/e2b-upstream/requirements.txt "${SANDLOT_E2B_UPSTREAM_CACHE:-/var/cache/sandlot-e2b-upstream}")
echo "$venv"
