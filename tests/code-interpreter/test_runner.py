"""The code interpreter's runner (resources/code-interpreter/server.py) driven over HTTP, on the host.

Run with the venv scripts/interp-test-venv.sh makes (ipykernel, matplotlib, numpy, pandas, pytest):
    "$(scripts/interp-test-venv.sh)" -m pytest tests/code-interpreter/test_runner.py
Each test names the behaviour the e2b-code-interpreter SDK relies on. The server runs as a child of the
test on a free loopback port, with its default cwd in a temporary directory.
"""

import base64
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SERVER = os.path.join(ROOT, "resources", "code-interpreter", "server.py")
SUPERVISOR = os.path.join(ROOT, "resources", "code-interpreter", "supervise.py")
# TypeScript for the typescript context, installed beside the venv by scripts/interp-test-venv.sh.
NODE_MODULES = os.path.join(sys.prefix, "node_modules")
HAS_NODE = shutil.which("node") is not None
HAS_TYPESCRIPT = HAS_NODE and os.path.isdir(os.path.join(NODE_MODULES, "typescript"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("interp-home")
    port = free_port()
    env = dict(os.environ, SANDLOT_INTERP_MAX_CONTEXTS="8", SANDLOT_INTERP_MAX_OUTPUT_BYTES=str(1 << 20),
               NODE_PATH=NODE_MODULES)
    proc = subprocess.Popen(
        [sys.executable, SERVER, "--host", "127.0.0.1", "--port", str(port), "--cwd", str(cwd)],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    # Listening comes before the kernel: the first line on stderr says so.
    line = proc.stderr.readline()
    assert "listening" in line, line
    yield ("127.0.0.1", port, str(cwd))
    proc.terminate()
    proc.wait(timeout=20)


def request(server, method, path, body=None, timeout=60):
    conn = http.client.HTTPConnection(server[0], server[1], timeout=timeout)
    conn.request(method, path, body=None if body is None else json.dumps(body),
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, data


def execute(server, **body):
    """The lines of one /execute, parsed, keepalives dropped (`body` is the request, `timeout` included)."""
    status, data = request(server, "POST", "/execute", body, timeout=60)
    assert status == 200, data
    lines = [json.loads(line) for line in data.decode().splitlines() if line.strip()]
    assert lines[-1] == {"type": "end_of_execution"}, lines
    return [e for e in lines if e["type"] != "keepalive"]


def of(events, kind):
    return [e for e in events if e["type"] == kind]


def stdout(events):
    return "".join(e["text"] for e in of(events, "stdout"))


def test_python_state_is_kept_across_cells_and_the_last_expression_is_the_main_result(server):
    first = execute(server, code="answer = 41\nprint('side effect')")
    assert stdout(first) == "side effect\n"
    second = execute(server, code="answer + 1")
    results = of(second, "result")
    assert results == [{"type": "result", "is_main_result": True, "text": "42"}]
    counts = [e["execution_count"] for e in of(first + second, "number_of_executions")]
    assert counts[1] == counts[0] + 1


def test_matplotlib_figure_comes_back_as_a_png(server):
    events = execute(server, code=(
        "import matplotlib.pyplot as plt\n"
        "fig, ax = plt.subplots(figsize=(4, 3), dpi=50)\n"
        "ax.plot([1, 2, 3], [3, 1, 2])\n"
        "plt.show()"
    ))
    pngs = [r for r in of(events, "result") if "png" in r]
    assert len(pngs) == 1, events
    raw = base64.b64decode(pngs[0]["png"])
    assert raw[:8] == b"\x89PNG\r\n\x1a\n"
    # IHDR: width and height, big-endian, right after the signature and chunk header.
    width, height = int.from_bytes(raw[16:20], "big"), int.from_bytes(raw[20:24], "big")
    # 4x3 inches at 50 dpi is 200x150; the inline backend trims the margins (bbox_inches="tight").
    assert 150 <= width <= 200 and 100 <= height <= 150, (width, height)
    assert pngs[0]["is_main_result"] is False


def test_rich_results_carry_html_and_text(server):
    events = execute(server, code="import pandas as pd\npd.DataFrame({'a': [1, 2]})")
    (result,) = of(events, "result")
    assert "<table" in result["html"] and "a" in result["text"]


def test_an_exception_is_an_error_with_name_value_and_traceback(server):
    events = execute(server, code="def f():\n    raise ValueError('bad input')\nf()")
    (err,) = of(events, "error")
    assert err["name"] == "ValueError"
    assert err["value"] == "bad input"
    assert "f()" in err["traceback"] and "ValueError" in err["traceback"]
    assert "\x1b[" not in err["traceback"], "tracebacks carry no terminal colours"


def test_a_timeout_interrupts_the_cell_and_keeps_the_context(server):
    execute(server, code="kept = 'still here'")
    t0 = time.monotonic()
    events = execute(server, code="import time\nwhile True:\n    time.sleep(0.05)", timeout=1)
    assert time.monotonic() - t0 < 5
    (err,) = of(events, "error")
    assert err["name"] == "TimeoutError" and "KeyboardInterrupt" in err["traceback"]
    assert of(execute(server, code="kept"), "result")[0]["text"] == "still here"


def test_a_client_that_goes_away_interrupts_its_cell(server):
    execute(server, code="marker = 0")
    conn = http.client.HTTPConnection(server[0], server[1], timeout=30)
    conn.request("POST", "/execute", body=json.dumps(
        {"code": "import time\nfor i in range(600):\n    marker = i\n    time.sleep(0.05)"}))
    resp = conn.getresponse()
    resp.fp.readline()  # a chunk of the stream: the cell runs
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    # The next cell queues behind the first: it runs within seconds only if the first was interrupted.
    t0 = time.monotonic()
    value = int(of(execute(server, code="marker"), "result")[0]["text"])
    assert time.monotonic() - t0 < 10
    assert value < 500


def test_env_vars_apply_to_one_cell_only(server):
    events = execute(server, code="import os\nos.environ['SANDLOT_T']", env_vars={"SANDLOT_T": "it's set"})
    assert of(events, "result")[0]["text"] == "it's set"
    events = execute(server, code="import os\nos.environ.get('SANDLOT_T', 'unset')")
    assert of(events, "result")[0]["text"] == "unset"


def test_output_past_the_cell_limit_is_cut_with_a_note(server):
    events = execute(server, code="for i in range(100000):\n    print('x' * 100)")
    total = sum(len(json.dumps(e)) for e in of(events, "stdout"))
    assert total <= (1 << 20) + 4096
    assert "output truncated" in "".join(e["text"] for e in of(events, "stderr"))


def test_contexts_create_list_restart_remove(server):
    status, body = request(server, "POST", "/contexts", {"language": "python", "cwd": "/tmp"})
    assert status == 200, body
    ctx = json.loads(body)
    assert ctx["language"] == "python" and ctx["cwd"] == "/tmp"
    execute(server, context_id=ctx["id"], code="import os\nin_ctx = os.getcwd()")
    assert of(execute(server, context_id=ctx["id"], code="in_ctx"), "result")[0]["text"] == "/tmp"
    # Contexts are separate namespaces.
    (err,) = of(execute(server, code="in_ctx"), "error")
    assert err["name"] == "NameError"
    status, body = request(server, "GET", "/contexts")
    assert ctx in json.loads(body)
    status, _ = request(server, "POST", f"/contexts/{ctx['id']}/restart")
    assert status == 200
    (err,) = of(execute(server, context_id=ctx["id"], code="in_ctx"), "error")
    assert err["name"] == "NameError", "a restart loses the state"
    status, _ = request(server, "DELETE", f"/contexts/{ctx['id']}")
    assert status == 200
    status, body = request(server, "GET", "/contexts")
    assert ctx["id"] not in [c["id"] for c in json.loads(body)]
    status, body = request(server, "POST", "/execute", {"context_id": ctx["id"], "code": "1"})
    assert status == 404 and b"not found" in body


def test_bash_context_keeps_cwd_and_variables(server):
    status, body = request(server, "POST", "/contexts", {"language": "bash"})
    assert status == 200, body
    ctx = json.loads(body)
    assert ctx["cwd"] == server[2]
    execute(server, context_id=ctx["id"], code="mkdir -p sub && cd sub && GREETING=hello")
    events = execute(server, context_id=ctx["id"], code='echo "$GREETING from $(pwd)"')
    assert stdout(events) == f"hello from {server[2]}/sub\n"
    (err,) = of(execute(server, context_id=ctx["id"], code="false"), "error")
    assert err["value"].endswith("status 1")
    events = execute(server, context_id=ctx["id"], code="sleep 60", timeout=1)
    assert of(events, "error")[0]["name"] == "TimeoutError"
    assert stdout(execute(server, context_id=ctx["id"], code="echo $GREETING")) == "hello\n"
    request(server, "DELETE", f"/contexts/{ctx['id']}")


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed on this host")
def test_javascript_context_keeps_globals(server):
    execute(server, language="javascript", code="let total = 40")
    events = execute(server, language="javascript", code="console.log('adding'); total + 2")
    assert stdout(events) == "adding\n"
    assert of(events, "result")[0]["text"] == "42"
    (err,) = of(execute(server, language="javascript", code="null.x"), "error")
    assert err["name"] == "TypeError"


def test_the_context_limit_is_enforced_with_a_clear_error(server):
    made = []
    try:
        while True:
            status, body = request(server, "POST", "/contexts", {"language": "bash"})
            if status != 200:
                break
            made.append(json.loads(body)["id"])
            assert len(made) <= 8
        assert status == 429 and b"remove one" in body
    finally:
        for cid in made:
            request(server, "DELETE", f"/contexts/{cid}")


def test_bad_requests_say_what_is_wrong(server):
    status, body = request(server, "POST", "/execute", {"code": "1", "language": "cobol"})
    assert status == 400 and b"cobol" in body
    status, body = request(server, "POST", "/execute", {"code": "1", "context_id": "x", "language": "python"})
    assert status == 400
    status, body = request(server, "POST", "/execute", {"code": "1", "env_vars": {"A-B": "x"}})
    assert status == 400 and b"A-B" in body


@pytest.mark.skipif(not HAS_NODE, reason="node is not installed on this host")
def test_javascript_strings_are_shown_as_themselves_and_the_default_context_is_listed(server):
    assert of(execute(server, language="js", code="'a' + 'b'"), "result")[0]["text"] == "ab"
    assert of(execute(server, language="js", code="[1, 'x']"), "result")[0]["text"] == "[ 1, 'x' ]"
    status, body = request(server, "GET", "/contexts")
    assert "javascript" in [c["language"] for c in json.loads(body)]


@pytest.mark.skipif(not HAS_TYPESCRIPT, reason="node or TypeScript (scripts/interp-test-venv.sh) is missing")
def test_javascript_imports_and_top_level_await(server):
    events = execute(server, language="javascript",
                     code="import { readFileSync } from 'fs'\nimport * as path from 'path'\nconsole.log(typeof readFileSync, path.sep)")
    assert stdout(events) == "function /\n"
    events = execute(server, language="javascript",
                     code="const later = await Promise.resolve(20)\nasync function twice(x) { return 2 * x }\nawait twice(later)")
    assert of(events, "result")[0]["text"] == "40"
    # The declarations of an awaiting cell are globals for the next cells.
    assert of(execute(server, language="javascript", code="later + 1"), "result")[0]["text"] == "21"
    # The same import again is no redeclaration error.
    assert not of(execute(server, language="javascript", code="import { readFileSync } from 'fs'"), "error")


@pytest.mark.skipif(not HAS_TYPESCRIPT, reason="node or TypeScript (scripts/interp-test-venv.sh) is missing")
def test_typescript_cells_are_transpiled_and_keep_state(server):
    events = execute(server, language="ts",
                     code="interface P { x: number }\nconst p: P = { x: 3 }\nconst m: string = 'hi'; console.log(m)")
    assert stdout(events) == "hi\n"
    assert of(execute(server, language="typescript", code="p.x * 2"), "result")[0]["text"] == "6"
    (err,) = of(execute(server, language="ts", code="const = 1"), "error")
    assert err["name"] == "SyntaxError"


@pytest.mark.skipif(shutil.which("java") is None, reason="java is not installed on this host")
def test_java_cells_run_in_jshell_with_env_vars_as_properties(server):
    events = execute(server, language="java", code='int x = 20;\nSystem.out.println("x is " + x);\nx * 2 + 2')
    assert stdout(events) == "x is 20\n"
    assert of(events, "result")[0]["text"] == "42"
    assert of(execute(server, language="java", code='System.getProperty("user.dir")'), "result")[0]["text"] == server[2]
    events = execute(server, language="java", code='System.getProperty("FOO")', env_vars={"FOO": "bar"})
    assert of(events, "result")[0]["text"] == "bar"
    events = execute(server, language="java", code='System.getProperty("FOO", "gone")')
    assert of(events, "result")[0]["text"] == "gone"
    (err,) = of(execute(server, language="java", code='Integer.parseInt("zz")'), "error")
    assert err["name"] == "NumberFormatException"
    (err,) = of(execute(server, language="java", code="int y = ;"), "error")
    assert err["name"] == "CompilationException"


def test_a_language_whose_runtime_is_missing_says_what_to_install(server):
    missing = [lang for lang, tool in (("java", "java"), ("r", "R")) if shutil.which(tool) is None]
    if not missing:
        pytest.skip("java and R are both installed here")
    status, body = request(server, "POST", "/execute", {"code": "1", "language": missing[0]})
    assert status == 500 and b"image" in body, body


def test_a_python_kernel_killed_between_cells_is_restarted_on_next_use(server):
    status, body = request(server, "POST", "/contexts", {})
    ctx = json.loads(body)
    pid = int(stdout(execute(server, context_id=ctx["id"], code="import os; print(os.getpid())")))
    os.kill(pid, 9)
    time.sleep(0.5)
    events = execute(server, context_id=ctx["id"], code="1 + 1")
    assert of(events, "result")[0]["text"] == "2"
    request(server, "DELETE", f"/contexts/{ctx['id']}")


def test_dataframes_and_figures_carry_e2b_data_and_chart(server):
    events = execute(server, code="import pandas as pd\npd.DataFrame({'a': [1, 2, 3]})")
    assert of(events, "result")[0]["data"] == {"a": [1, 2, 3]}
    events = execute(server, code="import matplotlib.pyplot as plt\nplt.plot([1, 2], [3, 4])\nplt.show()")
    chart = of(events, "result")[0]["chart"]
    assert chart["type"] == "line" and chart["elements"][0]["points"] == [[1.0, 3.0], [2.0, 4.0]]


def test_saving_a_pil_image_displays_it_and_the_formatters_leave_no_globals(server):
    events = execute(server, code="from PIL import Image\nImage.new('RGB', (4, 4)).save('x.png')")
    assert of(events, "result")[0]["png"]
    events = execute(server, code="[n for n in dir() if 'Formatter' in n or n in ('ip', 'patch_pil')]")
    assert of(events, "result")[0]["text"] == "[]"


def test_the_first_cell_loads_no_pandas_matplotlib_or_pil(tmp_path):
    """A fresh server's kernel: the formatters wait for the user's imports."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, SERVER, "--host", "127.0.0.1", "--port", str(port), "--cwd", str(tmp_path)],
                            stderr=subprocess.DEVNULL)
    try:
        wait_healthy(port)
        events = execute(("127.0.0.1", port), code="import sys; sorted(m for m in ('pandas', 'matplotlib', 'PIL.Image') if m in sys.modules)")
        assert of(events, "result")[0]["text"] == "[]"
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def wait_healthy(port, seconds=60.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if request(("127.0.0.1", port), "GET", "/health", timeout=2)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"no /health on port {port} within {seconds} s")


def children_of(pid):
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            if stat[stat.rfind(")") + 2:].split()[1] == str(pid):
                found.append(int(entry))
    return found


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        return stat[stat.rfind(")") + 2:][:1] != "Z"
    except OSError:
        return False


def test_the_supervisor_restarts_a_killed_server_and_kills_what_it_left(tmp_path):
    port = free_port()
    sup = subprocess.Popen([sys.executable, SUPERVISOR, "--host", "127.0.0.1", "--port", str(port), "--cwd", str(tmp_path)],
                           stderr=subprocess.PIPE, text=True)
    try:
        wait_healthy(port)
        (first,) = children_of(sup.pid)
        kernel = int(stdout(execute(("127.0.0.1", port), code="import os; print(os.getpid())")))
        os.kill(first, 9)
        wait_healthy(port)
        (second,) = [p for p in children_of(sup.pid) if p != kernel]
        assert second != first
        # The dead server's kernel was adopted by the supervisor and killed before the new server began.
        assert not alive(kernel)
        events = execute(("127.0.0.1", port), code="x = 1; x")
        assert of(events, "result")[0]["text"] == "1"
    finally:
        sup.terminate()
        sup.wait(timeout=30)
    log = sup.stderr.read()
    assert "the server exited (signal 9)" in log and "killed 0 process(es)" not in log, log
