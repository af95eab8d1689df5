#!/usr/bin/env bash
# Re-fetches the dashboard's vendored JavaScript (crates/sandlot/ui/vendor/) from the npm registry:
# xterm.js and its fit addon, at the pinned versions below, each tarball checked against the
# registry's sha512 integrity recorded here. Writes the files the dashboard serves, the packages'
# LICENSE files beside them, and vendor/SHA256SUMS (one line per vendored file).
#   scripts/vendor-ui.sh          write the files
#   scripts/vendor-ui.sh --check  fetch again and fail if a vendored file differs
# To move to a new version: change the version and integrity (`npm view @xterm/xterm@V dist.integrity`),
# run this script, and commit the result.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=crates/sandlot/ui/vendor
# package  version  integrity  files (tarball path:vendored name)
pkgs=(
    "@xterm/xterm|6.0.0|sha512-TQwDdQGtwwDt+2cgKDLn0IRaSxYu1tSUjgKarSDkUM0ZNiSRXFpjxEsvc/Zgc5kq5omJ+V0a8/kIM2WD3sMOYg==|xterm|lib/xterm.mjs:xterm.mjs css/xterm.css:xterm.css LICENSE:LICENSE"
    "@xterm/addon-fit|0.11.0|sha512-jYcgT6xtVYhnhgxh3QgYDnnNMYTcf8ElbxxFzX0IZo+vabQqSPAjC3c1wJrKB5E19VwQei89QCiZZP86DCPF7g==|addon-fit|lib/addon-fit.mjs:addon-fit.mjs LICENSE:LICENSE"
)
check=false
[ "${1:-}" = --check ] && check=true
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out=$work/out
mkdir -p "$out"
for p in "${pkgs[@]}"; do
    IFS='|' read -r name version integrity dir files <<<"$p"
    (cd "$work" && npm pack --silent "$name@$version" >/dev/null)
    tgz=$work/$(echo "${name#@}" | tr / -)-$version.tgz
    got="sha512-$(openssl dgst -sha512 -binary "$tgz" | base64 -w0)"
    if [ "$got" != "$integrity" ]; then
        echo "vendor-ui.sh: $name@$version: tarball integrity $got, expected $integrity" >&2
        exit 1
    fi
    mkdir -p "$work/x/$dir" "$out/$dir"
    tar xzf "$tgz" -C "$work/x/$dir"
    for f in $files; do
        cp "$work/x/$dir/package/${f%%:*}" "$out/$dir/${f##*:}"
    done
    echo "$name@$version $integrity" >>"$out/PACKAGES"
done
(cd "$out" && find . -type f ! -name SHA256SUMS | sort | xargs sha256sum >SHA256SUMS)
if $check; then
    if diff -r "$out" "$dest"; then
        echo "vendor-ui.sh: $dest matches the pinned packages"
    else
        echo "vendor-ui.sh: $dest differs from the pinned packages: run scripts/vendor-ui.sh" >&2
        exit 1
    fi
else
    rm -rf "$dest"
    mkdir -p "$(dirname "$dest")"
    cp -r "$out" "$dest"
    echo "vendor-ui.sh: wrote $dest"
fi
