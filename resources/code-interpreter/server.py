#!/usr/bin/env python3
"""sandlot's code interpreter: the HTTP server the `e2b-code-interpreter` SDKs talk to on port 49999.

It runs inside a sandbox (started by the image's `sandlot.start` label, under supervise.py, which
starts it again when it dies) and keeps one *context* per id: a Jupyter kernel (through
`jupyter_client`) for python (ipykernel) and r (IRkernel), a bash process for bash, a node process
(`node_repl.js`, next to this file) for javascript and typescript, a JVM running JShell (JavaRepl.java)
for java. State
lives in the context between cells. Started as root, it runs each context as `user` when `user` may
write in the context's cwd and as root otherwise (cwd=/root), dropping privileges in the child. The
wire format is the one the SDK parses (see docs/API.md, "Code interpreter"):

  POST   /execute                {code, context_id?, language?, env_vars?, timeout?} -> JSON lines
  POST   /contexts               {language?, cwd?} -> {id, language, cwd}
  GET    /contexts               -> [{id, language, cwd}, ...]
  DELETE /contexts/{id}
  POST   /contexts/{id}/restart
  GET    /health                 -> "OK"

Everything a request asks for is bounded: the number of contexts, the request body, the connections
served at once and the output of one cell (cut with a note on stderr). A cell that passes its `timeout`,
or whose client goes away, is interrupted (SIGINT): the context and its state survive; a context that
ignores the interrupt is restarted after a grace period. Python 3.11 standard library plus
`jupyter_client` (which comes with `ipykernel`); nothing else is needed unless a language asks for it.
"""

from __future__ import annotations

import argparse
import base64
import codecs
import datetime
import functools
import grp
import json
import os
import pwd
import queue
import re
import secrets
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator, Optional


def env_int(name: str, default: int) -> int:
    """An integer setting from the environment, or `default` when unset."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        sys.exit(f"code-interpreter: {name}={raw!r} is not an integer; unset it or give a number")
    if value <= 0:
        sys.exit(f"code-interpreter: {name}={raw!r} must be positive")
    return value


# Limits (each overridable from the environment; docs/API.md lists them).
MAX_CONTEXTS = env_int("SANDLOT_INTERP_MAX_CONTEXTS", 32)
MAX_CELL_OUTPUT_BYTES = env_int("SANDLOT_INTERP_MAX_OUTPUT_BYTES", 16 << 20)
MAX_BODY_BYTES = env_int("SANDLOT_INTERP_MAX_BODY_BYTES", 8 << 20)
MAX_CONNECTIONS = env_int("SANDLOT_INTERP_MAX_CONNECTIONS", 64)
# A traceback longer than this is cut (a deep recursion's would otherwise fill the output budget).
MAX_TRACEBACK_CHARS = 64 << 10

# How often a waiting cell looks at its client and its deadline.
TICK_S = 0.2
# A line is written at least this often while a cell runs, so a client that vanished without closing
# (or a proxy in between) is noticed by the failed write, as E2B's server does.
KEEPALIVE_S = 5.0
# How long an interrupted cell may take to stop before its context is restarted.
INTERRUPT_GRACE_S = 5.0
# How long a request waits for a context that is still starting (the default kernel at boot).
READY_WAIT_S = 120.0
# How long reading a request may stall (a client that opens a connection and sends nothing).
REQUEST_READ_TIMEOUT_S = 30.0

LANGUAGES = ("python", "bash", "javascript", "typescript", "r", "java")
LANGUAGE_ALIASES = {
    "js": "javascript", "ts": "typescript", "sh": "bash", "shell": "bash", "py": "python", "python3": "python",
}
# The contexts made at start, as E2B's server makes them (its list_contexts shows both from the first
# request on).
DEFAULT_LANGUAGES = ("python", "javascript")
# The unprivileged identity contexts run as when the server is root (sandlot's sandbox user).
SANDBOX_USER = "user"
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
HERE = os.path.dirname(os.path.abspath(__file__))


class RequestError(Exception):
    """A request the server refuses: `status` and a message saying what to change."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def now_iso() -> str:
    """The timestamp E2B's server puts on stdout/stderr lines: ISO 8601 with the UTC offset."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat()


def normalize_language(language: Optional[str]) -> str:
    """The canonical name of `language` (python when not given); refuses what no context can run."""
    if language is None:
        return "python"
    name = language.strip().lower()
    name = LANGUAGE_ALIASES.get(name, name)
    if name not in LANGUAGES:
        raise RequestError(
            400, f"language {language!r} is not supported here; use one of {', '.join(LANGUAGES)}"
        )
    return name


def error_event(name: str, value: str, tb: str = "") -> dict:
    """An `error` line of an execution."""
    if len(tb) > MAX_TRACEBACK_CHARS:
        tb = tb[:MAX_TRACEBACK_CHARS] + f"\n[traceback cut at {MAX_TRACEBACK_CHARS} characters]"
    return {"type": "error", "name": name, "value": value, "traceback": tb}


class Identity:
    """Who a context's process runs as: the fields Popen needs to drop to it, and the environment a
    login as that user would have (HOME, USER, LOGNAME)."""

    def __init__(self, name: str, uid: int, gid: int, groups: list, home: str):
        self.name, self.uid, self.gid, self.groups, self.home = name, uid, gid, groups, home

    @classmethod
    def of(cls, name: str) -> "Identity":
        entry = pwd.getpwnam(name)
        groups = sorted({g.gr_gid for g in grp.getgrall() if name in g.gr_mem} | {entry.pw_gid})
        return cls(name, entry.pw_uid, entry.pw_gid, groups, entry.pw_dir)

    def popen_args(self) -> dict:
        """Popen's user/group/extra_groups: the child calls setgroups, setgid, then setuid before exec.
        Empty when that is who we are already (no change, and no privilege needed to make it)."""
        if self.uid == os.geteuid() and self.gid == os.getegid():
            return {}
        return {"user": self.uid, "group": self.gid, "extra_groups": self.groups}

    def env(self, base: dict) -> dict:
        return dict(base, HOME=self.home, USER=self.name, LOGNAME=self.name)

    def give(self, path: str) -> None:
        """Makes a file or directory the runner created for the child (a connection file, a cell
        script) the child's, so it can read it after dropping privileges."""
        if os.geteuid() == 0 and self.uid != 0:
            os.chown(path, self.uid, self.gid)


def may_write(st_of, path: str, ident: Identity) -> bool:
    """Whether `ident` may create files in directory `path` by the mode bits (search on every
    ancestor, write and search on `path`); uid 0 always may. `st_of` is os.stat (a parameter so the
    decision is testable without the files)."""
    if ident.uid == 0:
        return True

    def allows(st, bits: int) -> bool:
        if st.st_uid == ident.uid:
            shift = 6
        elif st.st_gid in ident.groups:
            shift = 3
        else:
            shift = 0
        return (st.st_mode >> shift) & bits == bits

    parts = os.path.normpath(path).split("/")[1:]
    for i in range(len(parts)):
        ancestor = "/" + "/".join(parts[:i])
        if not allows(st_of(ancestor), 0o1):
            return False
    return allows(st_of(path), 0o3)


def identity_for(cwd: str, st_of=os.stat) -> Identity:
    """Who runs a context in `cwd`. Not root: ourselves, always. Root (the image's sandlot.start.user
    label): `user` when it may write in cwd (the default /home/user, /tmp, its own directories), root
    otherwise (cwd=/root, or a directory only root may change), as E2B's kernels, which all run as
    root, can."""
    try:
        me = Identity.of(pwd.getpwuid(os.geteuid()).pw_name)
    except KeyError:
        # A uid without a passwd entry (some containers): itself, as it is.
        me = Identity(str(os.geteuid()), os.geteuid(), os.getegid(), os.getgroups(), os.environ.get("HOME", "/"))
    if os.geteuid() != 0:
        return me
    try:
        user = Identity.of(SANDBOX_USER)
    except KeyError:
        return me
    return user if may_write(st_of, cwd, user) else me


# The MIME types the SDK's Result has a field for; the rest of a bundle goes to `extra`.
MIME_FIELDS = {
    "text/plain": "text",
    "text/html": "html",
    "text/markdown": "markdown",
    "image/svg+xml": "svg",
    "image/png": "png",
    "image/jpeg": "jpeg",
    "application/pdf": "pdf",
    "text/latex": "latex",
    "application/json": "json",
    "application/javascript": "javascript",
    "e2b/data": "data",
    "e2b/chart": "chart",
}


def result_event(bundle: dict, is_main_result: bool) -> dict:
    """A `result` line from a Jupyter MIME bundle (display_data or execute_result)."""
    event: dict = {"type": "result", "is_main_result": is_main_result}
    extra = {}
    for mime, value in bundle.items():
        field = MIME_FIELDS.get(mime)
        if field is None:
            extra[mime] = value
        else:
            event[field] = value
    text = event.get("text")
    # E2B's server shows a string result without the quotes of its repr; the SDK's users expect that.
    if isinstance(text, str) and len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        event["text"] = text[1:-1]
    if extra:
        event["extra"] = extra
    return event


class OutputBudget:
    """The output one cell may send: past the limit, stdout, stderr and results are dropped and one
    stderr line says so. Errors, the execution count and the end always pass (they are small)."""

    def __init__(self, limit: int):
        self.left = limit
        self.limit = limit
        self.cut = False

    def admit(self, event: dict) -> list:
        if event["type"] not in ("stdout", "stderr", "result"):
            return [event]
        if self.cut:
            return []
        size = len(json.dumps(event))
        if size <= self.left:
            self.left -= size
            return [event]
        self.cut = True
        note = {
            "type": "stderr",
            "text": f"\n[sandlot: output truncated: this cell produced more than {self.limit} bytes; "
            "the rest was dropped (write large data to a file instead)]\n",
            "timestamp": now_iso(),
        }
        # A stream line is cut to what fits; a result (a picture, a table) is all or nothing.
        if event["type"] in ("stdout", "stderr") and self.left > 256:
            # Escaping makes the JSON longer than the text: shorten until it fits.
            text = event["text"][: self.left - 256]
            while text and len(json.dumps(dict(event, text=text))) > self.left:
                text = text[: len(text) * 3 // 4]
            if text:
                return [dict(event, text=text), note]
        return [note]


class Context:
    """One language runtime that keeps state between cells. Subclasses run the cells."""

    language = ""

    def __init__(self, cwd: str):
        self.id = str(uuid.uuid4())
        self.cwd = cwd
        self.identity = identity_for(cwd)
        # One cell at a time: a second waits for the first (as E2B's server does).
        self.lock = threading.Lock()
        self.ready = threading.Event()
        self.start_error: Optional[str] = None
        self.execution_count = 0
        self.closed = False

    def describe(self) -> dict:
        return {"id": self.id, "language": self.language, "cwd": self.cwd}

    def start_in_background(self) -> None:
        """Starts the runtime on a thread of its own; `ready` is set when it answers (or failed)."""

        def run() -> None:
            try:
                self.start()
            except Exception as e:  # noqa: BLE001 - any failure is reported to the next request
                self.start_error = f"the {self.language} context could not start: {e}"
            finally:
                self.ready.set()

        threading.Thread(target=run, name=f"start-{self.id}", daemon=True).start()

    def wait_ready(self) -> None:
        if not self.ready.wait(READY_WAIT_S):
            raise RequestError(
                503, f"the {self.language} context {self.id} did not start within {READY_WAIT_S:.0f} s; retry"
            )
        if self.start_error:
            raise RequestError(500, self.start_error)

    def start(self) -> None:
        raise NotImplementedError

    def execute(self, code: str, env_vars: dict) -> Iterator[Optional[dict]]:
        """The cell's lines as they happen, and `None` every TICK_S while nothing happens (so the caller
        can look at its deadline and client). Ends when the cell has ended."""
        raise NotImplementedError

    def interrupt(self) -> None:
        raise NotImplementedError

    def restart(self) -> None:
        """A fresh runtime in the same cwd: the state is gone, the id stays."""
        raise NotImplementedError

    def shutdown(self) -> None:
        raise NotImplementedError


class JupyterContext(Context):
    """A Jupyter kernel (kernelspec `kernel_name`), driven over its ZeroMQ channels by jupyter_client's
    blocking client. Subclasses say how a cell's env_vars are set and put back in the kernel's
    language."""

    kernel_name = ""

    def __init__(self, cwd: str, runtime_dir: str):
        super().__init__(cwd)
        self.runtime_dir = runtime_dir
        self.km = None
        self.kc = None

    def kernel_env(self) -> dict:
        return self.identity.env(dict(os.environ, JUPYTER_RUNTIME_DIR=self.runtime_dir))

    def kernel_arguments(self) -> list:
        return []

    def set_env_code(self, env_vars: dict) -> str:
        raise NotImplementedError

    def restore_env_code(self) -> str:
        raise NotImplementedError

    def start(self) -> None:
        from jupyter_client.kernelspec import NoSuchKernel

        km = kernel_manager_class()(kernel_name=self.kernel_name, identity=self.identity)
        km.connection_file = os.path.join(self.runtime_dir, f"kernel-{self.id}.json")
        try:
            km.start_kernel(cwd=self.cwd, env=self.kernel_env(), extra_arguments=self.kernel_arguments(),
                            **self.identity.popen_args())
        except NoSuchKernel:
            raise RuntimeError(
                f"this image has no {self.language} kernel (Jupyter kernelspec {self.kernel_name!r}); "
                "sandlot's code-interpreter image has one"
            ) from None
        kc = km.client()
        kc.start_channels()
        try:
            kc.wait_for_ready(timeout=READY_WAIT_S)
        except RuntimeError:
            kc.stop_channels()
            km.shutdown_kernel(now=True)
            raise
        self.km, self.kc = km, kc

    def _silent(self, code: str) -> Optional[dict]:
        """Runs bookkeeping code that the user does not see (no output, no execution count); its error,
        if any."""
        msg_id = self.kc.execute(code, silent=True, store_history=False)
        deadline = time.monotonic() + 30
        error = None
        while time.monotonic() < deadline:
            try:
                msg = self.kc.get_iopub_msg(timeout=TICK_S)
            except queue.Empty:
                if not self.km.is_alive():
                    return error_event("ContextDied", f"the {self.language} kernel exited")
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "error":
                c = msg["content"]
                error = error_event(c["ename"], c["evalue"], "\n".join(c["traceback"]))
            elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                return error
        return error_event("EnvVarsTimeout", "setting the cell's env_vars took over 30 s")

    def execute(self, code: str, env_vars: dict) -> Iterator[Optional[dict]]:
        if self.km is not None and not self.km.is_alive():
            # Killed between cells (kill -9, the OOM killer): a new kernel runs this cell.
            self.restart()
        if env_vars:
            # Set for this cell only, then put back as they were (E2B's semantics).
            err = self._silent(self.set_env_code(env_vars))
            if err:
                yield err
                return
        try:
            yield from self._cell(code)
        finally:
            if env_vars and self.km is not None and self.km.is_alive():
                self._silent(self.restore_env_code())

    def _cell(self, code: str) -> Iterator[Optional[dict]]:
        kc = self.kc
        msg_id = kc.execute(code, silent=False, store_history=True, allow_stdin=False, stop_on_error=True)
        while True:
            if self.kc is not kc:
                yield error_event("ContextRestarted", "the context was restarted while this cell ran")
                return
            try:
                msg = kc.get_iopub_msg(timeout=TICK_S)
            except queue.Empty:
                if not self.km.is_alive():
                    yield error_event(
                        "ContextDied",
                        f"the {self.language} kernel exited while running this cell; it was restarted, "
                        "so the context's variables are gone",
                    )
                    self.restart()
                    return
                yield None
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                yield {"type": content["name"], "text": content["text"], "timestamp": now_iso()}
            elif kind == "execute_input":
                self.execution_count = content["execution_count"]
                yield {"type": "number_of_executions", "execution_count": content["execution_count"]}
            elif kind == "execute_result":
                yield result_event(content["data"], True)
            elif kind == "display_data":
                yield result_event(content["data"], False)
            elif kind == "error":
                yield error_event(content["ename"], content["evalue"], "\n".join(content["traceback"]))
            elif kind == "status" and content["execution_state"] == "idle":
                break
        # Replies on the shell channel are not needed (iopub said it all): drop them so they do not pile up.
        while True:
            try:
                kc.get_shell_msg(timeout=0)
            except queue.Empty:
                break

    def interrupt(self) -> None:
        if self.km is not None:
            self.km.interrupt_kernel()

    def restart(self) -> None:
        if self.km is None:
            return
        self.kc.stop_channels()
        self.km.restart_kernel(now=True)
        kc = self.km.client()
        kc.start_channels()
        kc.wait_for_ready(timeout=READY_WAIT_S)
        self.kc = kc
        self.execution_count = 0

    def shutdown(self) -> None:
        self.closed = True
        if self.km is not None:
            self.kc.stop_channels()
            self.km.shutdown_kernel(now=True)
            try:
                os.unlink(self.km.connection_file)
            except OSError:
                pass


@functools.lru_cache(maxsize=None)
def kernel_manager_class():
    """jupyter_client's KernelManager, giving the connection file to the kernel's user between its
    writing and the launch (at every start and restart): the file holds the key that signs the kernel's
    messages, so it is that user's alone (mode 0600). Imported late: jupyter_client is needed only when
    a kernel starts."""
    from jupyter_client import KernelManager

    class GivingKernelManager(KernelManager):
        def __init__(self, identity: Identity, **kw):
            super().__init__(**kw)
            self.identity = identity

        async def _async_launch_kernel(self, kernel_cmd, **kw):
            self.identity.give(self.connection_file)
            return await super()._async_launch_kernel(kernel_cmd, **kw)

    return GivingKernelManager


class PythonContext(JupyterContext):
    """An ipykernel with E2B's formatters (ipython_kernel_config.py, kernel_startup.py)."""

    language = "python"
    kernel_name = "python3"

    def kernel_env(self) -> dict:
        env = super().kernel_env()
        # Figures come back as display data (image/png) at the end of the cell or on plt.show().
        env["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
        return env

    def kernel_arguments(self) -> list:
        return [f"--config={os.path.join(HERE, 'ipython_kernel_config.py')}"]

    def set_env_code(self, env_vars: dict) -> str:
        # repr() of str keys and values is a Python literal, so no value can break out of the string.
        return (
            "globals()['__sandlot_saved_env'] = {k: __import__('os').environ.get(k) for k in %r}\n"
            "__import__('os').environ.update(%r)" % (list(env_vars), env_vars)
        )

    def restore_env_code(self) -> str:
        return (
            "for __k, __v in globals().pop('__sandlot_saved_env', {}).items():\n"
            "    __import__('os').environ.pop(__k, None) if __v is None "
            "else __import__('os').environ.__setitem__(__k, __v)\n"
            "del __k, __v"
        )


def r_string(s: str) -> str:
    """An R string literal of `s`: printable ASCII as is, everything else as \\U{...} escapes, so no
    value can end the literal early."""
    out = []
    for ch in s:
        if ch in '"\\' or not (" " <= ch <= "~"):
            out.append("\\U{%x}" % ord(ch))
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


class RContext(JupyterContext):
    """An IRkernel (Debian's r-cran-irkernel, kernelspec `ir`)."""

    language = "r"
    kernel_name = "ir"

    def set_env_code(self, env_vars: dict) -> str:
        names = ", ".join(r_string(k) for k in env_vars)
        pairs = ", ".join(f"{r_string(k)} = {r_string(v)}" for k, v in env_vars.items())
        # Names starting with a dot are hidden from ls(): the user's workspace looks untouched.
        return f".sandlot_saved_env <- Sys.getenv(c({names}), unset = NA, names = TRUE)\nSys.setenv({pairs})\ninvisible()"

    def restore_env_code(self) -> str:
        return (
            "for (.sandlot_k in names(.sandlot_saved_env)) {\n"
            "  .sandlot_v <- .sandlot_saved_env[[.sandlot_k]]\n"
            "  if (is.na(.sandlot_v)) Sys.unsetenv(.sandlot_k) "
            "else do.call(Sys.setenv, stats::setNames(list(.sandlot_v), .sandlot_k))\n"
            "}\n"
            "rm(.sandlot_saved_env, .sandlot_k, .sandlot_v)\ninvisible()"
        )


class MarkedProcess:
    """A child process whose stdout and stderr are read on two threads into one queue, cut at marker
    strings the child writes after each cell (so the runner knows both streams are drained)."""

    def __init__(self, argv: list, cwd: str, token: str, pass_fds=(), **popen):
        self.token = token.encode()
        self.proc = subprocess.Popen(
            argv,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            pass_fds=pass_fds,
            **popen,
        )
        self.events: queue.Queue = queue.Queue(maxsize=1024)
        for name, pipe in (("stdout", self.proc.stdout), ("stderr", self.proc.stderr)):
            threading.Thread(target=self._read, args=(name, pipe), daemon=True).start()

    def _read(self, name: str, pipe) -> None:
        """Forwards `pipe` as ("stdout"|"stderr", text) and (name + "-mark", payload) items; ("eof", name)
        at the end. The queue is bounded: a child that writes faster than the client reads waits."""
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        start = b"\x1e" + self.token
        buf = b""
        fd = pipe.fileno()
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            buf += chunk
            while True:
                i = buf.find(start)
                if i < 0:
                    break
                j = buf.find(b"\x1e", i + len(start))
                if j < 0:
                    break
                if i:
                    self.events.put((name, decoder.decode(buf[:i])))
                self.events.put((name + "-mark", buf[i + len(start) : j].decode("ascii", "replace")))
                buf = buf[j + 1 :]
            # Hold back a marker whose end has not come yet (a java outcome can be long), or a tail that
            # may be the start of one; send the rest now.
            i = buf.find(start)
            if i >= 0:
                keep = buf[i:]
            else:
                k = buf.rfind(b"\x1e")
                keep = buf[k:] if k >= 0 and len(buf) - k < len(start) else b""
            send = buf[: len(buf) - len(keep)]
            if send:
                text = decoder.decode(send)
                if text:
                    self.events.put((name, text))
            buf = keep
        if buf:
            self.events.put((name, decoder.decode(buf, final=True)))
        self.events.put(("eof", name))

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


class ProcessContext(Context):
    """A context kept by a long-lived child process (bash, node) that prints markers after each cell."""

    def __init__(self, cwd: str, runtime_dir: Optional[str] = None):
        super().__init__(cwd)
        self.token = secrets.token_hex(16)
        self.workdir = tempfile.mkdtemp(prefix=f"sandlot-{self.language}-")
        # The child reads its cell files from here.
        self.identity.give(self.workdir)
        self.child: Optional[MarkedProcess] = None

    def child_env(self, **extra) -> dict:
        return self.identity.env(dict(os.environ, **extra))

    def spawn(self) -> MarkedProcess:
        raise NotImplementedError

    def start(self) -> None:
        self.child = self.spawn()

    def send_cell(self, code: str, env_vars: dict) -> None:
        raise NotImplementedError

    def outcome(self, stdout_mark: str, reply) -> Optional[dict]:
        """The cell's error line, if any, from its stdout marker payload and (node) its reply."""
        raise NotImplementedError

    def execute(self, code: str, env_vars: dict) -> Iterator[Optional[dict]]:
        if self.child is None or not self.child.alive():
            self.restart()
        child = self.child
        self.execution_count += 1
        yield {"type": "number_of_executions", "execution_count": self.execution_count}
        self.send_cell(code, env_vars)
        marks: dict = {}
        eofs = set()
        while len(marks) < 2:
            if self.child is not child:
                yield error_event("ContextRestarted", "the context was restarted while this cell ran")
                return
            try:
                item = child.events.get(timeout=TICK_S)
            except queue.Empty:
                yield None
                continue
            kind, payload = item
            if kind in ("stdout", "stderr"):
                yield {"type": kind, "text": payload, "timestamp": now_iso()}
            elif kind.endswith("-mark"):
                marks[kind[: -len("-mark")]] = payload
            elif kind == "eof":
                eofs.add(payload)
                if len(eofs) == 2:
                    status = child.proc.wait()
                    yield error_event(
                        "ContextExited",
                        f"{self.language} exited (status {status}) while running this cell; a new "
                        f"{self.language} process was started in {self.cwd}, so the context's state is gone",
                    )
                    self.restart()
                    return
        err = self.outcome(marks.get("stdout", ""), self.read_reply())
        if err:
            yield err
        else:
            yield from self.results()

    def read_reply(self):
        return None

    def results(self) -> Iterator[dict]:
        return iter(())

    def restart(self) -> None:
        if self.child is not None:
            self.child.kill()
        self.child = self.spawn()
        self.execution_count = 0

    def shutdown(self) -> None:
        self.closed = True
        if self.child is not None:
            self.child.kill()
        shutil.rmtree(self.workdir, ignore_errors=True)


class BashContext(ProcessContext):
    """One bash per context: each cell is sourced in the same shell, so cwd, variables and functions
    stay. SIGINT to its process group interrupts the foreground command, and the trap returns from the
    sourced cell (ending it) while the shell lives on."""

    language = "bash"

    def spawn(self) -> MarkedProcess:
        bash = shutil.which("bash")
        if bash is None:
            raise RuntimeError("bash is not installed in this image; install it (apt-get install bash)")
        return MarkedProcess([bash, "--noprofile", "--norc"], self.cwd, self.token, stdin=subprocess.PIPE,
                             env=self.child_env(TERM="dumb"), **self.identity.popen_args())

    def send_cell(self, code: str, env_vars: dict) -> None:
        cell = os.path.join(self.workdir, "cell.sh")
        with open(cell, "w", encoding="utf-8") as f:
            f.write(code)
            f.write("\n")
        self.identity.give(cell)
        q = shlex_quote
        save, restore = [], []
        for i, (k, v) in enumerate(env_vars.items()):
            save.append(f'if [ -n "${{{k}+x}}" ]; then __sandlot_e{i}=1 __sandlot_v{i}="${k}"; '
                        f"else __sandlot_e{i}=0; fi; export {k}={q(v)}")
            restore.append(f'if [ "$__sandlot_e{i}" = 1 ]; then export {k}="$__sandlot_v{i}"; else unset {k}; fi; '
                           f"unset __sandlot_e{i} __sandlot_v{i}")
        # The trap is set again before each cell (a cell may have replaced it); the cell reads no stdin
        # (that pipe carries the runner's commands).
        line = "; ".join(
            ["trap 'return 130' INT"]
            + save
            + [f". {q(cell)} </dev/null", "__sandlot_rc=$?"]
            + restore
            + [
                f"printf '\\036{self.token}%d\\036' \"$__sandlot_rc\"",
                f"printf '\\036{self.token}\\036' >&2",
                "unset __sandlot_rc",
            ]
        )
        self.child.proc.stdin.write((line + "\n").encode())
        self.child.proc.stdin.flush()

    def outcome(self, stdout_mark: str, reply) -> Optional[dict]:
        try:
            rc = int(stdout_mark)
        except ValueError:
            rc = 1
        if rc == 130:
            return error_event("KeyboardInterrupt", "the cell was interrupted")
        if rc != 0:
            return error_event("NonZeroExitStatus", f"the cell's last command exited with status {rc}")
        return None

    def interrupt(self) -> None:
        if self.child is not None and self.child.alive():
            os.killpg(self.child.proc.pid, signal.SIGINT)


class JavascriptContext(ProcessContext):
    """One node process per context running node_repl.js: cells are evaluated in one global scope, the
    value of the last expression is the result (a string as itself, as E2B's ijavascript shows it),
    `import` and top-level `await` work, SIGINT breaks a running cell."""

    language = "javascript"

    def spawn(self) -> MarkedProcess:
        node = shutil.which("node") or shutil.which("nodejs")
        if node is None:
            raise RuntimeError(
                "node is not installed in this image, so javascript cannot run; install nodejs in the image "
                "or use python or bash"
            )
        # Requests go to the child on one pipe, replies come back on another: its stdout and stderr
        # are the cell's own.
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        env = self.child_env(SANDLOT_REPL_TOKEN=self.token, SANDLOT_REPL_IN=str(req_r), SANDLOT_REPL_OUT=str(rep_w),
                             SANDLOT_REPL_LANGUAGE=self.language)
        try:
            child = MarkedProcess(
                [node, os.path.join(HERE, "node_repl.js")],
                self.cwd,
                self.token,
                pass_fds=(req_r, rep_w),
                stdin=subprocess.DEVNULL,
                env=env,
                **self.identity.popen_args(),
            )
        finally:
            os.close(req_r)
            os.close(rep_w)
        child.requests = os.fdopen(req_w, "w", encoding="utf-8")
        child.replies = os.fdopen(rep_r, "r", encoding="utf-8")
        return child

    def send_cell(self, code: str, env_vars: dict) -> None:
        self.child.requests.write(json.dumps({"code": code, "env": env_vars}) + "\n")
        self.child.requests.flush()

    def read_reply(self):
        # Written before the markers, so it is there by now.
        line = self.child.replies.readline()
        return json.loads(line) if line else {"error": {"name": "ContextExited", "value": "node exited", "traceback": ""}}

    def outcome(self, stdout_mark: str, reply) -> Optional[dict]:
        self._reply = reply
        err = reply.get("error")
        if err:
            return error_event(err["name"], err["value"], err.get("traceback", ""))
        return None

    def results(self) -> Iterator[dict]:
        text = self._reply.get("text")
        if text is not None:
            yield {"type": "result", "is_main_result": True, "text": text}

    def interrupt(self) -> None:
        if self.child is not None and self.child.alive():
            os.kill(self.child.proc.pid, signal.SIGINT)

    def restart(self) -> None:
        if self.child is not None:
            self.child.requests.close()
            self.child.replies.close()
        super().restart()


class TypescriptContext(JavascriptContext):
    """node_repl.js with each cell transpiled by TypeScript first (types stripped, no type check, as
    E2B's TypeScript kernel runs it)."""

    language = "typescript"


class JavaContext(ProcessContext):
    """One JVM per context running JavaRepl (next to this file; compiled into java/ by the image's
    build, else run from source): JShell evaluates the cells, the last expression's value is the
    result, env vars are system properties (as in E2B's Java kernel), SIGINT stops the snippet."""

    language = "java"

    def spawn(self) -> MarkedProcess:
        java = shutil.which("java")
        if java is None:
            raise RuntimeError(
                "java is not installed in this image, so java cannot run; sandlot's code-interpreter image "
                "has it (Debian's openjdk-17-jdk-headless)"
            )
        compiled = os.path.join(HERE, "java")
        if os.path.exists(os.path.join(compiled, "JavaRepl.class")):
            main = ["-cp", compiled, "JavaRepl"]
        else:
            main = [os.path.join(HERE, "JavaRepl.java")]  # the JDK's source launcher compiles it first
        # The serial collector: a context is one small interactive JVM, not a server.
        argv = [java, "-XX:+UseSerialGC", *main]
        return MarkedProcess(argv, self.cwd, self.token, stdin=subprocess.PIPE,
                             env=self.child_env(SANDLOT_REPL_TOKEN=self.token), **self.identity.popen_args())

    def send_cell(self, code: str, env_vars: dict) -> None:
        b64 = lambda s: base64.b64encode(s.encode()).decode()  # noqa: E731
        fields = ["cell", b64(code)] + [f"{b64(k)}:{b64(v)}" for k, v in env_vars.items()]
        self.child.proc.stdin.write((" ".join(fields) + "\n").encode())
        self.child.proc.stdin.flush()

    def outcome(self, stdout_mark: str, reply) -> Optional[dict]:
        fields = [base64.b64decode(f).decode("utf-8", "replace") for f in stdout_mark.split(" ")[1:]]
        kind = stdout_mark.split(" ", 1)[0]
        self._value = None
        if kind == "error" and len(fields) == 3:
            return error_event(*fields)
        if kind != "ok":
            return error_event("ContextError", f"the java context answered {stdout_mark[:200]!r}")
        if fields:
            self._value = fields[0]
        return None

    def results(self) -> Iterator[dict]:
        if self._value is not None:
            yield {"type": "result", "is_main_result": True, "text": self._value}

    def interrupt(self) -> None:
        if self.child is not None and self.child.alive():
            os.kill(self.child.proc.pid, signal.SIGINT)


CONTEXT_CLASSES = {
    "python": PythonContext,
    "r": RContext,
    "bash": BashContext,
    "javascript": JavascriptContext,
    "typescript": TypescriptContext,
    "java": JavaContext,
}


def shlex_quote(s: str) -> str:
    return "'" + s.replace("'", "'\"'\"'") + "'"


class Contexts:
    """Every context by id, and the default one per language (what `language` without `context_id`
    runs in). Bounded by MAX_CONTEXTS."""

    def __init__(self, default_cwd: str):
        self.default_cwd = default_cwd
        self.runtime_dir = tempfile.mkdtemp(prefix="sandlot-jupyter-")
        # Kernels that run as `user` open their connection file (theirs, 0600) by name in here.
        os.chmod(self.runtime_dir, 0o711)
        self.lock = threading.Lock()
        self.by_id: dict = {}
        self.defaults: dict = {}

    def create(self, language: str, cwd: Optional[str], default: bool = False) -> Context:
        cwd = cwd or self.default_cwd
        if not os.path.isabs(cwd):
            raise RequestError(400, f"cwd must be an absolute path, got {cwd!r}")
        if not os.path.isdir(cwd):
            raise RequestError(400, f"cwd {cwd!r} is not a directory in the sandbox; create it first")
        with self.lock:
            if default and language in self.defaults:
                return self.by_id[self.defaults[language]]
            if len(self.by_id) >= MAX_CONTEXTS:
                raise RequestError(
                    429,
                    f"this sandbox already has {MAX_CONTEXTS} contexts, the most it keeps; remove one with "
                    "DELETE /contexts/{id} (SDK: remove_code_context)",
                )
            ctx = CONTEXT_CLASSES[language](cwd, self.runtime_dir)
            self.by_id[ctx.id] = ctx
            if default:
                self.defaults[language] = ctx.id
        ctx.start_in_background()
        return ctx

    def get(self, context_id: str) -> Context:
        with self.lock:
            ctx = self.by_id.get(context_id)
        if ctx is None:
            raise RequestError(404, f"context {context_id} not found; list them with GET /contexts")
        return ctx

    def remove(self, context_id: str) -> Context:
        with self.lock:
            ctx = self.by_id.pop(context_id, None)
            if ctx is None:
                raise RequestError(404, f"context {context_id} not found; list them with GET /contexts")
            for lang, cid in list(self.defaults.items()):
                if cid == context_id:
                    del self.defaults[lang]
        return ctx

    def list(self) -> list:
        with self.lock:
            return [c.describe() for c in self.by_id.values()]


CONTEXTS: Contexts


def peer_closed(sock: socket.socket) -> bool:
    """Whether the client closed its side (readable with nothing to read)."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        if not readable:
            return False
        return sock.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "sandlot-code-interpreter"
    timeout = REQUEST_READ_TIMEOUT_S

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        sys.stderr.write("code-interpreter: %s %s\n" % (self.address_string(), format % args))

    # Plain bodies: the SDK turns a non-2xx answer's text into its exception's message.
    def reply(self, status: int, body, content_type: str = "application/json") -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def fail(self, e: RequestError) -> None:
        self.reply(e.status, e.message.encode(), "text/plain; charset=utf-8")

    def body(self) -> dict:
        length = self.headers.get("Content-Length")
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            raise RequestError(411, "send the request body with a Content-Length, not chunked")
        try:
            n = int(length or 0)
        except ValueError:
            raise RequestError(400, f"Content-Length {length!r} is not a number")
        if n > MAX_BODY_BYTES:
            self.close_connection = True
            raise RequestError(413, f"the request body is {n} bytes; the limit is {MAX_BODY_BYTES}")
        raw = self.rfile.read(n) if n else b""
        if not raw.strip():
            return {}
        try:
            data = json.loads(raw)
        except ValueError as e:
            raise RequestError(400, f"the request body is not JSON: {e}")
        if not isinstance(data, dict):
            raise RequestError(400, "the request body must be a JSON object")
        return data

    def route(self, method: str) -> None:
        path = self.path.split("?", 1)[0].rstrip("/") or "/"
        parts = path.strip("/").split("/")
        try:
            if method == "GET" and path == "/health":
                return self.reply(200, "OK")
            if method == "POST" and path == "/execute":
                return self.execute(self.body())
            if path == "/contexts":
                if method == "POST":
                    return self.create_context(self.body())
                if method == "GET":
                    return self.reply(200, CONTEXTS.list())
            if len(parts) == 2 and parts[0] == "contexts" and method == "DELETE":
                self.body()
                ctx = CONTEXTS.remove(parts[1])
                threading.Thread(target=ctx.shutdown, daemon=True).start()
                return self.reply(200, None)
            if len(parts) == 3 and parts[0] == "contexts" and parts[2] == "restart" and method == "POST":
                self.body()
                return self.restart_context(parts[1])
            raise RequestError(404, f"no route {method} {path}")
        except RequestError as e:
            self.fail(e)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception:  # noqa: BLE001 - answered as our fault, with the trace in our log
            traceback.print_exc()
            self.fail(RequestError(500, "the code interpreter failed handling this request (its log has the trace)"))

    def do_GET(self):
        self.route("GET")

    def do_POST(self):
        self.route("POST")

    def do_DELETE(self):
        self.route("DELETE")

    def create_context(self, req: dict) -> None:
        unknown = set(req) - {"language", "cwd"}
        if unknown:
            raise RequestError(400, f"unknown field(s) {sorted(unknown)}; a context takes language and cwd")
        language = normalize_language(str_field(req, "language"))
        ctx = CONTEXTS.create(language, str_field(req, "cwd"))
        try:
            ctx.wait_ready()
        except RequestError:
            CONTEXTS.remove(ctx.id)
            raise
        self.reply(200, ctx.describe())

    def restart_context(self, context_id: str) -> None:
        ctx = CONTEXTS.get(context_id)
        ctx.wait_ready()
        # A running cell is interrupted first; the lock is then ours once it has ended.
        ctx.interrupt()
        if not ctx.lock.acquire(timeout=INTERRUPT_GRACE_S):
            ctx.restart()  # the running cell sees the new runtime and ends with ContextRestarted
            ctx.lock.acquire()
        try:
            ctx.restart()
        finally:
            ctx.lock.release()
        self.reply(200, None)

    def execute(self, req: dict) -> None:
        unknown = set(req) - {"code", "context_id", "language", "env_vars", "timeout"}
        if unknown:
            raise RequestError(400, f"unknown field(s) {sorted(unknown)} in /execute")
        code = req.get("code")
        if not isinstance(code, str):
            raise RequestError(400, "`code` (a string) is required")
        context_id, language = str_field(req, "context_id"), str_field(req, "language")
        if context_id and language:
            raise RequestError(400, "Only one of context_id or language can be provided")
        env_vars = req.get("env_vars") or {}
        if not isinstance(env_vars, dict) or not all(isinstance(v, str) for v in env_vars.values()):
            raise RequestError(400, "`env_vars` must be an object of string values")
        for k in env_vars:
            if not ENV_NAME.match(k):
                raise RequestError(400, f"env var name {k!r} is not a valid identifier ([A-Za-z_][A-Za-z0-9_]*)")
        timeout = req.get("timeout")
        if timeout is not None and (not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or timeout <= 0):
            raise RequestError(400, f"`timeout` must be a positive number of seconds, got {timeout!r}")
        if context_id:
            ctx = CONTEXTS.get(context_id)
        else:
            ctx = CONTEXTS.create(normalize_language(language), None, default=True)
        try:
            ctx.wait_ready()
        except RequestError:
            if ctx.start_error:
                # A runtime that cannot start (node missing) holds no slot; the next request tries again.
                try:
                    CONTEXTS.remove(ctx.id)
                except RequestError:
                    pass
            raise

        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        Stream(self, ctx, timeout).run(code, env_vars)


def str_field(req: dict, name: str) -> Optional[str]:
    value = req.get(name)
    if value is not None and not isinstance(value, str):
        raise RequestError(400, f"`{name}` must be a string")
    return value or None


class Stream:
    """One execution's answer: its lines as chunks, keepalives, and the interrupt when the client leaves
    or the deadline passes."""

    def __init__(self, handler: Handler, ctx: Context, timeout: Optional[float]):
        self.h = handler
        self.ctx = ctx
        self.deadline = time.monotonic() + timeout if timeout else None
        self.timeout = timeout
        self.client_gone = False
        self.last_write = time.monotonic()

    def write(self, event: dict) -> None:
        if self.client_gone:
            return
        data = (json.dumps(event) + "\n").encode()
        try:
            self.h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.h.wfile.flush()
            self.last_write = time.monotonic()
        except OSError:
            self.client_gone = True
            self.h.close_connection = True

    def should_stop(self) -> Optional[str]:
        if not self.client_gone and peer_closed(self.h.connection):
            self.client_gone = True
            self.h.close_connection = True
        if self.client_gone:
            return "client"
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return "timeout"
        return None

    def run(self, code: str, env_vars: dict) -> None:
        ctx = self.ctx
        # Wait for the context's previous cell, watching the client and deadline meanwhile.
        while not ctx.lock.acquire(timeout=TICK_S):
            if self.should_stop():
                return self.finish(error_event(
                    "TimeoutError", "the cell's timeout passed while it waited for the context's previous cell"
                ) if not self.client_gone else None)
            if time.monotonic() - self.last_write >= KEEPALIVE_S:
                self.write({"type": "keepalive"})
        try:
            if ctx.closed:
                return self.finish(error_event("ContextRemoved", f"context {ctx.id} was removed"))
            self.run_locked(code, env_vars)
        finally:
            ctx.lock.release()

    def run_locked(self, code: str, env_vars: dict) -> None:
        ctx = self.ctx
        budget = OutputBudget(MAX_CELL_OUTPUT_BYTES)
        interrupted_at = None
        why = None
        cell = ctx.execute(code, env_vars)
        try:
            for event in cell:
                if event is None:
                    if interrupted_at is None:
                        why = self.should_stop()
                        if why:
                            ctx.interrupt()
                            interrupted_at = time.monotonic()
                    elif time.monotonic() - interrupted_at > INTERRUPT_GRACE_S:
                        # It ignores SIGINT (a C extension in a loop, a trap): a new runtime, same id.
                        ctx.restart()
                        interrupted_at = float("inf")
                    if time.monotonic() - self.last_write >= KEEPALIVE_S:
                        self.write({"type": "keepalive"})
                    continue
                if event["type"] == "error" and why == "timeout":
                    event = error_event(
                        "TimeoutError",
                        f"the cell ran past its timeout of {self.timeout} s and was interrupted; "
                        "the context keeps its state",
                        event.get("traceback", ""),
                    )
                for e in budget.admit(event):
                    self.write(e)
        except Exception as e:  # noqa: BLE001 - the answer has begun: the failure becomes its last line
            traceback.print_exc()
            return self.finish(error_event(
                "InternalError", f"the code interpreter failed running this cell ({e}); its log has the trace"
            ))
        finally:
            cell.close()
        self.finish(None)

    def finish(self, last: Optional[dict]) -> None:
        if last:
            self.write(last)
        self.write({"type": "end_of_execution"})
        if not self.client_gone:
            try:
                self.h.wfile.write(b"0\r\n\r\n")
                self.h.wfile.flush()
            except OSError:
                self.h.close_connection = True


class Server(ThreadingHTTPServer):
    """A thread per connection, at most MAX_CONNECTIONS at once (the rest are closed at once)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, *args, **kwargs):
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(*args, **kwargs)

    def process_request(self, request, client_address):
        if not self.slots.acquire(blocking=False):
            try:
                request.sendall(self._busy())
            except OSError:
                pass
            finally:
                self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    @staticmethod
    def _busy() -> bytes:
        body = f"the code interpreter serves at most {MAX_CONNECTIONS} connections at once; retry\n".encode()
        return (
            b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
            b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
        )

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


def main() -> None:
    global CONTEXTS
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--host", default=os.environ.get("SANDLOT_INTERP_HOST", "0.0.0.0"))
    parser.add_argument("--port", type=int, default=env_int("SANDLOT_INTERP_PORT", 49999))
    parser.add_argument("--cwd", default=os.environ.get("SANDLOT_INTERP_CWD") or os.environ.get("HOME") or "/",
                        help="the default working directory of contexts")
    args = parser.parse_args()
    CONTEXTS = Contexts(args.cwd)
    # Listening first, the default kernel after: a request that comes right after boot waits for the
    # kernel instead of being refused.
    server = Server((args.host, args.port), Handler)
    for language in DEFAULT_LANGUAGES:
        # Only where the runtime is there: a default context that cannot start would only be an error
        # in the list (a request for the language still says what is missing).
        if language != "javascript" or shutil.which("node") or shutil.which("nodejs"):
            CONTEXTS.create(language, None, default=True)
    sys.stderr.write(f"code-interpreter: listening on {args.host}:{server.server_address[1]}\n")
    sys.stderr.flush()

    def stop(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    # A handler (not SIG_IGN, which a parent without job control leaves us) makes the children start
    # with SIGINT at its default, so an interrupt reaches the commands a cell runs.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        pass
    finally:
        for ctx in list(CONTEXTS.by_id.values()):
            try:
                ctx.shutdown()
            except Exception:  # noqa: BLE001 - best effort at exit
                pass
        shutil.rmtree(CONTEXTS.runtime_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
