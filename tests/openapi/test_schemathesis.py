"""schemathesis against a real `sandlot serve`: every operation of docs/openapi.json, fed the cases
schemathesis derives from the document (its examples, coverage and fuzzing phases; valid and invalid
data), must never be answered with a 5xx, and every answer must be documented: its status, its
content type, its headers and its body (docs/TESTING.md, "The OpenAPI checks").

Run: SANDLOT_BIN=target/debug/sandlot "$(scripts/openapi-venv.sh)/bin/pytest" -q tests/openapi

Most operations act on a resource named in the path, which a generated id never names: a case keeps
its generated ids one time in four, and otherwise gets live ones (a running sandbox, a process in it,
a snapshot, a throwaway key, a webhook, the admin's tenant), made again whenever a case deleted,
stopped or paused them. No operation is left out. A few values are steered so the run stays on
127.0.0.1 and within its time (see `_steer`).
"""

from __future__ import annotations

import json
import os
import random
import urllib.parse
from pathlib import Path
from typing import Any, Dict, Optional

import hypothesis
import jsonschema
import requests
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

ROOT = Path(__file__).resolve().parents[2]
DOC: Dict[str, Any] = json.loads((ROOT / "docs" / "openapi.json").read_text())
schema = schemathesis.openapi.from_dict(DOC)
# A build context is bytes, sent as they are, as schemathesis sends application/octet-stream.
schemathesis.serializer.alias("application/x-tar", "application/octet-stream")

# Cases per operation in the fuzzing phase (the examples and coverage phases add their own).
MAX_EXAMPLES = int(os.environ.get("OPENAPI_MAX_EXAMPLES", "12"))

PROXY_OPERATIONS = {"proxyGet", "proxyPost", "proxyPut", "proxyPatch", "proxyDelete"}


def not_a_server_error_of_ours(ctx, response, case):
    """not_a_server_error, but for the one 5xx that is the sandbox's and not the server's: a preview
    proxy's 502 `port_unreachable` when nothing in the sandbox accepts connections on the port (a
    gateway's answer for an upstream that is not there, documented, and retried by clients that wait
    for a server in the sandbox to come up). Every other 5xx of those routes still fails."""
    if _operation(case)["operationId"] in PROXY_OPERATIONS and response.status_code == 502:
        try:
            code = json.loads(response.content)["error"]["code"]
        except (ValueError, KeyError, TypeError):
            code = None
        if code == "port_unreachable":
            return None
    return not_a_server_error(ctx, response, case)


CHECKS = [
    not_a_server_error_of_ours,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]

# Answers that go on until the client goes away: read for READ_LIVE_S of silence, then hung up on.
LIVE_STREAMS = {"watchDirectory"}
READ_LIVE_S = 1.5
# Every other answer must be complete within this (a hang is a failure, as a 5xx is).
READ_S = 90


def _operation(case: schemathesis.Case) -> Dict[str, Any]:
    return DOC["paths"][case.operation.path][case.operation.method.lower()]


class Live:
    """The resources a case's path parameters are pointed at, made (again) on demand."""

    def __init__(self, server):
        self.server = server
        self.sandbox_id: Optional[str] = None
        self.snapshot_id: Optional[str] = None
        self.key_id: Optional[str] = None
        self.webhook_id: Optional[str] = None
        keys = server.native("GET", "/v1/keys")["keys"]
        self.tenant = next(k["tenant"] for k in keys if k.get("admin"))

    def sandbox(self) -> str:
        if self.sandbox_id is not None:
            status, body = self.server.call("GET", f"/v1/sandboxes/{self.sandbox_id}")
            if status == 200 and json.loads(body)["state"] == "running":
                return self.sandbox_id
            self.server.call("DELETE", f"/v1/sandboxes/{self.sandbox_id}")
        self.sandbox_id = self.server.native("POST", "/v1/sandboxes", {"timeout_s": 600})["id"]
        self.server.native("PUT", f"/v1/sandboxes/{self.sandbox_id}/files?path=/tmp/hello.txt")
        return self.sandbox_id

    def process(self) -> int:
        """A fresh background process that lives about a second (so a wait or a log follow ends)."""
        sid = self.sandbox()
        started = self.server.native(
            "POST", f"/v1/sandboxes/{sid}/exec", {"shell": "echo hello; sleep 1", "background": True}
        )
        return started["pid"]

    def snapshot(self) -> str:
        if self.snapshot_id is not None:
            ids = [s["id"] for s in self.server.native("GET", "/v1/snapshots")["snapshots"]]
            if self.snapshot_id in ids:
                return self.snapshot_id
        self.snapshot_id = self.server.native("POST", f"/v1/sandboxes/{self.sandbox()}/snapshot", {})["id"]
        return self.snapshot_id

    def key(self) -> str:
        """A key of a tenant of its own, never the admin key the run uses."""
        if self.key_id is not None:
            keys = self.server.native("GET", "/v1/keys?tenant=openapi-throwaway")["keys"]
            if any(k["id"] == self.key_id for k in keys):
                return self.key_id
        self.key_id = self.server.native("POST", "/v1/keys", {"tenant": "openapi-throwaway"})["id"]
        return self.key_id

    def webhook(self, loopback_port: int) -> str:
        if self.webhook_id is not None:
            status, _ = self.server.call("GET", f"/v1/webhooks/{self.webhook_id}")
            if status == 200:
                return self.webhook_id
        url = f"http://127.0.0.1:{loopback_port}/hook"
        status, body = self.server.call("POST", "/v1/webhooks", {"url": url})
        if status == 429:
            # createWebhook's cases filled the tenant's cap: one of theirs makes room.
            oldest = self.server.native("GET", "/v1/webhooks")["webhooks"][0]["id"]
            self.server.native("DELETE", f"/v1/webhooks/{oldest}")
            status, body = self.server.call("POST", "/v1/webhooks", {"url": url})
        assert status == 201, (status, body)
        self.webhook_id = json.loads(body)["id"]
        return self.webhook_id


_live: Optional[Live] = None


def _number(value: Any, otherwise: float) -> float:
    """A generated number, or a query string's, as a float; `otherwise` for anything else."""
    if isinstance(value, bool):
        return otherwise
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return otherwise


def _steer(case: schemathesis.Case, live: Live, loopback_port: int) -> None:
    """Points the case's path at live resources (three times in four) and keeps it on loopback and short.
    Only values schemathesis generated are changed; the rest of the case is left as it is."""
    path = case.operation.path
    params = case.path_parameters if case.path_parameters is not None else {}
    rng = random.Random(repr(sorted(params.items())) + repr(case.query) + path)
    query = case.query if isinstance(case.query, dict) else {}
    # A file operation's path names a file that exists, one time in two (a generated one never does).
    if "path" in query and path.startswith("/v1/sandboxes/{id}/files") and rng.random() < 0.5:
        query["path"] = "/tmp" if path.endswith(("/list", "/tar", "/watch")) else "/tmp/hello.txt"
    if params and rng.random() < 0.75:
        if path.startswith("/v1/sandboxes/{id}"):
            params["id"] = live.sandbox()
            if "pid" in params:
                params["pid"] = live.process()
        elif path.startswith("/v1/snapshots/{id}"):
            params["id"] = live.snapshot()
        elif path.startswith("/v1/keys/{id}"):
            params["id"] = live.key()
        elif path.startswith("/v1/webhooks/{id}"):
            params["id"] = live.webhook(loopback_port)
        elif path.startswith("/v1/tenants/{tenant}"):
            params["tenant"] = live.tenant
        elif path.startswith("/v1/images/{name}"):
            params["name"] = "host"
    body = case.body if isinstance(case.body, dict) else None
    op = _operation(case)["operationId"]
    # A long poll waits up to 60 s for an event: one second shows the same answer.
    if op == "listEvents" and _number(query.get("wait_s"), 0) > 1:
        query["wait_s"] = 1
    # Any registry the reference names would be reached (DNS, then HTTPS): every pull goes to the
    # loopback registry instead, the generated text following its address.
    if op == "pullImage" and body is not None and isinstance(body.get("reference"), str):
        body["reference"] = f"127.0.0.1:{loopback_port}/{body['reference']}"
    # A webhook's deliveries go where its URL says: always to the loopback receiver, the generated
    # text (escaped) as its path.
    if op == "createWebhook" and body is not None and isinstance(body.get("url"), str):
        body["url"] = f"http://127.0.0.1:{loopback_port}/hook/{urllib.parse.quote(body['url'], safe='')}"
    # A generated command may run for ever (`yes`, `sleep`): a foreground exec is bounded to 5 s.
    if op == "exec" and body is not None:
        t = body.get("timeout_s")
        if t is None or _number(t, 0) > 5:
            body["timeout_s"] = 5


def _send(case: schemathesis.Case, server) -> requests.Response:
    op = _operation(case)["operationId"]
    live = op in LIVE_STREAMS
    kwargs = case.as_transport_kwargs(base_url=server.url, headers={"Authorization": f"Bearer {server.admin_key}"})
    # A connection per request: a kept-alive one the server closes as idle just as it is reused would
    # fail the case for nothing of the server's.
    r = requests.request(**kwargs, stream=True, timeout=(10, READ_LIVE_S if live else READ_S))
    chunks = []
    try:
        for chunk in r.iter_content(chunk_size=None):
            chunks.append(chunk)
    except requests.exceptions.ConnectionError:
        # A read timeout while the answer streams: the end of what a live stream is read for.
        if not live:
            raise
    finally:
        r.close()
    r._content = b"".join(chunks)
    r._content_consumed = True
    return r


def _check_ndjson(case: schemathesis.Case, response: requests.Response) -> None:
    """schemathesis has no deserializer for application/x-ndjson: each line is validated here against
    the schema the document gives a line of that answer."""
    ctype = response.headers.get("Content-Type", "").split(";")[0].strip()
    if ctype != "application/x-ndjson":
        return
    responses = _operation(case)["responses"]
    documented = responses.get(str(response.status_code), {}).get("content", {}).get(ctype)
    assert documented is not None, f"{response.status_code} {ctype} is not documented"
    validator = jsonschema.Draft202012Validator({**documented["schema"], "components": DOC["components"]})
    lines = response.content.split(b"\n")
    if _operation(case)["operationId"] in LIVE_STREAMS:
        lines = lines[:-1]  # cut off where the reading stopped
    for n, line in enumerate(lines):
        if not line.strip():
            continue
        errors = [e.message for e in validator.iter_errors(json.loads(line))]
        assert not errors, f"line {n + 1} of the stream, {line[:500]!r}: {errors}"


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
    verbosity=hypothesis.Verbosity.quiet,
)
def test_every_operation(case, server, loopback):
    global _live
    if _live is None or _live.server is not server:
        _live = Live(server)
    _steer(case, _live, loopback.port)
    response = _send(case, server)
    try:
        case.validate_response(response, checks=CHECKS)
        _check_ndjson(case, response)
    except Exception:
        print(f"server log:\n{server.log_tail()}")
        raise
