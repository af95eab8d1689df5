#!/bin/bash
# PID 1 of the VM test's guest (scripts/vm-test.sh), started by the initramfs with the root image on
# / and the job share on /mnt/vm. Sets up the system the way a systemd host has it (pure cgroup v2
# with a delegated service cgroup and an undelegated login-session scope), runs the cgroup-layout
# checks against the real `sandlot serve` and the smoke tests, writes the results to the share and
# powers off. Each result is one line of results/summary.tsv: PASS|FAIL|SKIP, check, detail.
set -u
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8
share=/mnt/vm
R=$share/results
cg=/sys/fs/cgroup
# repo, target (the host's paths), smoke_filter, skip.
. "$share/config"

if [ "$$" = 1 ]; then
    mount -t proc proc /proc
    mount -t sysfs sysfs /sys
    mkdir -p /dev/pts /dev/shm
    mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /dev/pts
    mount -t tmpfs -o mode=1777 tmpfs /dev/shm
    mount -t tmpfs -o mode=755 tmpfs /run
    ln -sf /proc/self/fd /dev/fd
    ln -sf /proc/self/fd/0 /dev/stdin
    ln -sf /proc/self/fd/1 /dev/stdout
    ln -sf /proc/self/fd/2 /dev/stderr
    # Static nodes of modules that load on first open (loop-control, btrfs-control, fuse, net/tun…),
    # as systemd's kmod-static-nodes makes them: devtmpfs has a node only once its driver is loaded.
    # Lines are `module node cMAJOR:MINOR` (or bMAJOR:MINOR).
    while read -r _mod node spec; do
        case $_mod in '#'* | '') continue ;; esac
        [ -e "/dev/$node" ] && continue
        majmin=${spec:1}
        mkdir -p "$(dirname "/dev/$node")"
        mknod -m 0600 "/dev/$node" "${spec:0:1}" "${majmin%%:*}" "${majmin##*:}"
    done <"/lib/modules/$(uname -r)/modules.devname"
    hostname sandlot-vm
    ip link set lo up
    # Pure v2, with the options systemd mounts it with.
    mount -t cgroup2 -o nsdelegate,memory_recursiveprot cgroup2 $cg
    # The checkout at the host's path: the test binaries name files in it (CARGO_MANIFEST_DIR).
    mkdir -p "$repo"
    mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,ro repo "$repo"
    # Work in a child and reap every orphan meanwhile (bash's wait collects any child of PID 1). Only
    # the child is waited for: a process it left behind may hold the console pipe open.
    bash "$0" run > >(tee "$R/guest.log") 2>&1 &
    wait $!
    dmesg >"$R/dmesg.txt"
    touch "$R/done"
    sync
    echo o >/proc/sysrq-trigger
    sleep 60
fi

# ---------------------------------------------------------------------------------------------------
summary=$R/summary.tsv
: >"$summary"
result() { # RESULT CHECK DETAIL
    printf '%s\t%s\t%s\n' "$1" "$2" "${3:-}" >>"$summary"
    printf '[guest] %s %s %s\n' "$1" "$2" "${3:-}"
}
pass() { result PASS "$@"; }
fail() { result FAIL "$@"; }
# expect CHECK DETAIL-ON-FAILURE COMMAND...: PASS when COMMAND succeeds.
expect() {
    local name=$1 why=$2
    shift 2
    if "$@"; then pass "$name"; else fail "$name" "$why"; fi
}
skipped() { case " $skip " in *" $1 "*) return 0 ;; esac; return 1; }
ms() { date +%s%3N; }
# Log text on one line, without the colour codes of the daemon's log.
oneline() { sed 's/\x1b\[[0-9;]*m//g' | tr '\n' ' ' | cut -c1-300; }
# cgroupfs files have no size: `[ -s ]` cannot tell an empty cgroup.procs.
has_procs() { [ -n "$(cat "$1/cgroup.procs" 2>/dev/null)" ]; }
# A live sandbox's cgroup DIR: the supervisor in DIR/sup, DIR/work made for the commands.
sandbox_cgroups_ok() { has_procs "$1/sup" && [ -d "$1/work" ]; }

{
    echo "booted in $(cut -d' ' -f1 /proc/uptime) s (kernel and initramfs, to this line)"
    echo "kernel: $(uname -r); cmdline: $(cat /proc/cmdline)"
    echo "cgroup: $(grep cgroup /proc/mounts)"
    echo "controllers: $(cat $cg/cgroup.controllers)"
    echo "cpus: $(nproc); memory: $(awk '/MemTotal/ {print $2 " kB"}' /proc/meminfo)"
} | tee "$R/env.txt"
[ "$(stat -fc %T $cg)" = cgroup2fs ] && ! grep -q ' cgroup ' /proc/mounts &&
    pass "pure cgroup v2 ($(uname -r))" "$(cat $cg/cgroup.controllers)" || fail "pure cgroup v2" "$(grep cgroup /proc/mounts | oneline)"

# The layout systemd makes: PID 1 in init.scope, controllers enabled down to the slices, a service
# with Delegate=yes (controllers available to it, its subtree ours), a login session's scope without
# delegation. `sandlot-tests.service/runner` is where the test harness runs: a leaf of a delegated
# service, whose parent hands memory, pids and cpu on to the harness's per-server cgroups.
ctrl="+memory +pids +cpu"
mkdir $cg/init.scope && echo 1 >$cg/init.scope/cgroup.procs
echo "$ctrl" >$cg/cgroup.subtree_control
mkdir -p $cg/system.slice $cg/user.slice
echo "$ctrl" >$cg/system.slice/cgroup.subtree_control
echo "$ctrl" >$cg/user.slice/cgroup.subtree_control
mkdir -p $cg/user.slice/user-0.slice/session-1.scope
echo "+memory +pids" >$cg/user.slice/user-0.slice/cgroup.subtree_control
mkdir -p $cg/system.slice/sandlot.service $cg/system.slice/sandlot-tests.service/runner
echo "$ctrl" >$cg/system.slice/sandlot-tests.service/cgroup.subtree_control
# Whoever calls this moves into it (the shell's own pid), then becomes the command.
spawn_in=(sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"')

cp "$share/sandlot" /usr/local/bin/sandlot

# wait_healthy PORT PID SECONDS: the daemon answers /healthz (0), or it exited or timed out (1).
wait_healthy() {
    local port=$1 pid=$2 deadline=$(($(date +%s) + $3))
    while [ "$(date +%s)" -lt "$deadline" ]; do
        curl -fsS -m 5 "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && return 0
        kill -0 "$pid" 2>/dev/null || return 1
        sleep 0.2
    done
    return 1
}
# wait_exit PID SECONDS: sets $rc to the exit code, or returns 1 if it is still running.
wait_exit() {
    local pid=$1 deadline=$(($(date +%s) + $2))
    while kill -0 "$pid" 2>/dev/null; do
        [ "$(date +%s)" -lt "$deadline" ] || return 1
        sleep 0.2
    done
    wait "$pid"
    rc=$?
}
own_cgroup() { sed -n 's/^0:://p' "/proc/$1/cgroup"; }
# Error texts of a raced or half-done cgroup set-up, which a clean refusal never shows.
garbage='EBUSY|ENOENT|Device or resource busy|No such file or directory'

# session_refusal LABEL SCOPE SHELL-PID WORD: `sandlot serve` started in SCOPE beside SHELL-PID exits
# non-zero with a message naming SCOPE and WORD, moves nothing and makes no cgroup there.
session_refusal() {
    local label=$1 sess=$2 shell=$3 word=$4 before p log=$R/layout-${1// /-}.log
    before=$(cat $cg/$sess/cgroup.procs)
    "${spawn_in[@]}" "$cg/$sess" sandlot serve --state-dir /var/lib/sandlot-session --listen 127.0.0.1:7432 >"$log" 2>&1 &
    p=$!
    if wait_exit $p 90; then
        expect "$label: serve refuses (non-zero exit)" "exit $rc" [ "$rc" != 0 ]
        expect "$label: the message names the cgroup, '$word' and what to do" "said: $(grep -v INFO "$log" | oneline)" \
            sh -c "grep -v INFO '$log' | grep -q '$sess' && grep -v INFO '$log' | grep -Eqi '(^|[^0-9])$word([^0-9]|\$)' &&
                   grep -q 'Delegate=yes' '$log'"
        expect "$label: the message is no raw errno" "said: $(grep -v INFO "$log" | oneline)" sh -c "! grep -Eq '$garbage' '$log'"
    else
        fail "$label: serve refuses" "still running after 90 s: $(tail -n 3 "$log" | oneline)"
        kill -9 $p
    fi
    expect "$label: the shell's cgroup unchanged" "shell now in $(own_cgroup "$shell")" [ "$(own_cgroup "$shell")" = "/$sess" ]
    expect "$label: no process moved in or out" "procs now: $(oneline <$cg/$sess/cgroup.procs), before: $before" \
        [ "$(cat $cg/$sess/cgroup.procs)" = "$before" ]
    expect "$label: no cgroup created in it" "$(cd $cg && find "$sess" -mindepth 1 -type d | oneline)" \
        [ -z "$(find "$cg/$sess" -mindepth 1 -type d)" ]
}

layout_checks() {
    local svc=system.slice/sandlot.service st=/var/lib/sandlot-a port=7431 log=$R/layout-service.log
    local pid own t0 id id2 id3 out base rc p

    # 0. The doctor sees this host as the daemon will: pure v2, ready in the service cgroup (the
    # session scope's verdict is checked beside its shell, in 4).
    rc=0
    out=$("${spawn_in[@]}" "$cg/$svc" sandlot doctor 2>&1) || rc=$?
    expect "doctor in the service cgroup: ready (exit 0)" "exit $rc: $(grep -Ev '^ok' <<<"$out" | oneline)" [ "$rc" = 0 ]
    expect "doctor in the service cgroup: pure v2" "said: $(grep cgroup-mode <<<"$out" | oneline)" \
        grep -Eq '^ok +cgroup-mode +pure v2' <<<"$out"
    # 1. Started alone in the delegated service cgroup.
    t0=$(ms)
    "${spawn_in[@]}" "$cg/$svc" sandlot serve --state-dir $st --listen 127.0.0.1:$port >>"$log" 2>&1 &
    pid=$!
    if ! wait_healthy $port $pid 120; then
        fail "service cgroup: serve starts" "$(tail -n 5 "$log" | oneline)"
        kill -9 $pid 2>/dev/null
        return
    fi
    pass "service cgroup: serve starts" "healthy after $(($(ms) - t0)) ms"
    own=$(own_cgroup $pid)
    expect "service cgroup: daemon in sandlot.service/sandlot-daemon" "daemon cgroup is $own" \
        [ "$own" = "/$svc/sandlot-daemon" ]
    expect "service cgroup: memory pids cpu enabled for its subtree" "subtree_control: $(cat $cg/$svc/cgroup.subtree_control)" \
        sh -c "grep -qw memory $cg/$svc/cgroup.subtree_control && grep -qw pids $cg/$svc/cgroup.subtree_control && grep -qw cpu $cg/$svc/cgroup.subtree_control"
    export SANDLOT_URL=http://127.0.0.1:$port SANDLOT_API_KEY
    SANDLOT_API_KEY=$(cat $st/admin.key)
    t0=$(ms)
    if ! id=$(sandlot sandbox create 2>>"$log"); then
        fail "service cgroup: sandbox create" "$(tail -n 3 "$log" | oneline)"
        kill -9 $pid
        return
    fi
    pass "service cgroup: sandbox create" "$id in $(($(ms) - t0)) ms"
    t0=$(ms)
    out=$(sandlot sandbox exec "$id" -- sh -c 'echo hello from $(hostname); cat /proc/self/cgroup' 2>&1)
    expect "service cgroup: exec in the sandbox" "output: $(echo "$out" | oneline)" \
        grep -q '^hello from' <<<"$out"
    echo "exec took $(($(ms) - t0)) ms: $out"
    out=$(sandlot run -- python3 -c 'print(6 * 7)' 2>&1)
    expect "service cgroup: sandlot run" "output: $(echo "$out" | oneline)" [ "$out" = 42 ]
    base=$(dirname "$(ls -d $cg/$svc/sandlot-*/"$id" 2>/dev/null | head -1)")

    expect "service cgroup: sandbox cgroup at sandlot.service/sandlot-<instance>/<id>" \
        "found: $(cd $cg && find $svc -maxdepth 3 -type d -name "$id" | oneline)" \
        [ -d "$base/$id" -a "$(cd $cg && find $svc -type d -name "$id" | wc -l)" = 1 ]
    expect "service cgroup: sandbox processes in <id>/sup and <id>/work" \
        "children of <id>: $(ls "$base/$id" 2>/dev/null | grep -v '\.' | oneline)" \
        sandbox_cgroups_ok "$base/$id"

    # 2. A clean restart on the same state, where the daemon ran (as a service manager restarting it
    # in place would): the same paths, no nesting.
    kill -TERM $pid
    wait_exit $pid 60 || { fail "restart: SIGTERM ends the daemon" "still running after 60 s"; kill -9 $pid; }
    "${spawn_in[@]}" "$cg$own" sandlot serve --state-dir $st --listen 127.0.0.1:$port >>"$log" 2>&1 &
    pid=$!
    if ! wait_healthy $port $pid 120; then
        fail "restart: serve starts again in $own" "$(tail -n 5 "$log" | oneline)"
        kill -9 $pid 2>/dev/null
        return
    fi
    expect "restart: same daemon cgroup (no nesting)" "now $(own_cgroup $pid), was $own" [ "$(own_cgroup $pid)" = "$own" ]
    id2=$(sandlot sandbox create 2>>"$log")
    expect "restart: sandboxes under the same sandlot-<instance>" \
        "found: $(cd $cg && find $svc -type d -name "${id2:-none}" | oneline)" [ -n "$id2" -a -d "$base/$id2" ]
    expect "restart: nothing nested below the daemon's cgroup" "$(cd $cg && find "${own#/}" -mindepth 1 -type d | oneline)" \
        [ -d "$cg$own" -a -z "$(find "$cg$own" -mindepth 1 -type d)" ]

    # 3. kill -9 with a sandbox running; the restart sweeps what it left.
    id3=$(sandlot sandbox create 2>>"$log")
    sandlot sandbox exec "$id3" -- sh -c 'sleep 600 &' >/dev/null 2>&1
    kill -9 $pid
    wait $pid 2>/dev/null
    expect "kill -9: the sandbox's cgroup is left behind (precondition)" "no $base/$id3" [ -n "$id3" -a -d "$base/$id3" ]
    "${spawn_in[@]}" "$cg$own" sandlot serve --state-dir $st --listen 127.0.0.1:$port >>"$log" 2>&1 &
    pid=$!
    if wait_healthy $port $pid 120; then
        for _ in $(seq 1 100); do [ -d "$base/$id3" ] || break; sleep 0.2; done
        expect "kill -9: the restart sweeps the leftover cgroup" \
            "still there 20 s after start: $(cd $cg && find "$svc" -path "*$id3*" -type d | oneline)" [ ! -d "$base/$id3" ]
        expect "kill -9: same daemon cgroup after the restart" "now $(own_cgroup $pid)" [ "$(own_cgroup $pid)" = "$own" ]
    else
        fail "kill -9: serve starts again" "$(tail -n 5 "$log" | oneline)"
    fi
    kill -TERM $pid
    wait_exit $pid 60 || kill -9 $pid
    unset SANDLOT_URL SANDLOT_API_KEY

    # 4. From a login session's scope, beside the session's shell: refused, nothing moved. First as
    # systemd sets a user slice up by default (memory and pids handed down, not cpu), then with cpu
    # handed down too (CPUAccounting/CPUWeight on user.slice), where only the shared cgroup is wrong.
    local sess=user.slice/user-0.slice/session-1.scope shell
    "${spawn_in[@]}" "$cg/$sess" sleep 100000 &
    shell=$!
    for _ in $(seq 1 50); do grep -qx $shell $cg/$sess/cgroup.procs && break; sleep 0.1; done
    session_refusal "session scope" "$sess" "$shell" 'delegat'
    echo +cpu >$cg/user.slice/user-0.slice/cgroup.subtree_control
    # The doctor judges the scope as serve does: shared with the shell, so placement is missing.
    rc=0
    "${spawn_in[@]}" "$cg/$sess" sandlot doctor >"$R/doctor-session.txt" 2>&1 || rc=$?
    expect "doctor in the session scope: not ready (exit 1)" "exit $rc" [ "$rc" = 1 ]
    expect "doctor in the session scope: placement missing, naming the shell and what to do" \
        "said: $(grep -A1 cgroup-placement "$R/doctor-session.txt" | oneline)" \
        sh -c "grep -Eq '^missing +cgroup-placement.*[^0-9]$shell([^0-9]|\$)' '$R/doctor-session.txt' && grep -q 'Delegate=yes' '$R/doctor-session.txt'"
    session_refusal "session scope with cpu" "$sess" "$shell" "$shell"
    kill $shell

    # 5. Concurrent starts. (a) Two services of one slice, started at once: both run (the race of
    # starts from one parent). A bystander service's process stays where it is.
    local a=system.slice/sandlot-one.service b=system.slice/sandlot-two.service by=system.slice/bystander.service pa pb bys
    mkdir -p $cg/$a $cg/$b $cg/$by
    "${spawn_in[@]}" "$cg/$by" sleep 100000 &
    bys=$!
    "${spawn_in[@]}" "$cg/$a" sandlot serve --state-dir /var/lib/sandlot-one --listen 127.0.0.1:7433 >"$R/layout-one.log" 2>&1 &
    pa=$!
    "${spawn_in[@]}" "$cg/$b" sandlot serve --state-dir /var/lib/sandlot-two --listen 127.0.0.1:7434 >"$R/layout-two.log" 2>&1 &
    pb=$!
    local ok=1
    wait_healthy 7433 $pa 120 || ok=0
    wait_healthy 7434 $pb 120 || ok=0
    expect "two services at once: both run" "one: $(tail -n 2 "$R/layout-one.log" | oneline) two: $(tail -n 2 "$R/layout-two.log" | oneline)" [ $ok = 1 ]
    expect "two services at once: each in its own sandlot-daemon" "one: $(own_cgroup $pa) two: $(own_cgroup $pb)" \
        [ "$(own_cgroup $pa)" = "/$a/sandlot-daemon" -a "$(own_cgroup $pb)" = "/$b/sandlot-daemon" ]
    expect "two services at once: sandboxes in both" "create failed" sh -c \
        "SANDLOT_URL=http://127.0.0.1:7433 SANDLOT_API_KEY=\$(cat /var/lib/sandlot-one/admin.key) sandlot sandbox create >/dev/null &&
         SANDLOT_URL=http://127.0.0.1:7434 SANDLOT_API_KEY=\$(cat /var/lib/sandlot-two/admin.key) sandlot sandbox create >/dev/null"
    expect "two services at once: the bystander was not moved" "bystander in $(own_cgroup $bys)" [ "$(own_cgroup $bys)" = "/$by" ]
    expect "two services at once: no raw errno in the logs" "$(grep -hE "$garbage" "$R/layout-one.log" "$R/layout-two.log" | oneline)" \
        sh -c "! grep -Eq '$garbage' '$R/layout-one.log' '$R/layout-two.log'"
    kill -TERM $pa $pb
    kill $bys
    wait_exit $pa 60 || kill -9 $pa
    wait_exit $pb 60 || kill -9 $pb

    # (b) Two daemons in one service cgroup, released together: each runs or refuses with a message,
    # and a running one moved only itself.
    local sh=system.slice/sandlot-shared.service gate=/run/sandlot-gate n port_n logs=() pids=() outcome=""
    mkdir -p $cg/$sh
    rm -f $gate
    for n in 1 2; do
        port_n=$((7434 + n))
        sh -c 'echo $$ >"$0/cgroup.procs" && while [ ! -e '$gate' ]; do sleep 0.01; done; exec "$@"' "$cg/$sh" \
            sandlot serve --state-dir /var/lib/sandlot-shared-$n --listen 127.0.0.1:$port_n >"$R/layout-shared-$n.log" 2>&1 &
        pids+=($!)
        logs+=("$R/layout-shared-$n.log")
    done
    for _ in $(seq 1 50); do [ "$(wc -l <$cg/$sh/cgroup.procs)" = 2 ] && break; sleep 0.1; done
    touch $gate
    local clean=1
    for n in 0 1; do
        p=${pids[$n]}
        if wait_healthy $((7435 + n)) "$p" 120; then
            outcome+="daemon $((n + 1)) runs in $(own_cgroup "$p"); "
            [ "$(own_cgroup "$p")" = "/$sh/sandlot-daemon" ] || clean=0
        elif wait_exit "$p" 30; then
            outcome+="daemon $((n + 1)) exit $rc: $(tail -n 1 "${logs[$n]}" | cut -c1-160); "
            [ "$rc" != 0 ] && [ -s "${logs[$n]}" ] || clean=0
        else
            outcome+="daemon $((n + 1)) neither healthy nor exited; "
            clean=0
        fi
    done
    expect "one service, two daemons at once: each runs or refuses with a message" "$outcome" [ $clean = 1 ]
    echo "one service, two daemons: $outcome"
    expect "one service, two daemons at once: no raw errno" "$(grep -hE "$garbage" "${logs[@]}" | oneline)" \
        sh -c "! grep -Eq '$garbage' ${logs[*]}"
    local stray=""
    for p in $(cat $cg/$sh/cgroup.procs $cg/$sh/sandlot-daemon/cgroup.procs 2>/dev/null); do
        [ "$p" = "${pids[0]}" ] || [ "$p" = "${pids[1]}" ] || stray+="$p "
    done
    expect "one service, two daemons at once: only the daemons themselves were moved" "other pids: $stray" [ -z "$stray" ]
    for p in "${pids[@]}"; do
        kill -TERM "$p" 2>/dev/null && { wait_exit "$p" 60 || kill -9 "$p"; }
    done
}

# The smoke subset of the e2e and persist suites, from the harness's cgroup (a delegated service's
# leaf). The test binaries start the server by its build path (env!("CARGO_BIN_EXE_sandlot")), so the
# archive is unpacked onto the host's target path (over the shared checkout's copy when the target
# dir is inside it): the tests then run exactly the archived binaries, at the paths they were built
# for, and nextest reuses that build instead of unpacking the archive itself.
run_smoke() {
    local t0 rc line
    t0=$(date +%s)
    mkdir -p /var/tmp/nextest
    zstd -dc "$share/tests.tar.zst" | tar -x -C /var/tmp/nextest || { fail "smoke tests" "unpacking the test archive failed"; return; }
    [ -d "$target" ] || mkdir -p "$target"
    mount --bind /var/tmp/nextest/target "$target" || { fail "smoke tests" "cannot mount the unpacked archive on $target"; return; }
    echo "unpacked the test archive in $(($(date +%s) - t0)) s"
    "${spawn_in[@]}" $cg/system.slice/sandlot-tests.service/runner \
        cargo-nextest nextest run --binaries-metadata "$target/nextest/binaries-metadata.json" \
        --cargo-metadata "$target/nextest/cargo-metadata.json" --workspace-remap "$repo" --target-dir-remap "$target" \
        -E "$smoke_filter" --config-file "$share/nextest.toml" --profile vm --test-threads 2 --color never \
        >"$R/smoke.out" 2>&1
    rc=$?
    echo $rc >"$R/smoke.rc"
    line=$(grep -E '^ +Summary' "$R/smoke.out" | tail -1 | sed 's/^ *//')
    [ -n "$line" ] || line=$(tail -n 3 "$R/smoke.out" | oneline)
    if [ $rc = 0 ]; then pass "smoke tests ($(($(date +%s) - t0)) s)" "$line"; else fail "smoke tests ($(($(date +%s) - t0)) s)" "exit $rc: $line"; fi
}

t_layout=$(date +%s)
if skipped layout; then result SKIP "cgroup-layout checks"; else layout_checks; fi
echo "layout checks took $(($(date +%s) - t_layout)) s"
if skipped smoke; then result SKIP "smoke tests"; else run_smoke; fi
leftover=$(find $cg/system.slice/sandlot-tests.service -mindepth 1 -type d ! -path '*/runner' | head -5 | oneline)
expect "no cgroups left by the suites" "$leftover" [ -z "$leftover" ]
dmesg | grep -E 'BUG:|Oops|WARNING:|blocked for more than|segfault' | head -20 >"$R/dmesg-problems.txt"
expect "no kernel BUG/Oops/WARNING" "$(head -3 "$R/dmesg-problems.txt" | oneline)" [ ! -s "$R/dmesg-problems.txt" ]
