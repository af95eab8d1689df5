#!/usr/bin/env bash
# Builds sandlot's code-interpreter image (images/code-interpreter/Dockerfile) on the server that
# SANDLOT_URL and SANDLOT_API_KEY name, offline: the pinned wheels of
# resources/code-interpreter/requirements.txt are downloaded on this host once (into
# ${SANDLOT_IMAGE_CACHE:-/var/cache/sandlot-images}/code-interpreter-wheels-<hash>), put in the build
# context with the runner, and installed by the Dockerfile with `pip --no-index`, so the build sandbox
# needs no network. The Debian packages (node, R, the JDK, curl, procps) come in the base image: the
# `code-interpreter` flavour of scripts/debian-image.sh (a tarball cached by its recipe's hash), imported
# on the server as debian:bookworm-code-interpreter-<hash> when the server has no image of that name,
# and named in the build context's Dockerfile's FROM line.
#
# Usage: scripts/code-interpreter-image.sh [--public] [IMAGE_NAME]   (default: code-interpreter)
# --public (admin key only) publishes the image to every tenant, so E2B's `code-interpreter-v1`
# template works for all of them.
# Needs: pip on this host (python3 -m pip) with PyPI reachable the first time, root and Debian's archive
# the first time (mmdebstrap, for the base tarball), and the sandlot CLI (SANDLOT_BIN, default
# `sandlot` on PATH).
set -euo pipefail
cd "$(dirname "$0")/.."

public=()
if [ "${1:-}" = --public ]; then
    public=(--public)
    shift
fi
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

# The base image, named by its recipe's hash (from the tarball's name), so a changed recipe is imported
# anew while an unchanged one is imported once per server.
base_tar=$(scripts/debian-image.sh code-interpreter) || die "scripts/debian-image.sh code-interpreter failed (above)"
base_hash=${base_tar##*-}
base=debian:bookworm-code-interpreter-${base_hash%.tar}
if ! "$sandlot" image inspect "$base" >/dev/null 2>&1; then
    say "importing $base_tar as $base (once per server)"
    "$sandlot" image import --name "$base" "$base_tar" >/dev/null || die "sandlot image import of $base_tar failed"
fi

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
sed "s|^FROM debian:bookworm-code-interpreter\$|FROM $base|" images/code-interpreter/Dockerfile >"$ctx/Dockerfile"
grep -qx "FROM $base" "$ctx/Dockerfile" || die "images/code-interpreter/Dockerfile has no line FROM debian:bookworm-code-interpreter"
mkdir "$ctx/wheels" "$ctx/code-interpreter"
cp "$wheels"/*.whl "$ctx/wheels/"
cp "$req" "$ctx/wheels/requirements.txt"
cp resources/code-interpreter/*.py resources/code-interpreter/*.js resources/code-interpreter/*.java "$req" "$ctx/code-interpreter/"
say "building $name from $ctx"
"$sandlot" image build "${public[@]}" -t "$name" "$ctx" >&2 || die "sandlot image build failed (its output is above)"
echo "$name"
