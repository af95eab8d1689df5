#!/usr/bin/env bash
# Makes, once per machine, the Python venv of the OpenAPI checks (tests/openapi): openapi-spec-validator,
# jsonschema and pytest, pinned in tests/openapi/requirements.txt, from PyPI.
# Prints the venv's directory.
#
# Cached as /var/cache/sandlot-openapi/venv-<hash of requirements.txt> (SANDLOT_OPENAPI_CACHE changes the
# directory): a changed pin makes a new venv (and removes the stale ones); an unchanged one costs nothing.
# A venv records its own path in its scripts, so it is made under its final name; the `.complete` marker,
# written last, is what says an install finished.
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${SANDLOT_OPENAPI_CACHE:-/var/cache/sandlot-openapi}
python=${PYTHON:-python3}
hash=$( (cat tests/openapi/requirements.txt; "$python" --version) | sha256sum | cut -c1-16)
venv=$cache/venv-$hash
if [ -f "$venv/.complete" ]; then
    echo "$venv"
    exit 0
fi
mkdir -p "$cache"
rm -rf "$venv"
"$python" -m venv "$venv" >&2
"$venv/bin/pip" install --quiet --disable-pip-version-check -r tests/openapi/requirements.txt >&2 || {
    rm -rf "$venv"
    echo "openapi-venv: installing tests/openapi/requirements.txt from PyPI failed" >&2
    exit 1
}
touch "$venv/.complete"
find "$cache" -maxdepth 1 -name 'venv-*' ! -name "venv-$hash" -exec rm -rf {} +
echo "$venv"
