#!/usr/bin/env bash
# Makes, once per machine, the Python venv of the OpenAPI checks (tests/openapi): openapi-spec-validator,
# jsonschema, pytest and schemathesis (with its dependencies), pinned in tests/openapi/requirements.txt, from PyPI.
# Prints the venv's directory.
#
# Cached as /var/cache/sandlot-openapi/venv-<hash> (SANDLOT_OPENAPI_CACHE changes the
# directory); see scripts/pinned-venv.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/pinned-venv.sh
venv=$(pinned_venv openapi-venv tests/openapi/requirements.txt "${SANDLOT_OPENAPI_CACHE:-/var/cache/sandlot-openapi}")
echo "$venv"
