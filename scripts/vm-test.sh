#!/usr/bin/env bash
# The VM test: boots Debian 12's stock 6.1 kernel under QEMU (TCG, never KVM) with pure cgroup v2 laid
# out the way systemd lays it out, and runs there the cgroup-layout checks against the real
# `sandlot serve` and a smoke subset of the e2e and persist suites built on this host. Prints a summary
# table and exits non-zero when anything failed. A second boot of the same image runs the real
# systemd as PID 1 and checks packaging/sandlot.service under it (start, restart, stop, a crash).
# docs/TESTING.md ("The VM test") explains it.
#
# Needs root (apt-get, mkfs, the image's copy of /usr). Downloads only from Debian's archive (apt).
# Environment:
#   SANDLOT_VM_CACHE    cache of the kernel, initramfs and root image (default /var/cache/sandlot-vm)
#   SANDLOT_VM_TIMEOUT  hard limit in seconds for the guest's run (default 600)
#   SANDLOT_VM_SYSTEMD_TIMEOUT  the same for the systemd boot (default 300)
#   SANDLOT_VM_ACCEL    must be `tcg` if set: KVM is refused (see refuse_kvm)
#   SANDLOT_VM_QEMU_ARGS extra QEMU arguments (no accelerator options)
#   SANDLOT_VM_SKIP     space-separated parts to skip: layout smoke (the first boot; it is not made
#                       when both are skipped, and the test archive is not built without smoke),
#                       systemd (the second boot)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd -P)
cache=${SANDLOT_VM_CACHE:-/var/cache/sandlot-vm}
timeout_s=${SANDLOT_VM_TIMEOUT:-600}
systemd_timeout_s=${SANDLOT_VM_SYSTEMD_TIMEOUT:-300}
skip=" ${SANDLOT_VM_SKIP:-} "
skipped() { case $skip in *" $1 "*) return 0 ;; esac; return 1; }
target=${CARGO_TARGET_DIR:-$repo/target}
case $target in /*) ;; *) target=$repo/$target ;; esac

say() { printf 'vm-test: %s\n' "$*" >&2; }
die() {
    say "$*"
    exit 1
}
[ "$(id -u)" = 0 ] || die "run as root (sudo $0): it installs packages and builds a root image from /usr"

# Wall-clock seconds of each host phase, for the summary.
phases=()
t_start=$(date +%s)
t_phase=$t_start
phase_done() {
    local now
    now=$(date +%s)
    phases+=("$1:$((now - t_phase))")
    t_phase=$now
}

# KVM is refused, whatever asks for it: this project's machines expose a PVM /dev/kvm on which guests
# hang without a word, and a hang would only show as the hard timeout. TCG is slower but finishes.
refuse_kvm() {
    local accel=${SANDLOT_VM_ACCEL:-tcg}
    [ "$accel" = tcg ] || die "refusing accelerator '$accel': the VM test runs under TCG only (KVM guests hang on this machine's PVM /dev/kvm); unset SANDLOT_VM_ACCEL"
    case " ${SANDLOT_VM_QEMU_ARGS:-} " in
        *kvm* | *accel* | *" -machine "* | *" -M "*)
            die "refusing SANDLOT_VM_QEMU_ARGS='${SANDLOT_VM_QEMU_ARGS}': accelerator and machine options are fixed (-accel tcg); KVM is never used" ;;
    esac
}
refuse_kvm

# --- Packages -----------------------------------------------------------------------------------
apt_updated=0
apt_update_once() {
    [ "$apt_updated" = 1 ] && return
    say "apt-get update"
    apt-get update -qq
    apt_updated=1
}
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
need=()
# busybox-static: the initramfs has no libraries. kmod: depmod/modprobe for the kernel's modules, on
# the host and (through the image's /usr) in the guest. e2fsprogs: mkfs.ext4 -d. zstd: the guest
# unpacks the test archive with the image's (the host's) zstd. systemd: the systemd boot runs the
# image's /lib/systemd/systemd; the package alone does not make it the host's init (systemd-sysv
# does), and the root image's key includes the package set, so installing it rebuilds the image.
for pkg in qemu-system-x86 busybox-static kmod cpio e2fsprogs zstd systemd; do
    installed "$pkg" || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
    apt_update_once
    say "installing ${need[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
nextest_bin=$(command -v cargo-nextest || true)
[ -n "$nextest_bin" ] || die "cargo-nextest not found: the guest runs the smoke tests with it (cargo install --locked cargo-nextest)"
phase_done packages

# --- Kernel -------------------------------------------------------------------------------------
# The newest generic 6.1 image (-unsigned is the same kernel without the Secure Boot signature, which a
# direct -kernel boot does not use). The generic flavour: -cloud lacks 9pnet_virtio.
kernel_candidates() {
    apt-cache search --names-only '^linux-image-6\.1\.0-[0-9]+-amd64(-unsigned)?$' | awk '{print $1}'
}
# Sets kpkg, kpkgver, kver and kdir from the package lists.
pick_kernel() {
    local cands abi
    cands=$(kernel_candidates)
    [ -n "$cands" ] || {
        apt_update_once
        cands=$(kernel_candidates)
    }
    [ -n "$cands" ] || die "apt-cache lists no linux-image-6.1.0-NN-amd64 package: is Debian 12's (bookworm) archive in /etc/apt/sources.list?"
    abi=$(sed -E 's/^linux-image-6\.1\.0-([0-9]+)-amd64.*/\1/' <<<"$cands" | sort -n | tail -1)
    kpkg=linux-image-6.1.0-$abi-amd64-unsigned
    grep -qx "$kpkg" <<<"$cands" || kpkg=linux-image-6.1.0-$abi-amd64
    kver=6.1.0-$abi-amd64
    kpkgver=$(apt-cache show "$kpkg" | awk '/^Version:/ {print $2; exit}')
    kdir=$cache/kernel-$kpkg-$kpkgver
}
download_kernel() {
    say "downloading $kpkg $kpkgver"
    rm -rf "$kdir" && mkdir -p "$kdir/dl"
    # apt drops to the _apt user for downloads: let it write there.
    if id _apt >/dev/null 2>&1; then chown _apt "$kdir/dl"; fi
    (cd "$kdir/dl" && apt-get download -q "$kpkg=$kpkgver" >/dev/null) || return 1
    dpkg-deb -x "$kdir"/dl/*.deb "$kdir/root"
    rm -rf "$kdir/dl"
    depmod -b "$kdir/root" "$kver"
    touch "$kdir/ready"
}
pick_kernel
if [ ! -f "$kdir/ready" ] && ! download_kernel; then
    # Old package lists name a version the archive no longer has: read them again, once.
    apt_update_once
    pick_kernel
    [ -f "$kdir/ready" ] || download_kernel || die "apt-get download $kpkg=$kpkgver failed"
fi
kroot=$kdir/root
vmlinuz=$kroot/boot/vmlinuz-$kver
[ -f "$vmlinuz" ] || die "$kpkg has no /boot/vmlinuz-$kver"
phase_done kernel

# --- Initramfs ----------------------------------------------------------------------------------
# Drivers needed before the root image is mounted, plus the ones sandlot needs (btrfs for the layers
# volume, overlay, loop) so a missing one shows as a boot failure naming it. crc32c: ext4's and btrfs's
# checksums, which they request through the crypto API (and the initramfs has no modprobe to answer).
initrd_modules="virtio_pci virtio_blk crc32c_generic crc32c-intel ext4 9pnet_virtio 9p btrfs overlay loop"
initrd_key=$( (echo "$kver $initrd_modules"; cat scripts/vm/initramfs-init; sha256sum /bin/busybox) | sha256sum | cut -c1-16)
initrd=$cache/initrd-$kver-$initrd_key.cpio.gz
build_initrd() {
    local d ko
    d=$(mktemp -d)
    mkdir -p "$d"/{bin,dev,proc,sys,newroot,modules}
    cp /bin/busybox "$d/bin/busybox"
    cp scripts/vm/initramfs-init "$d/init"
    chmod 0755 "$d/init"
    # `insmod /path` lines, dependencies first; awk keeps each module once, at its first place.
    for m in $initrd_modules; do
        modprobe -d "$kroot" -S "$kver" --show-depends "$m" || die "module $m is not in $kpkg"
    done | awk '$1 == "insmod" && !seen[$2]++ {print $2}' | while read -r ko; do
        cp "$ko" "$d/modules/"
        basename "$ko" >>"$d/modules.list"
    done
    (cd "$d" && find . | cpio -o -H newc --quiet | gzip -1) >"$initrd.tmp"
    mv "$initrd.tmp" "$initrd"
    rm -rf "$d"
}
[ -f "$initrd" ] || {
    say "building the initramfs"
    build_initrd
}
phase_done initramfs

# --- Root image ---------------------------------------------------------------------------------
# The host's /usr (hard links, so staging costs no copy), /etc, the 6.1 modules tree and cargo-nextest.
# The guest runs the host's sandlot binary, which is linked against these very libraries, and its
# sandboxes' `host` image is this /usr. Left out: trees nothing in the guest runs, which would only
# make the image larger and slower to build (the image build writes every byte).
rootfs_excludes="usr/lib/chromium usr/lib/google-cloud-sdk usr/lib/jvm usr/lib/llvm-* usr/include usr/share/doc usr/share/man usr/share/info usr/local usr/lib/modules usr/src"
build_rootfs() {
    local stage l size
    stage=$cache/stage
    rm -rf "$stage" && mkdir -p "$stage"
    cp -al /usr "$stage/usr" 2>/dev/null || {
        rm -rf "${stage:?}/usr"
        cp -a /usr "$stage/usr"
    }
    (cd "$stage" && eval rm -rf "$rootfs_excludes")
    mkdir -p "$stage/usr/lib/modules" "$stage/usr/local/bin"
    cp -al "$kroot/lib/modules/$kver" "$stage/usr/lib/modules/$kver"
    cp "$nextest_bin" "$stage/usr/local/bin/cargo-nextest"
    # Merged /usr: /bin, /lib, /sbin… are the same symlinks as on the host.
    for l in bin sbin lib lib32 lib64 libx32; do
        [ -L "/$l" ] && cp -P "/$l" "$stage/$l"
    done
    cp -a /etc "$stage/etc"
    echo sandlot-vm >"$stage/etc/hostname"
    mkdir -p "$stage"/{proc,sys,dev,run,tmp,root,home,mnt/vm,var/tmp,var/lib,var/log,var/cache}
    chmod 1777 "$stage/tmp" "$stage/var/tmp"
    # Room for the suites' state dirs and layers volumes (sparse loop files, a few hundred MiB in use).
    size=$(($(du -sm "$stage" | cut -f1) + 3072))
    mkfs.ext4 -q -F -L sandlot-vm -d "$stage" "$rootfs.tmp" "${size}M" >/dev/null
    mv "$rootfs.tmp" "$rootfs"
    rm -rf "$stage"
}
# Keyed on what the guest runs: the host's packages, its users and groups (the sandlot binary and the
# harness look them up), cargo-nextest, the kernel and this recipe. Other /etc changes (a rewritten
# resolv.conf or hosts file) do not matter to the guest and would only force a rebuild.
rootfs_key=$( (echo "$kver $rootfs_excludes"; declare -f build_rootfs; sha256sum /var/lib/dpkg/status /etc/passwd /etc/group "$nextest_bin") | sha256sum | cut -c1-16)
rootfs=$cache/rootfs-$kver-$rootfs_key.ext4
if [ ! -f "$rootfs" ]; then
    say "building the root image (host /usr, /etc, $kver modules)"
    # Older images and kernels are never used again: each is several hundred MiB.
    find "$cache" -maxdepth 1 -name 'rootfs-*.ext4' -delete 2>/dev/null || true
    build_rootfs
fi
find "$cache" -maxdepth 1 \( -name 'kernel-*' ! -name "kernel-$kpkg-$kpkgver" -o -name 'initrd-*' ! -name "${initrd##*/}" \) -exec rm -rf {} + 2>/dev/null || true
phase_done rootfs

# --- The job: binaries and tests ----------------------------------------------------------------
# The smoke subset: creation, exec, files, limits (memory OOM, pids, disk quota), pause/resume,
# stop/resume, snapshots and forks, crash recovery, network deny, metrics read from v2's own files;
# and on this kernel's btrfs, that a deleted subvolume leaves no qgroup (6.1 kept them). A name is
# `binary-id test-name`.
# Left out: tests with wall-clock bounds that TCG's slowness breaks (network::policy::
# deny_by_default_fails_fast wants three process starts in 4 s) and long loops (persist's 50-cycle
# tests and kill9_during_a_snapshot's 600 MB of writes take minutes there).
smoke_tests=(
    "sandlot-linux volume::tests::deleted_subvolumes_leave_no_qgroup_behind"
    "sandlot-linux kmod::tests::this_host_has_overlay_btrfs_and_loop_devices"
    "sandlot::e2e api::create_reports_limits_and_metadata"
    "sandlot::e2e exec::exit_codes_and_signals_are_reported"
    "sandlot::e2e exec::shell_runs_command_lines"
    "sandlot::e2e exec::user_is_uid_1000_and_root_is_uid_0"
    "sandlot::e2e files::write_read_round_trip_is_byte_exact"
    "sandlot::e2e files::tar_upload_then_download_round_trips"
    "sandlot::e2e files::usr_is_read_only_through_the_file_api"
    "sandlot::e2e limits::memory_bomb_ends_as_oom"
    "sandlot::e2e limits::fork_bomb_is_contained"
    "sandlot::e2e limits::limits_are_written_to_the_cgroup"
    "sandlot::e2e limits::disk_quota_caps_the_writable_layer"
    "sandlot::e2e lifecycle::pause_freezes_and_resume_thaws"
    "sandlot::e2e lifecycle::stop_then_resume_keeps_files_and_ends_processes"
    "sandlot::e2e lifecycle::forks_share_the_past_not_the_future"
    "sandlot::e2e lifecycle::daemon_crash_kills_sandboxes_and_restart_sweeps"
    "sandlot::e2e lifecycle::delete_leaves_nothing_behind"
    "sandlot::e2e isolation::host_cgroup_paths_are_hidden"
    "sandlot::e2e isolation::network_is_loopback_only"
    "sandlot::e2e network::policy::deny_cidr_beats_allow"
    "sandlot::e2e processes::orphans_are_reaped_no_zombies"
    "sandlot::e2e pty::a_pty_process_has_a_terminal_of_its_size_that_echoes_input"
    "sandlot::e2e watch::a_watch_reports_each_kind_of_change"
    "sandlot::e2e metrics::samples_move_when_a_sandbox_burns_cpu_memory_and_processes"
    "sandlot::e2e metrics::prometheus_endpoint_is_for_the_admin_and_the_scrape_token_and_counts_oom_kills"
    "sandlot::e2e images::an_imported_root_filesystem_boots_with_its_own_files"
    "sandlot::e2e images::a_pulled_image_runs_with_its_config"
    "sandlot-linux idmap::tests::an_image_file_shows_with_the_slots_owner_through_the_mount"
    "sandlot::persist copies::sandboxes_from_a_snapshot_are_independent_copies"
    "sandlot::persist crash::kill9_during_an_exec_leaves_no_process_and_stops_persistent_sandboxes"
    "sandlot::persist crash::sigterm_stops_persistent_sandboxes_and_deletes_ephemeral_ones"
)
# One nextest run for both suites: one extraction of the archive in the guest (half a minute under
# TCG) and both vCPUs busy until the end.
smoke_filter() {
    local e expr=""
    for e in "${smoke_tests[@]}"; do
        expr+="${expr:+ | }(binary_id(${e%% *}) & test(=${e#* }))"
    done
    echo "$expr"
}

job=$cache/job
rm -rf "$job" && mkdir -p "$job/results"
if ! skipped smoke; then
    say "building the test archive (reuses $target)"
    export CARGO_TARGET_DIR=$target
    # --workspace: the same feature resolution as the host suites' build, so nothing is compiled again.
    cargo nextest archive --locked --workspace \
        -E 'binary_id(sandlot::e2e) | binary_id(sandlot::persist) | binary_id(sandlot-linux)' \
        --archive-file "$job/tests.tar.zst" --zstd-level 1 >"$job/archive.log" 2>&1 || {
        cat "$job/archive.log" >&2
        die "cargo nextest archive failed"
    }
fi
# The debug build the tests' own servers use (env!("CARGO_BIN_EXE_sandlot")), for the layout checks.
cp "$target/debug/sandlot" "$job/sandlot"
cp scripts/vm/guest.sh "$job/guest.sh"
# The systemd boot: its PID 1 script, its target and check unit, and the unit under test as shipped.
cp -r scripts/vm/systemd "$job/systemd"
cp packaging/sandlot.service "$job/sandlot.service"
# A hung test is ended after 3 minutes instead of eating the whole VM budget.
printf '[profile.vm]\nslow-timeout = { period = "60s", terminate-after = 3 }\nfail-fast = false\n' >"$job/nextest.toml"
cat >"$job/config" <<EOF
repo=$repo
target=$target
smoke_filter='$(smoke_filter)'
skip='${SANDLOT_VM_SKIP:-}'
EOF
phase_done archive

# --- Boot ---------------------------------------------------------------------------------------
# boot_guest WHAT LIMIT SERIAL CMDLINE...: one boot of the root image; sets $qemu_rc.
boot_guest() {
    local what=$1 limit=$2 log=$3 qemu qemu_pid
    shift 3
    say "booting $kver under TCG for $what (2 vCPUs, 3 GiB, no NIC; serial log $log; limit ${limit}s)"
    # shellcheck disable=SC2086 # SANDLOT_VM_QEMU_ARGS is a list of words.
    timeout -k 10 "$limit" qemu-system-x86_64 \
        -accel tcg -cpu max -smp 2 -m 3072 -nic none -nographic -monitor none -no-reboot \
        -serial "file:$log" \
        -kernel "$vmlinuz" -initrd "$initrd" \
        -append "console=ttyS0 rdinit=/init cgroup_no_v1=all panic=-1 loglevel=4 $*" \
        -drive "file=$rootfs,format=raw,if=virtio,snapshot=on" \
        -virtfs "local,path=$job,mount_tag=vm,security_model=passthrough,id=vm" \
        -virtfs "local,path=$repo,mount_tag=repo,security_model=none,readonly=on,id=repo" \
        ${SANDLOT_VM_QEMU_ARGS:-} </dev/null &
    qemu=$!
    # Belt and braces: a QEMU that opened /dev/kvm after all is stopped at once.
    # ($qemu is timeout's pid; QEMU is its child.)
    sleep 2
    qemu_pid=$(pgrep -P "$qemu" | head -1 || true)
    if [ -n "$qemu_pid" ] && ls -l "/proc/$qemu_pid/fd" 2>/dev/null | grep -q /dev/kvm; then
        kill "$qemu_pid"
        die "QEMU opened /dev/kvm although -accel tcg was given; stopped it (KVM guests hang on this machine)"
    fi
    qemu_rc=0
    wait "$qemu" || qemu_rc=$?
}
serial=$job/results/serial.log
guest_rc=skipped
if ! skipped layout || ! skipped smoke; then
    boot_guest "the layout checks and smoke tests" "$timeout_s" "$serial"
    guest_rc=$qemu_rc
    phase_done guest
fi
# The same image with the real systemd as PID 1 (systemd/boot.sh readies /etc, then execs it), booted
# to vm-test.target: basic.target, then vm-check.service runs systemd/check.sh and powers off. No
# network or getty; journald forwards to the serial console, so a hang shows in the serial log.
serial_systemd=$job/results/serial-systemd.log
systemd_rc=skipped
if ! skipped systemd; then
    boot_guest "the systemd checks" "$systemd_timeout_s" "$serial_systemd" \
        sandlot_vm.init=systemd/boot.sh systemd.unit=vm-test.target systemd.unified_cgroup_hierarchy=1 \
        systemd.journald.forward_to_console=1 systemd.show_status=1
    systemd_rc=$qemu_rc
    phase_done systemd
fi

# --- Results ------------------------------------------------------------------------------------
r=$job/results
failed=0
echo
echo "== VM test ($kver, pure cgroup v2, TCG) =="
# boot_result WHAT QEMU-RC LIMIT DONE-FILE SERIAL: a boot that timed out or did not finish fails.
boot_result() {
    [ "$2" = skipped ] && return
    if [ "$2" = 124 ] || [ "$2" = 137 ]; then
        echo "FAIL $1: hard timeout of ${3}s reached"
        failed=1
    fi
    if [ ! -f "$4" ]; then
        echo "FAIL $1: did not finish (QEMU exit $2); serial log tail:"
        tail -n 40 "$5" | sed 's/^/  | /'
        failed=1
    fi
}
boot_result guest "$guest_rc" "$timeout_s" "$r/done" "$serial"
boot_result "systemd boot" "$systemd_rc" "$systemd_timeout_s" "$r/systemd/done" "$serial_systemd"
printf '%-6s %-58s %s\n' RESULT CHECK DETAIL
for f in "$r/summary.tsv" "$r/systemd/summary.tsv"; do
    [ -f "$f" ] || continue
    while IFS=$'\t' read -r res name detail; do
        printf '%-6s %-58s %s\n' "$res" "$name" "$detail"
        [ "$res" = PASS ] || [ "$res" = SKIP ] || failed=1
    done <"$f"
done
if [ -f "$r/smoke.out" ]; then
    echo "-- smoke tests (nextest, exit $(cat "$r/smoke.rc" 2>/dev/null || echo '?')): $(grep -E '^ +Summary' "$r/smoke.out" | tail -1 | sed 's/^ *//')"
    grep -E '^ +(FAIL|TIMEOUT|SIGSEGV|SIGABRT|SIGKILL) ' "$r/smoke.out" | sort -u | sed 's/^ */  /' || true
fi
if [ "$failed" != 0 ]; then
    for f in "$serial" "$serial_systemd"; do
        [ -f "$f" ] && { echo "serial log tail ($f):"; tail -n 15 "$f" | sed 's/^/  | /'; }
    done
fi
phase_done results
times="host phases (s):"
for p in "${phases[@]}"; do times+=" ${p%%:*}=${p##*:}"; done
echo "$times total=$(($(date +%s) - t_start))"
echo "results: $r"
[ "$failed" = 0 ] || die "the VM test failed (details above, full logs in $r)"
echo "vm-test: all checks passed"
