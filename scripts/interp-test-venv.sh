#!/usr/bin/env bash
# Makes (once per requirements file) the virtualenv the code interpreter's runner tests use
# (tests/code-interpreter/test_runner.py): python3 with resources/code-interpreter/requirements.txt and
# pytest from PyPI, never the system python's packages. Prints the venv's python.
#
# Cached under ${SANDLOT_INTERP_VENV_CACHE:-/var/cache/sandlot-images}/interp-venv-<hash>, the hash
# covering the requirements, so a changed pin makes a new venv. Needs PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."
req=resources/code-interpreter/requirements.txt
cache=${SANDLOT_INTERP_VENV_CACHE:-/var/cache/sandlot-images}
hash=$( (cat "$req"; echo pytest==9.2.0) | sha256sum | cut -c1-16)
venv=$cache/interp-venv-$hash
if [ -x "$venv/bin/python" ] && [ -f "$venv/.complete" ]; then
    echo "$venv/bin/python"
    exit 0
fi
mkdir -p "$cache"
rm -rf "$venv"
python3 -m venv "$venv" >&2 || { echo "interp-test-venv: python3 -m venv failed (install python3-venv)" >&2; exit 1; }
"$venv/bin/pip" install -q --only-binary :all: -r "$req" pytest==9.2.0 >&2 ||
    { echo "interp-test-venv: pip could not install $req from PyPI (is pypi.org reachable?)" >&2; exit 1; }
touch "$venv/.complete"
echo "$venv/bin/python"
