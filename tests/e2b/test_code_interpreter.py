"""The official `e2b-code-interpreter` SDK against sandlot: `Sandbox.create()` boots the
`code-interpreter-v1` template (the `code-interpreter` image, built here with
scripts/code-interpreter-image.sh from the Debian image), whose runner on port 49999 the SDK reaches
through sandlot's port routing (`E2b-Sandbox-Port: 49999`).

Needs SANDLOT_DEBIAN_IMAGE (scripts/debian-image.sh; scripts/test.sh exports it): without it the tests
fail saying so, they never pass unchecked.
"""

import asyncio
import base64
import os
import struct
import subprocess
import time

import pytest
from e2b.exceptions import TimeoutException
from e2b_code_interpreter import AsyncSandbox, Sandbox

from conftest import REPO


@pytest.fixture(scope="module")
def interpreter_image(server):
    tarball = os.environ.get("SANDLOT_DEBIAN_IMAGE")
    if not tarball or not os.path.exists(tarball):
        pytest.fail("SANDLOT_DEBIAN_IMAGE is not set: export SANDLOT_DEBIAN_IMAGE=$(sudo scripts/debian-image.sh)")
    binary = os.environ.get("SANDLOT_BIN") or str(REPO / "target" / "debug" / "sandlot")
    env = {**os.environ, "SANDLOT_URL": server.url, "SANDLOT_API_KEY": server.admin_key, "SANDLOT_BIN": binary}
    subprocess.run([binary, "image", "import", "--name", "debian:bookworm", tarball], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run([str(REPO / "scripts" / "code-interpreter-image.sh")], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    return "code-interpreter"


@pytest.fixture
def sbx(interpreter_image):
    s = Sandbox.create(timeout=300)
    yield s
    s.kill()


def png_size(data: bytes):
    assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:16]
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_state_is_kept_across_cells_and_counted(sbx):
    first = sbx.run_code("x = 41\nprint('set')")
    assert first.error is None, first.error
    assert first.logs.stdout == ["set\n"]
    second = sbx.run_code("x + 1")
    assert second.text == "42"
    assert second.execution_count == first.execution_count + 1


def test_output_streams_to_callbacks_as_it_happens(sbx):
    seen = []
    t0 = time.monotonic()
    code = "import sys, time\nprint('one', flush=True)\ntime.sleep(1.5)\nprint('two', file=sys.stderr)"
    ex = sbx.run_code(code, on_stdout=lambda m: seen.append(("out", m.line, time.monotonic() - t0)),
                      on_stderr=lambda m: seen.append(("err", m.line, time.monotonic() - t0)))
    assert [(k, l) for k, l, _ in seen] == [("out", "one\n"), ("err", "two\n")]
    # The first line arrived while the cell still slept: streamed, not buffered to the end.
    assert seen[1][2] - seen[0][2] > 1.0, seen
    assert ex.logs.stderr == ["two\n"]


def test_a_matplotlib_figure_comes_back_as_a_png(sbx):
    code = (
        "import matplotlib.pyplot as plt\n"
        "fig = plt.figure(figsize=(4, 3), dpi=50)\n"
        "plt.plot([1, 2, 3], [1, 4, 9])\n"
        "plt.show()"
    )
    ex = sbx.run_code(code)
    assert ex.error is None, ex.error
    pngs = [r.png for r in ex.results if r.png]
    assert len(pngs) == 1, ex.results
    width, height = png_size(base64.b64decode(pngs[0]))
    # A 4×3 in figure at 50 dpi is 200×150 px; the inline backend crops it to its drawing (tight bbox).
    assert 100 <= width <= 200 and 75 <= height <= 150, (width, height)


def test_rich_results_and_json(sbx):
    ex = sbx.run_code("import pandas as pd\npd.DataFrame({'a': [1, 2]})")
    assert ex.error is None, ex.error
    assert "<table" in ex.results[0].html
    ex = sbx.run_code("from IPython.display import JSON\nJSON({'k': [1, 2]})")
    assert ex.results[0].json == {"k": [1, 2]}


def test_an_exception_is_reported_with_its_traceback(sbx):
    ex = sbx.run_code("def f():\n    return 1 / 0\nf()")
    assert ex.error is not None
    assert ex.error.name == "ZeroDivisionError"
    assert ex.error.value == "division by zero"
    assert "f()" in ex.error.traceback and "1 / 0" in ex.error.traceback
    # The context survives its error.
    assert sbx.run_code("2 * 21").text == "42"


def test_a_timeout_interrupts_the_cell_and_keeps_the_context(sbx):
    sbx.run_code("kept = 'still here'")
    t0 = time.monotonic()
    with pytest.raises(TimeoutException):
        sbx.run_code("import time\ntime.sleep(60)", timeout=2)
    assert time.monotonic() - t0 < 20
    # Interrupted, not killed: the state is there, and the kernel answers at once.
    ex = sbx.run_code("kept", timeout=30)
    assert ex.text == "still here", (ex.text, ex.error)


def test_contexts_are_separate_and_can_be_restarted_and_removed(sbx):
    ctx = sbx.create_code_context()
    sbx.run_code("y = 'in ctx'", context=ctx)
    assert sbx.run_code("y", context=ctx).text == "in ctx"  # a str result without its repr quotes, as E2B's runner shows it
    assert sbx.run_code("y").error.name == "NameError"
    assert ctx.id in [c.id for c in sbx.list_code_contexts()]
    sbx.restart_code_context(ctx)
    assert sbx.run_code("y", context=ctx).error.name == "NameError"
    sbx.remove_code_context(ctx)
    assert ctx.id not in [c.id for c in sbx.list_code_contexts()]


def test_bash_cells_keep_their_shell(sbx):
    ex = sbx.run_code("cd /tmp && N=3", language="bash")
    assert ex.error is None, ex.error
    ex = sbx.run_code('echo "$PWD $((N + 1))"', language="bash")
    assert ex.logs.stdout == ["/tmp 4\n"]


def test_envs_apply_to_one_cell(sbx):
    ex = sbx.run_code("import os\nos.environ.get('ONLY_HERE')", envs={"ONLY_HERE": "yes"})
    assert ex.text == "yes"


def test_the_async_client(interpreter_image):
    async def flow():
        s = await AsyncSandbox.create(timeout=300)
        try:
            await s.run_code("z = 6 * 7")
            ex = await s.run_code("z")
            assert ex.text == "42"
        finally:
            await s.kill()

    asyncio.run(flow())
