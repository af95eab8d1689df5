"""`sandlot bench --only e2b`: the official E2B Python SDK against sandlot. Run by the bench with the
SDK's environment (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY) pointing at the server measured; prints
one JSON object: figure name -> samples in milliseconds.

Measured, as a user of the SDK sees it (Python's own overhead included):
- create→first output: `Sandbox.create()`, then `commands.run("echo hi")` until its first stdout
  chunk reaches the `on_stdout` callback;
- create→run→kill: the same, through the end of the command, then `kill()`;
- command round trip: `commands.run("true")` in a running sandbox.
"""

import json
import sys
import time

from e2b import Sandbox


def main(n: int) -> None:
    first, full, round_trip = [], [], []
    for _ in range(3):  # warm-up: connection pools, imports, the server's page cache
        s = Sandbox.create()
        s.commands.run("echo hi")
        s.kill()
    for _ in range(n):
        t0 = time.perf_counter()
        seen = []

        def on_stdout(_data, seen=seen, t0=t0):
            if not seen:
                seen.append(time.perf_counter() - t0)

        s = Sandbox.create()
        r = s.commands.run("echo hi", on_stdout=on_stdout)
        s.kill()
        full.append((time.perf_counter() - t0) * 1000)
        if r.stdout != "hi\n" or not seen:
            raise SystemExit(f"unexpected result {r!r}")
        first.append(seen[0] * 1000)
    s = Sandbox.create()
    for _ in range(n):
        t0 = time.perf_counter()
        s.commands.run("true")
        round_trip.append((time.perf_counter() - t0) * 1000)
    s.kill()
    json.dump(
        {
            "e2b SDK create→first output": first,
            "e2b SDK create→run(echo)→kill": full,
            "e2b SDK command round trip (true)": round_trip,
        },
        sys.stdout,
    )


if __name__ == "__main__":
    main(int(sys.argv[1]))
