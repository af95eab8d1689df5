#!/usr/bin/env bash
# Makes, once per machine, the Python venv of the E2B-compatibility suite (tests/e2b): the official
# `e2b` and `e2b-code-interpreter` SDKs and pytest, pinned in tests/e2b/requirements.txt, from PyPI.
# Prints the venv's directory.
#
# Cached as /var/cache/sandlot-e2b/venv-<hash> (SANDLOT_E2B_CACHE changes the
# directory); see scripts/pinned-venv.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/pinned-venv.sh
venv=$(pinned_venv e2b-venv tests/e2b/requirements.txt "${SANDLOT_E2B_CACHE:-/var/cache/sandlot-e2b}")
echo "$venv"
