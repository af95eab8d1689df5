#!/usr/bin/env bash
# Makes (once per requirements file) the virtualenv the code interpreter's runner tests use
# (tests/code-interpreter): python3 with resources/code-interpreter/requirements.txt and pytest from
# PyPI, never the system python's packages, and, where the host has npm, TypeScript from the npm
# registry in <venv>/node_modules (the version Debian's node-typescript in the image has), for the
# typescript context's tests. Prints the venv's python.
#
# Cached under ${SANDLOT_INTERP_VENV_CACHE:-/var/cache/sandlot-images}/interp-venv-<hash>, the hash
# covering the pins, so a changed pin makes a new venv. Needs PyPI (and the npm registry) the first time.
set -euo pipefail
cd "$(dirname "$0")/.."
req=resources/code-interpreter/requirements.txt
cache=${SANDLOT_INTERP_VENV_CACHE:-/var/cache/sandlot-images}
typescript=typescript@4.8.4
hash=$( (cat "$req"; echo pytest==9.2.0 "$typescript") | sha256sum | cut -c1-16)
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
if command -v npm >/dev/null; then
    npm install --silent --no-audit --no-fund --prefix "$venv" "$typescript" >&2 ||
        { echo "interp-test-venv: npm could not install $typescript (is registry.npmjs.org reachable?)" >&2; exit 1; }
fi
touch "$venv/.complete"
echo "$venv/bin/python"
