"""Shell background-job patterns in a sandbox checked against bubblewrap (docs/IMAGES.md's sibling:
docs/TESTING.md, "The reference suite").

Each pattern runs under dash, bash, busybox sh and zsh twice: as a command of a sandlot sandbox of the
`host` image (its own pid, mount, network and user namespaces, the host's /usr), and under `bwrap` with the
same kinds of namespaces over the same /usr. Both must print the same, end with the same exit code,
and take about as long: a sandbox may be slower by a fixed bound (its command path), never by a hang
(dash's `wait` for two jobs once waited out the whole command timeout).
"""

import shutil
import subprocess
import sys
import time
import pathlib

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "e2b"))
from conftest import Server  # noqa: E402  (the E2B suite's server harness: one real `sandlot serve`)

SHELLS = {"dash": ["dash", "-c"], "bash": ["bash", "-c"], "busybox": ["busybox", "sh", "-c"], "zsh": ["zsh", "-c"]}

# (name, script): each ends on its own; output that background jobs may interleave is sorted.
PATTERNS = [
    ("two-jobs-wait", "sleep 0.2 & sleep 0.2 & wait; echo ok"),
    ("three-jobs-output", "{ for i in 1 2 3; do (sleep 0.1; echo job$i) & done; wait; } | sort"),
    ("wait-for-pid-status", "sh -c 'exit 3' & wait $!; echo status=$?"),
    ("killed-job-status", "sleep 5 & p=$!; kill $p; wait $p; echo status=$?"),
    ("nohup-job", "nohup sh -c 'sleep 0.2; echo from-nohup' > /tmp/nohup.out 2>&1 & wait; cat /tmp/nohup.out"),
    ("setsid-child", "setsid sh -c 'echo in-setsid'; echo after"),
    ("subshell-job-fd", "exec 3>&1; (echo to-fd3 >&3) & wait; echo done"),
    ("left-running", "sleep 3 & echo started"),
    ("disown-or-not", "sleep 3 & disown 2>/dev/null; echo returned"),
    ("job-control-off", "sleep 0.1 & jobs -p >/dev/null; wait; echo waited"),
    ("trap-term", "trap 'echo got-term; exit 7' TERM; kill -TERM $$; sleep 1; echo missed"),
    ("timeout-kills", "timeout 0.2 sleep 5; echo status=$?"),
    ("self-kill-9", "echo before; kill -9 $$; echo after"),
    ("exit-code", "sh -c 'exit 42'"),
]
# How much slower a sandbox's command may be than bwrap's whole run (namespaces made for each), seconds.
SLACK_S = 2.0


def bwrap(shell, script):
    cmd = [
        "bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin",
        "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/sbin", "/sbin",
        "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--ro-bind", "/etc", "/etc", *SHELLS[shell], script,
    ]
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    return r.stdout, r.returncode, time.monotonic() - t0


@pytest.fixture(scope="module")
def sandbox():
    if not shutil.which("bwrap"):
        pytest.fail("bubblewrap (bwrap) is the reference: apt-get install bubblewrap")
    server = Server()
    try:
        sb = server.native("POST", "/v1/sandboxes", {"image": "host", "timeout_s": 600})
        yield server, sb["id"]
    finally:
        server.stop()


def in_sandbox(server, sid, shell, script):
    t0 = time.monotonic()
    r = server.native("POST", f"/v1/sandboxes/{sid}/exec", {"argv": [*SHELLS[shell], script], "timeout_s": 30})
    took = time.monotonic() - t0
    # An exit by signal N is 128+N, as a shell and bwrap report it.
    code = 128 + r["signal"] if r.get("signal") else r["exit_code"]
    return r["stdout"], code, took, r


@pytest.mark.parametrize("shell", sorted(SHELLS))
@pytest.mark.parametrize("name,script", PATTERNS, ids=[p[0] for p in PATTERNS])
def test_shell_pattern_matches_bwrap(sandbox, shell, name, script):
    server, sid = sandbox
    out, code, took = bwrap(shell, script)
    ours, our_code, our_took, raw = in_sandbox(server, sid, shell, script)
    assert (ours, our_code) == (out, code), f"{shell} {name}: sandlot {raw}, bwrap {(out, code)}"
    assert our_took <= took + SLACK_S, f"{shell} {name}: {our_took:.2f} s in the sandbox, {took:.2f} s under bwrap"
