#!/usr/bin/env bash
# Builds, once per machine, a real Debian 12 (bookworm) root filesystem tarball for the image tests
# (crates/sandlot/tests/e2e/images_debian.rs) with mmdebstrap from Debian's archive, and prints its path.
# docs/TESTING.md ("The Debian image") explains it; users build the same tarball with the one-liner in
# the README and `sandlot image import` it.
#
# The tarball is cached as /var/cache/sandlot-images/debian-bookworm-<recipe hash>.tar
# (SANDLOT_IMAGE_CACHE changes the directory): the hash covers every input of the recipe below, so a
# changed recipe builds a new tarball (and removes the stale ones) while an unchanged one costs nothing.
# Written to a .tmp.tar file and renamed, so an interrupted build never leaves a tarball that looks done.
#
# A flavour adds Debian packages for one image built on top, as its own cached tarball (the plain one
# other tests use stays as it is):
#   code-interpreter   node (and Debian's TypeScript), R with IRkernel, OpenJDK 17 (jshell), curl,
#                      procps: the runtimes of images/code-interpreter, whose build has no network
#
# Usage: scripts/debian-image.sh [FLAVOUR]
# Needs root (apt-get for mmdebstrap; mmdebstrap's root mode). Stdout: the tarball's path, one line.
set -euo pipefail
cd "$(dirname "$0")/.."

flavour=${1:-}
suite=bookworm
variant=minbase
include=python3,python3-pip,ca-certificates
case $flavour in
"") ;;
code-interpreter)
    include=$include,nodejs,node-typescript,r-base-core,r-cran-irkernel,openjdk-17-jdk-headless,curl,procps
    ;;
*)
    printf 'debian-image: unknown flavour %q; the flavours are: code-interpreter\n' "$flavour" >&2
    exit 2
    ;;
esac
mirror=http://deb.debian.org/debian
cache=${SANDLOT_IMAGE_CACHE:-/var/cache/sandlot-images}

say() { printf 'debian-image: %s\n' "$*" >&2; }
die() {
    say "$*"
    exit 1
}

# The recipe: what goes into the tarball. Its hash names the cache file.
build() {
    mmdebstrap --quiet --mode=root --variant="$variant" --include="$include" "$suite" "$1" "$mirror"
}
recipe_hash=$( (echo "$suite $variant $include $mirror"; declare -f build) | sha256sum | cut -c1-16)
name=debian-$suite${flavour:+-$flavour}
out=$cache/$name-$recipe_hash.tar

if [ -s "$out" ]; then
    echo "$out"
    exit 0
fi

[ "$(id -u)" = 0 ] || die "run as root (sudo $0): it installs mmdebstrap and runs it in root mode"
if ! command -v mmdebstrap >/dev/null; then
    say "installing mmdebstrap from Debian's archive"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap >/dev/null ||
        die "could not install mmdebstrap with apt-get: is Debian's archive reachable (see /etc/apt/sources.list)?"
fi

# Fail early, and clearly, when the archive cannot be reached: mmdebstrap's own failure is pages of apt
# output.
release=$mirror/dists/$suite/InRelease
python3 - "$release" <<'EOF' || die "cannot reach Debian's archive at $mirror ($release): check the network or proxy settings; the Debian image tests need this tarball"
import sys, urllib.request
try:
    urllib.request.urlopen(urllib.request.Request(sys.argv[1], method="HEAD"), timeout=30).close()
except OSError as e:
    sys.exit(f"debian-image: {e}")
EOF

mkdir -p "$cache"
# mmdebstrap picks its output format from the file name, so the temporary name still ends in .tar.
tmp=${out%.tar}.tmp.tar
rm -f "$tmp"
trap 'rm -f "$tmp"' EXIT
say "building $out with mmdebstrap ($suite, $variant, $include) from $mirror; a few minutes, once"
build "$tmp" >&2 || die "mmdebstrap failed building $suite from $mirror (its output is above)"
mv "$tmp" "$out"
trap - EXIT
# Tarballs of this flavour's older recipes are dead weight now (the 16 ?s are the hash, so one
# flavour's cleanup never matches another's tarball).
find "$cache" -maxdepth 1 -name "$name-????????????????.tar" ! -name "${out##*/}" -delete 2>/dev/null || true
say "built $(du -h "$out" | cut -f1) in $out"
echo "$out"
