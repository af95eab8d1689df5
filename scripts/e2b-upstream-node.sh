#!/usr/bin/env bash
# Makes, once per machine, the node_modules of E2B's own JavaScript test suites (tests/e2b-upstream):
# for each SUITE given (default: every one with a package-lock.json there), `npm ci` from the npm
# registry of that suite's committed package.json and package-lock.json, in a directory of the cache
# keyed on both files and Node's version. Prints, one a line, each SUITE's node_modules directory
# (run.py links the suite's own node_modules to it, as the suite's sources import packages by name).
#
# Cached as /var/cache/sandlot-e2b-upstream/node-<suite>-<hash> (SANDLOT_E2B_UPSTREAM_CACHE changes
# the directory); a changed lockfile makes a new one and removes the stale ones of that suite. The
# `.complete` marker, written last, is what says an install finished.
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${SANDLOT_E2B_UPSTREAM_CACHE:-/var/cache/sandlot-e2b-upstream}
suites=("$@")
if [ ${#suites[@]} -eq 0 ]; then
    for lock in tests/e2b-upstream/*/package-lock.json; do
        suites+=("$(basename "$(dirname "$lock")")")
    done
fi
for suite in "${suites[@]}"; do
    src=tests/e2b-upstream/$suite
    [ -f "$src/package-lock.json" ] || { echo "e2b-upstream-node: no $src/package-lock.json" >&2; exit 1; }
    hash=$( (cat "$src/package.json" "$src/package-lock.json"; node --version) | sha256sum | cut -c1-16)
    dir=$cache/node-$suite-$hash
    if [ ! -f "$dir/.complete" ]; then
        mkdir -p "$cache"
        rm -rf "$dir"
        mkdir "$dir"
        cp "$src/package.json" "$src/package-lock.json" "$dir/"
        # No install scripts: none of these packages needs one to run under Node (esbuild's binary
        # is its platform package, msw's only copies a browser worker).
        (cd "$dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >&2) || {
            rm -rf "$dir"
            echo "e2b-upstream-node: npm ci of $src/package-lock.json failed" >&2
            exit 1
        }
        touch "$dir/.complete"
        find "$cache" -maxdepth 1 -name "node-$suite-*" ! -name "node-$suite-$hash" -exec rm -rf {} +
    fi
    echo "$dir/node_modules"
done
