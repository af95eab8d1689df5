# Sourced by the other scripts: installs, from Debian's archive, what sandlot needs beyond a Rust
# toolchain: btrfs-progs (the layers volume behind per-sandbox disk limits) and bubblewrap (the
# benchmark's baseline).
need=()
command -v mkfs.btrfs >/dev/null || need+=(btrfs-progs)
command -v bwrap >/dev/null || need+=(bubblewrap)
if [ ${#need[@]} -gt 0 ] && [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

# cargo-deny, for the licence, ban and source checks of scripts/test.sh; a function, so only the
# scripts that run those checks pay for the build (several minutes on two cores, once per machine).
# Pinned: deny.toml is written for this version's format.
need_cargo_deny() {
    cargo deny --version >/dev/null 2>&1 || cargo install --locked cargo-deny --version 0.20.2
}
