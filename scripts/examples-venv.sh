#!/usr/bin/env bash
# Makes, once per machine, the Python venv of the agent framework examples' tests (examples/tests): the
# OpenAI Agents SDK, LangChain's core, httpx, setuptools, pytest and pytest-asyncio, pinned in
# examples/tests/requirements.txt, from PyPI; then installs the Python SDK (sdk/python) from this checkout
# with no network (`pip install --no-index --no-build-isolation`). Prints the venv's directory.
#
# Cached as /var/cache/sandlot-examples/venv-<hash of requirements.txt> (SANDLOT_EXAMPLES_CACHE changes the
# directory): a changed pin makes a new venv (and removes the stale ones). The SDK is reinstalled on every
# call (a second, offline and cheap), so the venv always holds this checkout's code. A venv records its own
# path in its scripts, so it is made under its final name; the `.complete` marker, written last, is what
# says the requirements' install finished.
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${SANDLOT_EXAMPLES_CACHE:-/var/cache/sandlot-examples}
python=${PYTHON:-python3}
hash=$( (cat examples/tests/requirements.txt; "$python" --version) | sha256sum | cut -c1-16)
venv=$cache/venv-$hash
if [ ! -f "$venv/.complete" ]; then
    mkdir -p "$cache"
    rm -rf "$venv"
    "$python" -m venv "$venv" >&2
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r examples/tests/requirements.txt >&2 || {
        rm -rf "$venv"
        echo "examples-venv: installing examples/tests/requirements.txt from PyPI failed" >&2
        exit 1
    }
    touch "$venv/.complete"
    find "$cache" -maxdepth 1 -name 'venv-*' ! -name "venv-$hash" -exec rm -rf {} +
fi
# A copy of the source, so setuptools' build directory and egg-info land outside the checkout.
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
cp -r sdk/python/. "$src"
rm -rf "$src/tests" "$src/build" "$src"/*.egg-info
"$venv/bin/pip" install --quiet --disable-pip-version-check --no-index --no-build-isolation --force-reinstall \
    --no-deps "$src" >&2 || {
    echo "examples-venv: installing the SDK from sdk/python offline failed" >&2
    exit 1
}
echo "$venv"
