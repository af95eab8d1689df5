# Sourced by the other scripts: installs, from Debian's archive, what sandlot needs beyond a Rust
# toolchain: btrfs-progs (the layers volume behind per-sandbox disk limits), bubblewrap (the
# benchmark's baseline), and what the tests use. With SANDLOT_DEPS=runtime (the quickstart's), only
# what running the server needs: a user trying sandlot does not download a browser for its tests.
need=()
command -v mkfs.btrfs >/dev/null || need+=(btrfs-progs)
command -v bwrap >/dev/null || need+=(bubblewrap)
if [ "${SANDLOT_DEPS:-all}" != runtime ]; then
    # The image tests: a real OCI registry on loopback, skopeo to write archives the way users' tools do,
    # and a static busybox to build test images from.
    command -v docker-registry >/dev/null || need+=(docker-registry)
    command -v skopeo >/dev/null || need+=(skopeo)
    # The reference suite: Debian's buildah builds the Dockerfile corpus sandlot's builds are compared
    # with; umoci unpacks the images sandlot's pulls are compared with.
    command -v buildah >/dev/null || need+=(buildah)
    command -v umoci >/dev/null || need+=(umoci)
    # The shell reference cases run each pattern under zsh too (dash, bash and busybox sh are Debian's).
    command -v zsh >/dev/null || need+=(zsh)
    # The terminal tests: `sandlot sandbox shell` driven under a real terminal.
    command -v tmux >/dev/null || need+=(tmux)
    [ -x /bin/busybox ] && /bin/busybox --list >/dev/null 2>&1 && ldd /bin/busybox 2>&1 | grep -q "not a dynamic" || need+=(busybox-static)
    # The dashboard suite (tests/ui): headless Chromium, driven through puppeteer-core.
    command -v chromium >/dev/null || need+=(chromium)
fi
if [ ${#need[@]} -gt 0 ] && [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

# cargo-deny, for the licence, ban and source checks of scripts/test.sh; a function, so only the
# scripts that run those checks pay for the build (several minutes on two cores, once per machine).
# Pinned: deny.toml is written for this version's format.
need_cargo_deny() {
    cargo deny --version >/dev/null 2>&1 || cargo install --locked cargo-deny --version 0.20.2
}

# cargo-fuzz, for scripts/fuzz.sh (the fuzz targets of fuzz/); built once per machine, like cargo-deny.
need_cargo_fuzz() {
    cargo fuzz --version >/dev/null 2>&1 || cargo install --locked cargo-fuzz --version 0.13.2
}
