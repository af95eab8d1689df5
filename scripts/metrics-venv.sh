#!/usr/bin/env bash
# Makes, once per machine, the Python venv of the metrics suite (tests/metrics): the Prometheus
# text parser (`prometheus-client`) and pytest, pinned in tests/metrics/requirements.txt, from PyPI.
# Prints the venv's directory.
#
# Cached as /var/cache/sandlot-metrics/venv-<hash of requirements.txt> (SANDLOT_METRICS_CACHE changes the
# directory): a changed pin makes a new venv (and removes the stale ones); an unchanged one costs nothing.
# A venv records its own path in its scripts, so it is made under its final name; the `.complete` marker,
# written last, is what says an install finished.
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${SANDLOT_METRICS_CACHE:-/var/cache/sandlot-metrics}
python=${PYTHON:-python3}
hash=$( (cat tests/metrics/requirements.txt; "$python" --version) | sha256sum | cut -c1-16)
venv=$cache/venv-$hash
if [ -f "$venv/.complete" ]; then
    echo "$venv"
    exit 0
fi
mkdir -p "$cache"
rm -rf "$venv"
"$python" -m venv "$venv" >&2
"$venv/bin/pip" install --quiet --disable-pip-version-check -r tests/metrics/requirements.txt >&2 || {
    rm -rf "$venv"
    echo "metrics-venv: installing tests/metrics/requirements.txt from PyPI failed" >&2
    exit 1
}
touch "$venv/.complete"
find "$cache" -maxdepth 1 -name 'venv-*' ! -name "venv-$hash" -exec rm -rf {} +
echo "$venv"
