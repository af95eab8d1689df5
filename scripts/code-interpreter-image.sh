#!/usr/bin/env bash
# Builds sandlot's code-interpreter image (images/code-interpreter/Dockerfile) on the server that
# SANDLOT_URL and SANDLOT_API_KEY name, offline: the pinned wheels of
# resources/code-interpreter/requirements.txt are downloaded on this host once (into
# ${SANDLOT_IMAGE_CACHE:-/var/cache/sandlot-images}/code-interpreter-wheels-<hash>), put in the build
# context with the runner, and installed by the Dockerfile with `pip --no-index`, so the build sandbox
# needs no network. The base image debian:bookworm must exist on the server (scripts/debian-image.sh
# builds its tarball; `sandlot image import --name debian:bookworm <tarball>`).
#
# Usage: scripts/code-interpreter-image.sh [IMAGE_NAME]   (default: code-interpreter)
# Needs: pip on this host (python3 -m pip) with PyPI reachable the first time, and the sandlot CLI
# (SANDLOT_BIN, default `sandlot` on PATH).
set -euo pipefail
cd "$(dirname "$0")/.."

name=${1:-code-interpreter}
sandlot=${SANDLOT_BIN:-sandlot}
cache=${SANDLOT_IMAGE_CACHE:-/var/cache/sandlot-images}
req=resources/code-interpreter/requirements.txt

say() { printf 'code-interpreter-image: %s\n' "$*" >&2; }
die() {
    say "$*"
    exit 1
}

command -v "$sandlot" >/dev/null || die "the sandlot CLI ($sandlot) is not on PATH; set SANDLOT_BIN"
python3 -m pip --version >/dev/null 2>&1 || die "pip is missing on this host (apt-get install python3-pip)"

# The wheels for the image's python (CPython 3.11 on x86_64 glibc 2.36), not for this host's.
hash=$(sha256sum "$req" | cut -c1-16)
wheels=$cache/code-interpreter-wheels-$hash
if [ ! -f "$wheels/.complete" ]; then
    say "downloading the pinned wheels into $wheels (once)"
    rm -rf "$wheels"
    mkdir -p "$wheels"
    python3 -m pip download --quiet --disable-pip-version-check --only-binary :all: --no-deps \
        --python-version 3.11 --implementation cp --abi cp311 --abi abi3 --abi none \
        --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
        --platform manylinux_2_34_x86_64 --platform any \
        -d "$wheels" -r "$req" >&2 ||
        die "pip download failed for $req (is PyPI reachable? the message above says which package)"
    touch "$wheels/.complete"
fi

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
cp images/code-interpreter/Dockerfile "$ctx/Dockerfile"
mkdir "$ctx/wheels" "$ctx/code-interpreter"
cp "$wheels"/*.whl "$ctx/wheels/"
cp "$req" "$ctx/wheels/requirements.txt"
cp resources/code-interpreter/server.py resources/code-interpreter/node_repl.js "$req" "$ctx/code-interpreter/"
say "building $name from $ctx"
"$sandlot" image build -t "$name" "$ctx" >&2 || die "sandlot image build failed (its output is above)"
echo "$name"
