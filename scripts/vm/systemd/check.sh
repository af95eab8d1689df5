#!/bin/bash
# The VM test's checks of packaging/sandlot.service under the real systemd (PID 1), run by
# vm-check.service once basic.target is up. Installs the unit as shipped and the host's sandlot
# binary, then starts, restarts, stops and crashes it through systemctl and checks the cgroup layout
# after each step. Each result is one line of results/systemd/summary.tsv: PASS|FAIL|SKIP, check,
# detail. The journal is saved beside it.
set -u
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8
share=/mnt/vm
R=$share/results/systemd
cg=/sys/fs/cgroup
svc=system.slice/sandlot.service
mkdir -p "$R"
summary=$R/summary.tsv
: >"$summary"
result() { # RESULT CHECK DETAIL
    printf '%s\t%s\t%s\n' "$1" "systemd: $2" "${3:-}" >>"$summary"
    printf '[check] %s %s %s\n' "$1" "$2" "${3:-}"
}
pass() { result PASS "$@"; }
fail() { result FAIL "$@"; }
expect() { # CHECK DETAIL-ON-FAILURE COMMAND...
    local name=$1 why=$2
    shift 2
    if "$@"; then pass "$name"; else fail "$name" "$why"; fi
}
ms() { date +%s%3N; }
oneline() { sed 's/\x1b\[[0-9;]*m//g' | tr '\n' ' ' | cut -c1-300; }
has_procs() { [ -n "$(cat "$1/cgroup.procs" 2>/dev/null)" ]; }
own_cgroup() { sed -n 's/^0:://p' "/proc/$1/cgroup" 2>/dev/null; }
main_pid() { systemctl show -P MainPID sandlot; }
export SANDLOT_URL=http://127.0.0.1:7423 SANDLOT_API_KEY=
# wait_healthy SECONDS: /healthz answers (0), or the unit is neither active nor activating, or timeout.
wait_healthy() {
    local deadline=$(($(date +%s) + $1)) state
    while [ "$(date +%s)" -lt "$deadline" ]; do
        curl -fsS -m 5 "$SANDLOT_URL/healthz" >/dev/null 2>&1 && return 0
        state=$(systemctl is-active sandlot)
        case $state in active | activating) ;; *) return 1 ;; esac
        sleep 0.2
    done
    return 1
}
# The journal of the unit since CURSOR, without the daemon's info lines: systemd's own words.
journal_since() { journalctl -q --no-pager -o cat --after-cursor="$1" -u sandlot | grep -v ' INFO ' | oneline; }
# lacks PATTERN TEXT: TEXT has no line matching the extended regex PATTERN.
lacks() { ! grep -Eq "$1" <<<"$2"; }
cursor() { journalctl -q -n 0 --show-cursor | sed -n 's/^-- cursor: //p'; }
# systemd's texts when it cannot place a process in the unit's cgroup (EBUSY: "Device or resource
# busy"), and the exit status it then gives the process (219/CGROUP).
attach_errors='Failed to attach|resource busy|status=219|CGROUP'
# Every cgroup named sandlot* under system.slice, and every process in one or named sandlot*.
sandlot_cgroups() { (cd $cg/system.slice && find . -name 'sandlot*' -type d | sort | oneline); }
sandlot_procs() {
    local p out=""
    for p in /proc/[0-9]*; do
        grep -qs '^0::/system.slice/sandlot' "$p/cgroup" && out+="${p#/proc/}($(cat "$p/comm" 2>/dev/null)) "
    done
    for p in $(pgrep sandlot); do out+="$p($(cat "/proc/$p/comm" 2>/dev/null)) "; done
    echo "$out"
}
# The daemon's sandbox cgroup of sandbox ID: $cg/$svc/sandlot-<instance>/ID.
sandbox_dir() { ls -d $cg/$svc/sandlot-*/"$1" 2>/dev/null | grep -v /sandlot-daemon/ | head -1; }

{
    echo "systemd checks start at $(cut -d' ' -f1 /proc/uptime) s of uptime"
    systemctl --version | head -1
    echo "system state: $(systemctl is-system-running)"
    echo "cgroup: $(grep cgroup /proc/mounts)"
    echo "system.slice subtree_control: $(cat $cg/system.slice/cgroup.subtree_control)"
    echo "own cgroup: $(own_cgroup $$)"
    echo "kernel.pid_max: $(cat /proc/sys/kernel/pid_max) (systemd's /usr/lib/sysctl.d/50-pid-max.conf)"
    systemd-analyze time 2>&1
    systemctl list-jobs --no-pager 2>&1 | head
} | tee "$R/env.txt"
expect "PID 1 is systemd ($(systemctl --version | head -1 | cut -d' ' -f1-2))" "PID 1 is $(cat /proc/1/comm)" \
    [ "$(cat /proc/1/comm)" = systemd ]
expect "pure cgroup v2" "$(grep cgroup /proc/mounts | oneline)" sh -c "[ \"\$(stat -fc %T $cg)\" = cgroup2fs ] && ! grep -q ' cgroup ' /proc/mounts"

# --- Install as shipped ----------------------------------------------------------------------------
install -m 0755 "$share/sandlot" /usr/local/bin/sandlot
install -m 0644 "$share/sandlot.service" /etc/systemd/system/sandlot.service
systemctl daemon-reload
verify=$(systemd-analyze verify /etc/systemd/system/sandlot.service 2>&1)
echo "systemd-analyze verify: ${verify:-no warnings}"
expect "systemd-analyze verify sandlot.service: no warnings" "$(oneline <<<"$verify")" [ -z "$verify" ]

checks() {
    local c t0 out pid own id id2 id3 inst base rc n
    # --- Start -------------------------------------------------------------------------------------
    c=$(cursor)
    t0=$(ms)
    if ! systemctl start sandlot || ! wait_healthy 120; then
        fail "start: healthy" "$(systemctl is-active sandlot): $(journal_since "$c")"
        return
    fi
    pass "start: healthy" "/healthz after $(($(ms) - t0)) ms"
    expect "start: unit active" "$(systemctl is-active sandlot)" [ "$(systemctl is-active sandlot)" = active ]
    pid=$(main_pid)
    own=$(own_cgroup "$pid")
    expect "start: daemon in /$svc/sandlot-daemon" "MainPID $pid in $own" [ "$own" = "/$svc/sandlot-daemon" ]
    SANDLOT_API_KEY=$(cat /var/lib/sandlot/admin.key) || { fail "start: admin key" "no /var/lib/sandlot/admin.key"; return; }
    t0=$(ms)
    out=$(sandlot run -- python3 -c 'print(6 * 7)' 2>&1)
    expect "start: sandlot run" "output: $(oneline <<<"$out")" [ "$out" = 42 ]
    echo "sandlot run took $(($(ms) - t0)) ms"
    id=$(sandlot sandbox create 2>&1) || { fail "start: sandbox create" "$(oneline <<<"$id")"; return; }
    out=$(sandlot sandbox exec "$id" -- sh -c 'echo hello; cat /proc/self/cgroup' 2>&1)
    expect "start: exec in a sandbox" "output: $(oneline <<<"$out")" grep -qx hello <<<"$out"
    base=$(sandbox_dir "$id")
    inst=$(basename "$(dirname "$base")")
    expect "start: sandbox cgroup at /$svc/sandlot-<instance>/<id>" \
        "found: $(cd $cg && find system.slice -type d -name "$id" | oneline)" \
        sh -c "[ -n '$base' ] && [ \"\$(cd $cg && find system.slice -type d -name '$id' | wc -l)\" = 1 ] && [ '$base' = '$cg/$svc/$inst/$id' ]"
    expect "start: sandbox processes in <id>/sup and <id>/work" "children of <id>: $(ls "$base" 2>/dev/null | grep -v '\.' | oneline)" \
        sh -c "[ -n \"\$(cat '$base/sup/cgroup.procs')\" ] && [ -d '$base/work' ]"
    echo "layout after start: $(sandlot_cgroups)"

    # --- Restart -----------------------------------------------------------------------------------
    c=$(cursor)
    rc=0
    systemctl restart sandlot || rc=$?
    if [ $rc != 0 ] || ! wait_healthy 120; then
        fail "restart: healthy" "systemctl exit $rc, $(systemctl is-active sandlot): $(journal_since "$c")"
        journalctl -b --no-pager -u sandlot >"$R/journal-restart.txt"
        return
    fi
    pass "restart: healthy"
    expect "restart: unit active" "$(systemctl is-active sandlot)" [ "$(systemctl is-active sandlot)" = active ]
    pid=$(main_pid)
    expect "restart: daemon in /$svc/sandlot-daemon (no nesting)" "MainPID $pid in $(own_cgroup "$pid")" \
        [ "$(own_cgroup "$pid")" = "/$svc/sandlot-daemon" ]
    expect "restart: nothing below the daemon's cgroup" "$(cd $cg && find $svc/sandlot-daemon -mindepth 1 -type d | oneline)" \
        [ -z "$(find $cg/$svc/sandlot-daemon -mindepth 1 -type d)" ]
    id2=$(sandlot sandbox create 2>&1)
    expect "restart: sandboxes under the same sandlot-<instance>" "$(oneline <<<"$id2"); layout: $(sandlot_cgroups)" \
        [ -d "$cg/$svc/$inst/$id2" ]
    out=$(journal_since "$c")
    expect "restart: no cgroup attach error in the journal" "$out" lacks "$attach_errors" "$out"
    echo "layout after restart: $(sandlot_cgroups)"

    # --- Stop --------------------------------------------------------------------------------------
    sandlot sandbox exec "$id2" -- sh -c 'sleep 600 &' >/dev/null 2>&1
    c=$(cursor)
    t0=$(ms)
    systemctl stop sandlot
    echo "stop took $(($(ms) - t0)) ms"
    expect "stop: unit inactive" "$(systemctl is-active sandlot)" [ "$(systemctl is-active sandlot)" = inactive ]
    out=$(sandlot_cgroups)
    expect "stop: no sandlot cgroup left under system.slice" "left: $out" [ -z "$out" ]
    out=$(sandlot_procs)
    expect "stop: no sandlot process left" "left: $out" [ -z "$out" ]
    out=$(journal_since "$c")
    expect "stop: no kill of left-over processes by systemd" "$out" lacks 'Killing process' "$out"

    # --- Crash: SIGKILL to the whole unit, then start -----------------------------------------------
    c=$(cursor)
    if ! systemctl start sandlot || ! wait_healthy 120; then
        fail "crash: start before" "$(journal_since "$c")"
        return
    fi
    id3=$(sandlot sandbox create 2>&1)
    sandlot sandbox exec "$id3" -- sh -c 'sleep 600 &' >/dev/null 2>&1
    base=$(sandbox_dir "$id3")
    pid=$(main_pid)
    n=$(systemctl show -P NRestarts sandlot)
    c=$(cursor)
    systemctl kill -s KILL sandlot
    # Restart=on-failure starts it again after RestartSec=2; `systemctl start` joins or makes that start.
    for _ in $(seq 1 50); do [ "$(main_pid)" != "$pid" ] && break; sleep 0.2; done
    systemctl start sandlot
    if ! wait_healthy 120; then
        fail "crash: healthy again" "$(systemctl is-active sandlot): $(journal_since "$c")"
        journalctl -b --no-pager -u sandlot >"$R/journal-crash.txt"
        return
    fi
    pass "crash: healthy again" "NRestarts $n -> $(systemctl show -P NRestarts sandlot)"
    pid=$(main_pid)
    expect "crash: daemon in /$svc/sandlot-daemon" "MainPID $pid in $(own_cgroup "$pid")" \
        [ "$(own_cgroup "$pid")" = "/$svc/sandlot-daemon" ]
    for _ in $(seq 1 100); do [ -n "$base" ] && [ ! -d "$base" ] && break; sleep 0.2; done
    expect "crash: the killed sandbox's cgroup is swept" "base '$base'; layout: $(sandlot_cgroups)" [ -n "$base" -a ! -d "$base" ]
    out=$(journal_since "$c")
    expect "crash: no cgroup attach error in the journal" "$out" lacks "$attach_errors" "$out"
    id=$(sandlot sandbox create 2>&1)
    expect "crash: sandboxes under the same sandlot-<instance>" "$(oneline <<<"$id"); layout: $(sandlot_cgroups)" [ -d "$cg/$svc/$inst/$id" ]
    echo "layout after the crash: $(sandlot_cgroups)"
    systemctl stop sandlot
    out=$(sandlot_cgroups)
    expect "crash: stop afterwards leaves no sandlot cgroup" "left: $out" [ -z "$out" ]
}
t0=$(date +%s)
checks
echo "service checks took $(($(date +%s) - t0)) s"

# --- The doctor in transient scopes: without delegation and with it --------------------------------
rc=0
systemd-run --scope --quiet -p Delegate=yes sandlot doctor >"$R/doctor-delegated.txt" 2>&1 || rc=$?
expect "doctor in a Delegate=yes scope: ready (exit 0)" "exit $rc: $(grep -Ev '^ok' "$R/doctor-delegated.txt" | oneline)" [ $rc = 0 ]
expect "doctor in a Delegate=yes scope: placement ok" "$(grep cgroup- "$R/doctor-delegated.txt" | oneline)" \
    grep -Eq '^ok +cgroup-placement' "$R/doctor-delegated.txt"
# Without Delegate= systemd enables in system.slice only what its units ask for (memory, pids: the
# default accounting; cpu only while a unit wants it, and sandlot.service is stopped by now), so the
# scope lacks cpu and the doctor says so, with what to do.
rc=0
systemd-run --scope --quiet sandlot doctor >"$R/doctor-undelegated.txt" 2>&1 || rc=$?
expect "doctor in an undelegated scope: not ready (exit 1)" "exit $rc" [ $rc = 1 ]
expect "doctor in an undelegated scope: cpu not delegated, with what to do" \
    "said: $(grep -A1 cgroup-controllers "$R/doctor-undelegated.txt" | oneline)" \
    sh -c "grep -Eq '^missing +cgroup-controllers .*cpu not delegated' '$R/doctor-undelegated.txt' && grep -q 'Delegate=yes' '$R/doctor-undelegated.txt'"

journalctl -b --no-pager -o short-monotonic >"$R/journal.txt" 2>&1
systemd-analyze blame --no-pager 2>&1 | head -20 >"$R/blame.txt"
touch "$R/done"
sync
