"""envd's Connect protocol on the wire, below the SDK: the binary codec, caps on what a client
sends, content types, deadlines and the streaming framing."""

import json
import struct
import urllib.error
import urllib.request

import pytest
from e2b import Sandbox
from e2b.envd.process import process_pb


@pytest.fixture
def sbx(server):
    s = Sandbox.create(timeout=120)
    yield s
    s.kill()


def _post(server, sbx, method, body, content_type, headers=None):
    req = urllib.request.Request(f"{server.url}/{method}", data=body, method="POST")
    req.add_header("E2b-Sandbox-Id", sbx.sandbox_id)
    req.add_header("X-Access-Token", sbx._envd_access_token)
    req.add_header("Content-Type", content_type)
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers.get("Content-Type"), r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type"), e.read()


def _envelope(flags, payload):
    return struct.pack(">BI", flags, len(payload)) + payload


def _envelopes(data):
    out = []
    while data:
        flags, n = struct.unpack(">BI", data[:5])
        out.append((flags, data[5 : 5 + n]))
        data = data[5 + n :]
    return out


def test_binary_protobuf_streams_a_command(server, sbx):
    req = process_pb.StartRequest(process=process_pb.ProcessConfig(cmd="/bin/echo", args=["bin"]), stdin=False)
    status, ct, body = _post(server, sbx, "process.Process/Start", _envelope(0, req.to_binary()), "application/connect+proto")
    assert (status, ct) == (200, "application/connect+proto")
    frames = _envelopes(body)
    events = [process_pb.StartResponse.from_binary(p).event for f, p in frames if f == 0]
    assert frames[-1] == (2, b"{}")
    out = b"".join(e.event.value.output.value for e in events if e.event.field == "data")
    assert out == b"bin\n"
    end = [e.event.value for e in events if e.event.field == "end"][0]
    assert (end.exit_code, end.exited, end.status) == (0, True, "exit status 0")


def test_unary_binary_protobuf_lists(server, sbx):
    status, ct, body = _post(server, sbx, "process.Process/List", process_pb.ListRequest().to_binary(), "application/proto")
    assert (status, ct) == (200, "application/proto")
    assert list(process_pb.ListResponse.from_binary(body).processes) == []


def test_an_oversized_message_is_refused_before_it_is_read(server, sbx):
    # The header announces 64 MiB; nothing of it follows.
    status, _, body = _post(server, sbx, "process.Process/Start", struct.pack(">BI", 0, 64 << 20), "application/connect+json")
    assert status == 200
    (flags, payload), = _envelopes(body)
    assert flags == 2
    assert json.loads(payload)["error"]["code"] == "resource_exhausted"
    status, _, body = _post(server, sbx, "process.Process/List", b"{" + b" " * (5 << 20) + b"}", "application/json")
    assert (status, json.loads(body)["code"]) == (429, "resource_exhausted")


def test_an_unknown_content_type_and_a_malformed_message_are_client_errors(server, sbx):
    status, _, body = _post(server, sbx, "process.Process/List", b"{}", "text/plain")
    assert (status, json.loads(body)["code"]) == (415, "unimplemented")
    status, _, body = _post(server, sbx, "process.Process/SendSignal", b'{"signal": "SIGHUP"}', "application/json")
    assert (status, json.loads(body)["code"]) == (400, "invalid_argument")
    status, _, body = _post(server, sbx, "process.Process/SendSignal", b"[", "application/json")
    assert (status, json.loads(body)["code"]) == (400, "invalid_argument")
    status, _, body = _post(server, sbx, "process.Process/Nope", b"{}", "application/json")
    assert (status, json.loads(body)["code"]) == (404, "unimplemented")


def test_a_stream_ends_with_deadline_exceeded_when_its_timeout_passes(server, sbx):
    req = json.dumps({"process": {"cmd": "/bin/sleep", "args": ["30"]}, "stdin": False}).encode()
    status, _, body = _post(
        server, sbx, "process.Process/Start", _envelope(0, req), "application/connect+json", {"Connect-Timeout-Ms": "500"}
    )
    frames = _envelopes(body)
    assert json.loads(frames[0][1])["event"]["start"]["pid"] > 0
    assert frames[-1][0] == 2
    assert json.loads(frames[-1][1])["error"]["code"] == "deadline_exceeded"


def test_a_process_selected_by_an_unknown_tag_or_pid_is_not_found(server, sbx):
    for selector in ({"tag": "nobody"}, {"pid": 4000000}):
        body = json.dumps({"process": selector, "signal": "SIGNAL_SIGKILL"}).encode()
        status, _, answer = _post(server, sbx, "process.Process/SendSignal", body, "application/json")
        assert (status, json.loads(answer)["code"]) == (404, "not_found")
