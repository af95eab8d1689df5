# Sourced by the other scripts: installs, from Debian's archive, what sandlot needs beyond a Rust
# toolchain: btrfs-progs (the layers volume behind per-sandbox disk limits) and bubblewrap (the
# benchmark's baseline).
need=()
command -v mkfs.btrfs >/dev/null || need+=(btrfs-progs)
command -v bwrap >/dev/null || need+=(bubblewrap)
if [ ${#need[@]} -gt 0 ] && [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
