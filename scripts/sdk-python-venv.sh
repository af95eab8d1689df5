#!/usr/bin/env bash
# Makes, once per machine, the Python venv of the Python SDK's tests (sdk/python/tests): httpx (the SDK's
# one runtime dependency), setuptools, pytest, pytest-asyncio and mypy, pinned in
# sdk/python/tests/requirements.txt, from PyPI; then installs the SDK itself from this checkout with no
# network (`pip install --no-index --no-build-isolation`), as README's offline install says. Prints the
# venv's directory.
#
# Cached as /var/cache/sandlot-sdk-python/venv-<hash> (SANDLOT_SDK_PYTHON_CACHE changes the
# directory); see scripts/pinned-venv.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/pinned-venv.sh
venv=$(pinned_venv sdk-python-venv sdk/python/tests/requirements.txt "${SANDLOT_SDK_PYTHON_CACHE:-/var/cache/sandlot-sdk-python}")
install_sdk_offline sdk-python-venv "$venv"
echo "$venv"
