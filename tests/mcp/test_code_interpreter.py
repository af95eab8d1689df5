"""`run_code` through the code interpreter (port 49999) where the sandbox's image runs it, over both
transports: state kept between calls, results and tracebacks in the answer; and the `python3 -c`
fallback where nothing listens there. The `code-interpreter` image is built once per module from
SANDLOT_DEBIAN_IMAGE with scripts/code-interpreter-image.sh, as tests/e2b does."""

import os
import re
import subprocess

import anyio
import pytest

from conftest import BINARY, REPO, open_mcp


@pytest.fixture(scope="module")
def interpreter_image(server, alice):
    tarball = os.environ.get("SANDLOT_DEBIAN_IMAGE")
    if not tarball:
        pytest.skip("SANDLOT_DEBIAN_IMAGE is not set (the Debian image tarball the code-interpreter image is "
                    "built from): export SANDLOT_DEBIAN_IMAGE=$(sudo scripts/debian-image.sh)")
    assert os.path.exists(tarball), f"SANDLOT_DEBIAN_IMAGE={tarball} does not exist"
    # Built with alice's key: the image is hers, as the sandboxes of the tests below are.
    env = {**os.environ, "SANDLOT_URL": server.url, "SANDLOT_API_KEY": alice, "SANDLOT_BIN": BINARY}
    subprocess.run([BINARY, "image", "import", "--name", "debian:bookworm", tarball], env=env,
                   check=True, stdout=subprocess.DEVNULL)
    subprocess.run([str(REPO / "scripts" / "code-interpreter-image.sh")], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    return "code-interpreter"


def sandbox_of(text: str) -> str:
    m = re.search(r"sandbox (sb_[a-z0-9]+)", text)
    assert m, text
    return m.group(1)


def test_run_code_keeps_state_in_the_code_interpreter(server, alice, transport, interpreter_image):
    async def main():
        async with open_mcp(server, transport, alice) as m:
            sid = sandbox_of(await m.ok("create_sandbox", image=interpreter_image))
            out = await m.ok("run_code", code="x = 41")
            assert out.startswith("ok in ") and f"sandbox {sid} (code interpreter" in out, out
            out = await m.ok("run_code", code="print(x + 1)")
            assert "--- stdout (3 bytes) ---\n42\n" in out, out
            # The cell's value is its result; imports stay too.
            await m.ok("run_code", code="import math")
            assert "--- result (5 bytes) ---\n3.142\n" in await m.ok("run_code", code="round(math.pi, 3)")
            # An exception: its name, value and traceback (a tool result, not an error: the code failed).
            out = await m.ok("run_code", code="def f():\n    return 1 / 0\nf()")
            assert out.startswith("error ZeroDivisionError in "), out
            assert "--- error: ZeroDivisionError: division by zero" in out and "return 1 / 0" in out, out
            # A figure is named with its size, never dumped as base64.
            out = await m.ok("run_code", code="import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()")
            assert re.search(r"\[image/png: \d+ bytes\]", out) and "iVBOR" not in out, out
            # bash keeps its state too, in its own context.
            await m.ok("run_code", language="bash", code="export GREETING=hej; cd /tmp")
            out = await m.ok("run_code", language="bash", code='echo "$GREETING $(pwd)"')
            assert "hej /tmp" in out, out
            # Output over the cap keeps head and tail, with the counts.
            out = await m.ok("run_code", code="print('a' * 100000 + 'END')")
            assert "--- stdout (100004 bytes, 83620 omitted from the middle) ---" in out, out[:300]
            assert "[sandlot: 83620 bytes omitted]" in out and "END" in out and len(out) < 17000
            # A cell past its timeout is stopped; the state survives.
            out = await m.ok("run_code", code="import time\ntime.sleep(30)", timeout_s=1)
            assert "TimeoutError" in out, out
            assert "42" in await m.ok("run_code", code="print(x + 1)")

            # A sandbox of the default image: no interpreter, each call a fresh python3 process.
            other = sandbox_of(await m.ok("create_sandbox"))
            out = await m.ok("run_code", code="y = 1; print(y + 1)")
            assert out.startswith("exit code 0") and sandbox_of(out) == other and "\n2\n" in out, out
            is_error, out = await m.call("run_code", code="print(y)")
            assert not is_error and out.startswith("exit code 1") and "NameError" in out, out
            # The interpreter sandbox still answers from its state, by id.
            assert "42" in await m.ok("run_code", code="print(x + 1)", sandbox_id=sid)

    anyio.run(main)
