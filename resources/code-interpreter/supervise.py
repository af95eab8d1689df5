#!/usr/bin/env python3
"""Keeps the code interpreter's server (server.py, next to this file) running: the image's
`sandlot.start` command runs this, as E2B's template runs its server and Jupyter under systemd
(Restart=on-failure). Arguments are passed to server.py.

When the server dies (killed, crashed), its kernels and their children outlive it: this process is
their child subreaper (PR_SET_CHILD_SUBREAPER), so they become its children, and it kills them all
before it starts a new server (a new server starts new kernels; the old ones' state is gone, as after
E2B's restart). A server that dies again within STABLE_S of its start waits longer each time before
the next start (1 s doubling to 30 s), so a broken setup does not spin. SIGTERM or SIGINT stop the
server (SIGTERM), then this process.
"""

import ctypes
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SERVER = os.path.join(HERE, "server.py")
PR_SET_CHILD_SUBREAPER = 36
FIRST_DELAY_S = 1.0
MAX_DELAY_S = 30.0
# A server that ran this long was healthy: the next restart waits FIRST_DELAY_S again.
STABLE_S = 10.0
# How long a stopping server may take before it is killed.
STOP_GRACE_S = 10.0


def log(message: str) -> None:
    sys.stderr.write(f"code-interpreter supervisor: {message}\n")
    sys.stderr.flush()


def children() -> list:
    """Our child processes' pids (from /proc: a subreaper's adopted orphans are among them)."""
    me = str(os.getpid())
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode("ascii", "replace")
        except OSError:
            continue
        # The command name (2nd field) is in parentheses and may hold spaces: the ppid follows the last ')'.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1 and fields[1] == me:
            found.append(int(entry))
    return found


def reap() -> None:
    """Collects every child that has exited (orphans adopted from the server end here)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def kill_orphans() -> int:
    """Kills what the dead server left (its kernels, their children), until nothing is left: a killed
    kernel's own children are adopted in turn. Returns how many were killed."""
    killed = 0
    for _ in range(50):
        reap()
        left = children()
        if not left:
            break
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
        time.sleep(0.05)
    reap()
    return killed


def main() -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        log(f"prctl(PR_SET_CHILD_SUBREAPER) failed (errno {ctypes.get_errno()}); a dead server's kernels "
            "will be left running")
    stopping = False
    server = None

    def stop(signum, frame):
        nonlocal stopping
        stopping = True
        if server is not None and server.returncode is None:
            server.send_signal(signal.SIGTERM)
            # A server that does not stop in time is killed (SIGALRM's handler).
            signal.alarm(int(STOP_GRACE_S))

    def kill_server(signum, frame):
        if server is not None and server.returncode is None:
            server.kill()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGALRM, kill_server)
    delay = FIRST_DELAY_S
    while not stopping:
        started = time.monotonic()
        server = subprocess.Popen([sys.executable, SERVER, *sys.argv[1:]])
        log(f"started the server (pid {server.pid})")
        # Blocks until a child ends: the server, or an orphan adopted from it (reaped, nothing more).
        while True:
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:
                status = 0
                break
            if pid == server.pid:
                break
        server.returncode = os.waitstatus_to_exitcode(status)
        left = kill_orphans()
        if stopping:
            break
        ran = time.monotonic() - started
        delay = FIRST_DELAY_S if ran >= STABLE_S else min(delay * 2, MAX_DELAY_S)
        code = server.returncode
        why = f"signal {-code}" if code < 0 else f"status {code}"
        log(f"the server exited ({why}) after {ran:.1f} s; killed {left} process(es) it left; "
            f"starting it again in {delay:.0f} s")
        time.sleep(delay)
    return 0


if __name__ == "__main__":
    sys.exit(main())
