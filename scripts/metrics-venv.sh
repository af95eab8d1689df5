#!/usr/bin/env bash
# Makes, once per machine, the Python venv of the metrics suite (tests/metrics): the Prometheus
# text parser (`prometheus-client`) and pytest, pinned in tests/metrics/requirements.txt, from PyPI.
# Prints the venv's directory.
#
# Cached as /var/cache/sandlot-metrics/venv-<hash> (SANDLOT_METRICS_CACHE changes the
# directory); see scripts/pinned-venv.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/pinned-venv.sh
venv=$(pinned_venv metrics-venv tests/metrics/requirements.txt "${SANDLOT_METRICS_CACHE:-/var/cache/sandlot-metrics}")
echo "$venv"
