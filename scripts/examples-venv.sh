#!/usr/bin/env bash
# Makes, once per machine, the Python venv of the agent framework examples' tests (examples/tests): the
# OpenAI Agents SDK, LangChain's core, httpx, setuptools, pytest and pytest-asyncio, pinned in
# examples/tests/requirements.txt, from PyPI; then installs the Python SDK (sdk/python) from this checkout
# with no network (`pip install --no-index --no-build-isolation`). Prints the venv's directory.
#
# Cached as /var/cache/sandlot-examples/venv-<hash> (SANDLOT_EXAMPLES_CACHE changes the
# directory); see scripts/pinned-venv.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/pinned-venv.sh
venv=$(pinned_venv examples-venv examples/tests/requirements.txt "${SANDLOT_EXAMPLES_CACHE:-/var/cache/sandlot-examples}")
install_sdk_offline examples-venv "$venv"
echo "$venv"
