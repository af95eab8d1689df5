#!/usr/bin/env bash
# Makes, once per machine, the Python venv of the MCP suite (tests/mcp): the official MCP
# client (`mcp`) and pytest, pinned in tests/mcp/requirements.txt, from PyPI.
# Prints the venv's directory.
#
# Cached as /var/cache/sandlot-mcp/venv-<hash> (SANDLOT_MCP_CACHE changes the
# directory); see scripts/pinned-venv.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/pinned-venv.sh
venv=$(pinned_venv mcp-venv tests/mcp/requirements.txt "${SANDLOT_MCP_CACHE:-/var/cache/sandlot-mcp}")
echo "$venv"
