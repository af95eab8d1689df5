"""The API's errors as the SDK's exceptions: each code's class, HTTP status, the server's message and
its retry hint; transport and configuration failures; 404 for an unknown id and for another tenant's."""

import json
import pathlib

import pytest

import sandlot
from sandlot.errors import _BY_CODE
from sandlot import Sandbox
from sandlot.client import DEFAULT_URL


def test_an_unknown_sandbox_is_not_found(client):
    with pytest.raises(sandlot.NotFound) as err:
        Sandbox.connect("sb_doesnotexist00000000", client=client)
    e = err.value
    assert (type(e), e.status, e.code, e.retryable) == (sandlot.NotFound, 404, "not_found", False)
    assert "sb_doesnotexist00000000" in e.message and str(e) == e.message


def test_another_tenants_sandbox_answers_exactly_like_an_unknown_one(server, sbx):
    with sandlot.Client(server.url, server.tenant_key("other-tenant")) as other:
        with pytest.raises(sandlot.NotFound) as theirs:
            Sandbox.connect(sbx.id, client=other)
        with pytest.raises(sandlot.NotFound):
            other.call("POST", f"/v1/sandboxes/{sbx.id}/exec", json={"argv": ["true"]})
        with pytest.raises(sandlot.NotFound):
            other.call("GET", f"/v1/sandboxes/{sbx.id}/files", params={"path": "/etc/hostname"})
        assert sbx.id not in [s.id for s in other.list_sandboxes()]
        with pytest.raises(sandlot.NotFound) as unknown:
            Sandbox.connect("sb_zzzzzzzzzzzzzzzzzzzz", client=other)
    assert (theirs.value.status, theirs.value.code) == (unknown.value.status, unknown.value.code) == (404, "not_found")
    assert theirs.value.message == unknown.value.message.replace("sb_zzzzzzzzzzzzzzzzzzzz", sbx.id)
    assert sbx.is_running()


def test_a_bad_value_is_invalid_request_naming_the_field(client):
    with pytest.raises(sandlot.InvalidRequest) as err:
        Sandbox.create(client=client, cpu=1000)
    assert (err.value.status, err.value.code, err.value.retryable) == (400, "invalid_request", False)
    assert "cpu" in err.value.message
    with pytest.raises(sandlot.InvalidRequest) as err:
        client.call("POST", "/v1/sandboxes", json={"memroy_mb": 5})
    assert "memroy_mb" in err.value.message


def test_a_409_is_conflict(sbx):
    h = sbx.commands.run(["true"], background=True)
    h.wait()
    with pytest.raises(sandlot.Conflict) as err:
        h.kill()
    assert (err.value.status, err.value.code, err.value.retryable) == (409, "conflict", False)
    assert "exited" in err.value.message


def test_a_bad_key_is_an_auth_error_and_a_tenant_key_is_forbidden_admin_routes(server, client):
    with sandlot.Client(server.url, "sl_not_a_real_key") as bad:
        with pytest.raises(sandlot.AuthError) as err:
            bad.list_sandboxes()
    assert (err.value.status, err.value.code) == (401, "unauthenticated")
    with pytest.raises(sandlot.Forbidden) as err:
        client.create_key("someone")
    assert (err.value.status, err.value.code) == (403, "forbidden")
    with sandlot.Client(server.url, server.admin_key) as admin:
        made = admin.create_key("made-by-sdk", expires_in_s=3600)
        assert made.tenant == "made-by-sdk" and made.key.startswith("sl_") and made.expires_at_ms
        with sandlot.Client(server.url, made.key) as fresh:
            assert fresh.list_sandboxes() == []


def test_no_server_is_a_retryable_connect_error(server, key):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens there
    with sandlot.Client(f"http://127.0.0.1:{port}", key) as c:
        with pytest.raises(sandlot.ConnectError) as err:
            c.list_sandboxes()
    assert err.value.retryable and err.value.status is None and str(port) in err.value.message


def test_configuration_comes_from_the_environment_or_is_refused(server, key, monkeypatch):
    monkeypatch.delenv("SANDLOT_API_KEY", raising=False)
    monkeypatch.delenv("SANDLOT_URL", raising=False)
    with pytest.raises(sandlot.ConfigError) as err:
        sandlot.Client()
    assert "SANDLOT_API_KEY" in err.value.message
    monkeypatch.setenv("SANDLOT_API_KEY", key)
    with sandlot.Client() as c:
        assert c.url == DEFAULT_URL  # the CLI's default when SANDLOT_URL is unset
    monkeypatch.setenv("SANDLOT_URL", server.url + "/")
    with sandlot.Client() as c:
        assert c.url == server.url and c.health().status == "ok"
    with pytest.raises(sandlot.ConfigError):
        sandlot.Client("127.0.0.1:7423", key)


def test_a_client_side_timeout_is_a_retryable_timeout(server, key, sbx):
    with sandlot.Client(server.url, key, timeout=0.5) as c:
        with pytest.raises(sandlot.Timeout) as err:
            # A bounded call (not one of the waiting ones) that outlasts the client's timeout.
            c.call("POST", f"/v1/sandboxes/{sbx.id}/processes/{sbx.commands.run(['sleep', '3'], background=True).pid}/wait")
    assert err.value.retryable


def test_every_error_code_of_the_api_has_its_class_and_no_class_names_another():
    # The codes as the server's OpenAPI document lists them (generated from the one table in
    # sandlot-api): a code the server gains fails here until the SDK has its class.
    doc = json.loads((pathlib.Path(__file__).resolve().parents[3] / "docs" / "openapi.json").read_text())
    codes = doc["components"]["schemas"]["ErrorDetail"]["properties"]["code"]["enum"]
    assert len(codes) > 10
    assert sorted(_BY_CODE) == sorted(codes)
