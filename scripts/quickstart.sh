#!/usr/bin/env bash
# Builds sandlot, installs /usr/local/bin/sandlot, makes sure a server runs and runs one command in a
# fresh sandbox on the default `host` image. Needs root (namespaces, cgroups, per-sandbox uid ranges)
# and a Rust toolchain (cargo). How the server is started (docs/DEPLOYING.md):
# - under systemd: as the service packaging/sandlot.service (installed to /etc/systemd/system; started,
#   or restarted when the binary or the unit changed); state in /var/lib/sandlot, log in the journal;
# - otherwise in the background, state in $SANDLOT_STATE_DIR (default /var/lib/sandlot), log in
#   <state>/serve.log, pid in <state>/serve.pid (restarted when the binary changed). On a pure cgroup v2
#   host it starts in a cgroup of its own, <cgroup2 root>/sandlot/sandlot-daemon, so the shell that ran
#   this script is never moved; on a host with the v1 memory hierarchy (v1 or hybrid) where it is.
# SANDLOT_URL (default http://127.0.0.1:7423) is where the server is looked for; a server started by
# hand listens on SANDLOT_LISTEN (default 127.0.0.1:7423), so set both to use another port.
set -euo pipefail
cd "$(dirname "$0")/.."

die() {
    echo "quickstart: $*" >&2
    exit 1
}

[ "$(id -u)" = 0 ] || die "run as root (sudo $0): sandlot creates namespaces and cgroups"
SANDLOT_DEPS=runtime . scripts/deps.sh
command -v cargo >/dev/null || die "cargo not found; install Rust from https://rustup.rs"
command -v curl >/dev/null || die "curl not found (it checks the server's /healthz): apt-get install curl"

cargo build --release --locked -p sandlot
built=${CARGO_TARGET_DIR:-target}/release/sandlot
bin=/usr/local/bin/sandlot
binary_changed=false
if ! cmp -s "$built" "$bin"; then
    install -m 0755 "$built" "$bin"
    binary_changed=true
fi

export SANDLOT_URL=${SANDLOT_URL:-http://127.0.0.1:7423}
# How long a start may take to answer /healthz (a first start creates the layers volume and the CA).
start_wait_s=30
# How long a stop may take: the unit's TimeoutStopSec (open API requests finish first).
stop_wait_s=90

healthy() {
    curl -fsS --max-time 2 "$SANDLOT_URL/healthz" >/dev/null 2>&1
}

# True while process $1 exists and is not a zombie (a zombie still answers `kill -0`).
alive() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [ "${stat%% *}" != Z ]
}

# Waits until /healthz answers (true) or `$@` fails or $start_wait_s pass (false).
wait_healthy() {
    local deadline=$((SECONDS + start_wait_s))
    while [ $SECONDS -lt $deadline ]; do
        healthy && return 0
        "$@" || return 1
        sleep 0.2
    done
    healthy
}

# --- under systemd --------------------------------------------------------------------------------

start_with_systemd() {
    state=/var/lib/sandlot
    if [ -n "${SANDLOT_STATE_DIR:-}" ] && [ "$SANDLOT_STATE_DIR" != "$state" ]; then
        die "SANDLOT_STATE_DIR=$SANDLOT_STATE_DIR, but under systemd the server keeps its state in $state" \
            "(ExecStart of packaging/sandlot.service): unset SANDLOT_STATE_DIR, or change the unit with" \
            "\`systemctl edit sandlot\` and use that state directory's admin.key yourself"
    fi
    local unit=/etc/systemd/system/sandlot.service unit_changed=false
    if ! cmp -s packaging/sandlot.service "$unit"; then
        install -m 0644 packaging/sandlot.service "$unit"
        systemctl daemon-reload
        unit_changed=true
        echo "sandlot: installed $unit (customise it with \`systemctl edit sandlot\`: this script replaces the file)"
    fi
    if systemctl is-active --quiet sandlot; then
        if $binary_changed || $unit_changed; then
            echo "sandlot: restarting sandlot.service (new binary or unit)"
            systemctl restart sandlot || die "systemctl restart sandlot failed; see journalctl -u sandlot -n 50"
        fi
    else
        if healthy; then
            die "a server that systemd does not manage answers at $SANDLOT_URL (one started by hand, perhaps" \
                "by an earlier run of this script: see $state/serve.pid); stop it, then run this again"
        fi
        systemctl start sandlot || die "systemctl start sandlot failed; see journalctl -u sandlot -n 50"
    fi
    if ! wait_healthy systemctl is-active --quiet sandlot; then
        journalctl -u sandlot -n 20 --no-pager >&2 || true
        die "sandlot.service did not answer at $SANDLOT_URL/healthz within ${start_wait_s} s (its last log" \
            "lines are above; all of them: journalctl -u sandlot). \`sandlot doctor\` checks the host."
    fi
    echo "sandlot: sandlot.service is running (log: journalctl -u sandlot; start at boot: systemctl enable sandlot)"
    log_hint="journalctl -u sandlot"
}

# --- by hand --------------------------------------------------------------------------------------

# Which cgroup hierarchy the daemon will use, by its own rule (crates/sandlot-linux/src/cgroup.rs): a
# mounted v1 memory hierarchy means v1 (or the hybrid layout); otherwise cgroup v2. Prints `v1`, or
# `v2 <cgroup2 mount point>`, or nothing. $1: the mountinfo to read.
cgroup_mode() {
    # /proc/self/mountinfo: "... <mount point> <options> [optional fields] - <fstype> <source> <super options>"
    awk '{
        for (i = 7; i <= NF; i++) if ($i == "-") break
        if ($(i + 1) == "cgroup" && $(i + 3) ~ /(^|,)memory(,|$)/) v1 = 1
        if ($(i + 1) == "cgroup2" && v2 == "") v2 = $5
    } END { if (v1) print "v1"; else if (v2 != "") print "v2 " v2 }' "$1"
}

# The controllers a sandbox cgroup needs, each delegated from the cgroup above.
controllers=(memory pids cpu)

# Enables ${controllers[*]} in $1/cgroup.subtree_control, those not already on.
enable_controllers() {
    local dir=$1 want="" c err
    for c in "${controllers[@]}"; do
        grep -qw "$c" "$dir/cgroup.subtree_control" || want+=" +$c"
    done
    [ -n "$want" ] || return 0
    if ! err=$({ echo "${want# }" >"$dir/cgroup.subtree_control"; } 2>&1); then
        die "could not enable${want} in $dir/cgroup.subtree_control (${err##*: }). A cgroup with processes" \
            "of its own cannot hand controllers down (the root of a container's cgroup namespace, for one):" \
            "run sandlot under systemd (packaging/sandlot.service) or in a cgroup delegated to it, see docs/DEPLOYING.md"
    fi
}

# Prepares <cgroup2 root>/sandlot with its leaf sandlot-daemon and sets $leaf. The daemon is started in
# the leaf rather than in <root>/sandlot: once the daemon has enabled controllers in <root>/sandlot, no
# process may join that cgroup itself any more, and a daemon that finds itself in a leaf named
# sandlot-daemon makes its sandbox cgroups beside it.
prepare_v2_cgroup() {
    local root=$1 top=$1/sandlot c missing="" procs
    leaf=$top/sandlot-daemon
    for c in "${controllers[@]}"; do
        grep -qw "$c" "$root/cgroup.controllers" || missing+=" $c"
    done
    if [ -n "$missing" ]; then
        die "the cgroup v2 root $root lacks the controller(s)${missing} (it has: $(cat "$root/cgroup.controllers"));" \
            "sandlot needs ${controllers[*]}: check the kernel command line for cgroup_disable= (a controller bound to a v1 hierarchy is not in cgroup2 either)"
    fi
    enable_controllers "$root"
    mkdir -p "$leaf" || die "could not create the cgroup $leaf"
    procs=$(tr '\n' ' ' <"$top/cgroup.procs")
    if [ -n "$procs" ]; then
        die "processes ${procs}are in $top itself, which sandlot keeps for its own; move them out" \
            "(echo PID > $root/cgroup.procs) and run this again"
    fi
    procs=$(tr '\n' ' ' <"$leaf/cgroup.procs")
    if [ -n "$procs" ]; then
        die "$leaf already holds pid(s) ${procs}(a sandlot server that does not answer at $SANDLOT_URL?);" \
            "stop them, then run this again"
    fi
    enable_controllers "$top"
}

# True if process $1 is `sandlot serve --state-dir $state`, as this script starts it.
is_our_server() {
    local cmdline
    alive "$1" || return 1
    cmdline=$(tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null) || return 1
    [ "$cmdline" = "$bin serve --state-dir $state " ] || [ "$cmdline" = "sandlot serve --state-dir $state " ]
}

start_by_hand() {
    state=${SANDLOT_STATE_DIR:-/var/lib/sandlot}
    local pidfile=$state/serve.pid log=$state/serve.log pid mode
    log_hint=$log
    pid=$(cat "$pidfile" 2>/dev/null || true)
    if healthy; then
        if ! $binary_changed; then
            echo "sandlot: using the server already answering at $SANDLOT_URL"
            return
        fi
        if [ -z "$pid" ] || ! is_our_server "$pid"; then
            echo "sandlot: warning: the server answering at $SANDLOT_URL was not started by this script" \
                "and may be an older build than the one just installed; stop it and run this again to use the new one" >&2
            return
        fi
        echo "sandlot: stopping the server (pid $pid) to start the new binary"
        kill -TERM "$pid"
        local deadline=$((SECONDS + stop_wait_s))
        while alive "$pid"; do
            [ $SECONDS -lt $deadline ] || die "the server (pid $pid) did not stop within ${stop_wait_s} s; kill -9 $pid, then run this again"
            sleep 0.2
        done
    fi
    mkdir -p "$state"
    # The server is detached from this terminal (setsid: no Ctrl-C, no hangup), and its log lines go to
    # a file, so without colours (NO_COLOR).
    mode=$(cgroup_mode /proc/self/mountinfo)
    case "$mode" in
    v1)
        # The daemon makes its sandbox cgroups below its own in each v1 hierarchy, and moves nothing.
        (exec env NO_COLOR=1 setsid "$bin" serve --state-dir "$state") </dev/null >"$log" 2>&1 &
        ;;
    "v2 "*)
        prepare_v2_cgroup "${mode#v2 }"
        # A subshell moves only itself (its own pid, $BASHPID) into the leaf, then becomes the server.
        (
            { echo "$BASHPID" >"$leaf/cgroup.procs"; } 2>/dev/null ||
                { echo "quickstart: could not move the server's process into $leaf" >&2; exit 1; }
            exec env NO_COLOR=1 setsid "$bin" serve --state-dir "$state"
        ) </dev/null >"$log" 2>&1 &
        ;;
    *)
        die "no cgroup hierarchy found: neither cgroup2 nor the v1 memory controller is mounted" \
            "(mount -t cgroup2 none /sys/fs/cgroup)"
        ;;
    esac
    pid=$!
    echo "$pid" >"$pidfile"
    if ! wait_healthy alive "$pid"; then
        tail -n 20 "$log" >&2 || true
        if alive "$pid"; then
            die "the server (pid $pid) did not answer at $SANDLOT_URL/healthz within ${start_wait_s} s" \
                "(log $log, last lines above; is SANDLOT_URL the address it listens on?)"
        fi
        die "the server exited at start (log $log, last lines above). \`sandlot doctor\` checks the host."
    fi
    echo "sandlot: server started (pid $pid${leaf:+, cgroup $leaf}, log $log)"
}

leaf=""
if [ -d /run/systemd/system ]; then
    start_with_systemd
else
    start_by_hand
fi

SANDLOT_API_KEY=$(cat "$state/admin.key") || die "cannot read $state/admin.key (the server writes it at its first start; log: $log_hint)"
export SANDLOT_API_KEY
echo "sandlot: running a command in a fresh sandbox"
"$bin" run -- python3 -c 'import os, socket; print("hello from", socket.gethostname(), "as uid", os.getuid())'
echo
# The key file is root's: print the way to read it that works for whoever runs the next line.
if [ -n "${SUDO_USER:-}" ] && [ "$SUDO_USER" != root ]; then
    read_key="sudo cat $state/admin.key"
else
    read_key="cat $state/admin.key"
fi
echo "Next: export SANDLOT_API_KEY=\$($read_key) and try \`sandlot run -- sh -c 'ls /; id'\`"
