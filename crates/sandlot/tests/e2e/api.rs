//! The HTTP API: who may call it, how it says no, and what it records.

use sandlot_client::api::{CreateSandbox, ExecRequest, SandboxState};
use sandlot_client::{Client, ErrorKind};
use serde_json::json;

use crate::harness::{argv, expect_error, Server};

// ---------------------------------------------------------------------------------------------------
// Authentication and tenants

/// `/healthz` answers 200 without any key (for load balancers and probes).
#[test]
fn healthz_needs_no_key() {
    let server = Server::start();
    let r = server.raw("GET", "/healthz", None, &[], b"");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["status"], "ok", "{r:?}");
    let health = Client::new(server.url(), "").health().expect("SDK health without a key");
    assert_eq!(health.status, "ok");
    assert_eq!(serde_json::to_value(&health.degraded).unwrap(), r.json()["degraded"], "the SDK reads the same list");
}

/// A `/v1` request without an Authorization header is 401 `unauthenticated`, with a JSON error body.
#[test]
fn v1_without_key_is_401_unauthenticated() {
    let server = Server::start();
    let message = server.raw("GET", "/v1/sandboxes", None, &[], b"").assert_error(401, "unauthenticated");
    assert!(message.contains("Authorization"), "{message}");
    let r = server.raw("POST", "/v1/sandboxes", None, &[("Content-Type", "application/json")], b"{}");
    r.assert_error(401, "unauthenticated");
    assert!(server.client().list().unwrap().is_empty(), "nothing was created");
}

/// An unknown key, an empty key or a non-Bearer scheme is 401 `unauthenticated`.
#[test]
fn wrong_key_is_401_unauthenticated() {
    let server = Server::start();
    let err = expect_error(Client::new(server.url(), "sk_not_a_real_key").list(), 401, "unauthenticated");
    assert_eq!(err.kind(), ErrorKind::Unauthenticated);
    assert!(err.to_string().contains("unknown API key"), "{err}");
    // A key that differs from the admin key by one character.
    let mut near = server.admin_key().to_string();
    let last = near.pop().unwrap();
    near.push(if last == 'a' { 'b' } else { 'a' });
    expect_error(Client::new(server.url(), near).list(), 401, "unauthenticated");
    let basic = format!("Basic {}", server.admin_key());
    server.raw("GET", "/v1/sandboxes", None, &[("Authorization", &basic)], b"").assert_error(401, "unauthenticated");
    server.raw("GET", "/v1/sandboxes", None, &[("Authorization", "Bearer ")], b"").assert_error(401, "unauthenticated");
}

/// A tenant key cannot mint keys: `POST /v1/keys` is 403 `forbidden`.
#[test]
fn tenant_key_cannot_create_keys() {
    let server = Server::start();
    let tenant = server.tenant_client("alice");
    let err = expect_error(tenant.create_key("mallory"), 403, "forbidden");
    assert_eq!(err.kind(), ErrorKind::PermissionDenied);
    let err = expect_error(tenant.create_key("admin"), 403, "forbidden");
    assert!(err.to_string().contains("admin"), "{err}");
}

/// Admin-made keys authenticate as their tenant; a bad tenant name is 400 `invalid_request`.
#[test]
fn admin_creates_tenant_keys_and_validates_names() {
    let server = Server::start();
    let admin = server.client();
    let a = admin.create_key("team-a.prod_1").unwrap();
    assert_eq!(a.tenant, "team-a.prod_1");
    assert!(!a.key.is_empty());
    let b = admin.create_key("team-a.prod_1").unwrap();
    assert_ne!(a.key, b.key, "every key is new");
    assert!(Client::new(server.url(), &a.key).list().unwrap().is_empty());
    for bad in ["", "has space", "slash/x", &"x".repeat(65)] {
        expect_error(admin.create_key(bad), 400, "invalid_request");
    }
}

/// A revoked key gets 401 saying it was revoked; the admin lists keys without their secrets, by
/// tenant; a tenant key may neither list nor revoke; the admin key cannot be revoked.
#[test]
fn a_revoked_key_gets_401() {
    let server = Server::start();
    let admin = server.client();
    let made = admin.create_key("alice").unwrap();
    let alice = Client::new(server.url(), &made.key);
    assert!(alice.list().unwrap().is_empty());
    let keys = admin.list_keys(Some("alice")).unwrap();
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert_eq!((keys[0].id.as_str(), keys[0].prefix.as_str()), (made.id.as_str(), &made.key[..8]));
    assert!(keys[0].last_used_at_ms.is_some() && keys[0].revoked_at_ms.is_none(), "{keys:?}");
    let listed = serde_json::to_string(&admin.list_keys(None).unwrap()).unwrap();
    assert!(!listed.contains(&made.key) && !listed.contains(server.admin_key()), "a secret was listed");
    expect_error(alice.list_keys(None), 403, "forbidden");
    expect_error(alice.revoke_key(&made.id), 403, "forbidden");
    admin.revoke_key(&made.id).unwrap();
    let err = expect_error(alice.list(), 401, "unauthenticated");
    assert!(err.to_string().contains("revoked"), "{err}");
    assert!(admin.list_keys(Some("alice")).unwrap()[0].revoked_at_ms.is_some());
    expect_error(admin.revoke_key("key_0000000000000000"), 404, "not_found");
    let admin_id = admin.list_keys(Some("admin")).unwrap()[0].id.clone();
    expect_error(admin.revoke_key(&admin_id), 409, "conflict");
    assert!(admin.list().is_ok(), "the admin key still works");
}

/// Revoking a tenant's only key closes what it opened: its preview tokens answer 404 (as an unknown
/// sandbox) instead of reaching the port, and an open watch stream ends within the lease's re-check.
#[test]
fn revoking_a_key_closes_its_previews_and_its_open_streams() {
    let server = Server::start();
    let admin = server.client();
    let made = admin.create_key("alice").unwrap();
    let alice = Client::new(server.url(), &made.key);
    let sb = alice.create(&Default::default()).unwrap();
    let port = sb.expose_port(9999).unwrap();
    let host = format!("9999-{}.localhost:{}", sb.id(), server.port());
    let by_token = format!("/?sandlot_token={}", port.token);
    // Live key: the token reaches the port (nobody listens there: 502).
    assert_eq!(server.raw("GET", &by_token, None, &[("host", &host)], b"").status, 502);
    let mut watch = sb.watch("/tmp", false).unwrap();
    sb.write_file("/tmp/one", b"1").unwrap();
    assert!(watch.next().is_some_and(|e| e.is_ok()), "the watch delivers while the key works");
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // Drains until the stream ends.
        for _ in watch.by_ref() {}
        let _ = done_tx.send(());
    });
    admin.revoke_key(&made.id).unwrap();
    assert_eq!(server.raw("GET", &by_token, None, &[("host", &host)], b"").status, 404);
    let ended = done_rx.recv_timeout(std::time::Duration::from_secs(20));
    assert!(ended.is_ok(), "the watch stream outlived its key by 20 s");
}

/// A key made with `expires_in_s` gets 401 saying it expired once that time has passed.
#[test]
fn an_expired_key_gets_401() {
    let server = Server::start();
    let admin = server.client();
    let request = sandlot_client::api::CreateKey { tenant: "bob".into(), expires_in_s: Some(1), expires_at_ms: None };
    let made = admin.create_key_with(&request).unwrap();
    assert!(made.expires_at_ms.is_some());
    let bob = Client::new(server.url(), &made.key);
    assert!(bob.list().is_ok(), "valid before its expiry");
    std::thread::sleep(std::time::Duration::from_millis(1200));
    let err = expect_error(bob.list(), 401, "unauthenticated");
    assert!(err.to_string().contains("expired"), "{err}");
    let bad = sandlot_client::api::CreateKey { tenant: "bob".into(), expires_in_s: Some(0), expires_at_ms: None };
    expect_error(admin.create_key_with(&bad), 400, "invalid_request");
    let past = sandlot_client::api::CreateKey { tenant: "bob".into(), expires_in_s: None, expires_at_ms: Some(1) };
    expect_error(admin.create_key_with(&past), 400, "invalid_request");
}

/// Another tenant's sandbox is 404 `not_found` for get, exec, processes, files and delete, is absent
/// from its list, and survives the attempts.
#[test]
fn other_tenants_sandbox_is_404_everywhere() {
    let server = Server::start();
    let alice = server.tenant_client("alice");
    let bob = server.tenant_client("bob");
    let sb = alice.create(&CreateSandbox::default()).unwrap();
    sb.write_file("/home/user/secret", b"alice's").unwrap();
    let id = sb.id().to_string();
    let as_bob = bob.sandbox(&id);

    expect_error(bob.get(&id), 404, "not_found");
    expect_error(as_bob.run(&["true"]), 404, "not_found");
    expect_error(as_bob.spawn(&argv(&["sleep", "10"])), 404, "not_found");
    expect_error(as_bob.processes(), 404, "not_found");
    expect_error(as_bob.read_file("/home/user/secret"), 404, "not_found");
    expect_error(as_bob.write_file("/home/user/secret", b"bob's"), 404, "not_found");
    expect_error(as_bob.list("/home/user", 1), 404, "not_found");
    expect_error(as_bob.stat("/home/user/secret"), 404, "not_found");
    expect_error(as_bob.remove("/home/user/secret", false), 404, "not_found");
    expect_error(as_bob.download_tar("/home/user", Vec::new()), 404, "not_found");
    expect_error(as_bob.delete(), 404, "not_found");
    assert!(bob.list().unwrap().iter().all(|s| s.id != id));
    let bobs_audit = bob.audit(Some(&id), None).unwrap();
    assert!(bobs_audit.is_empty(), "bob reads alice's audit: {bobs_audit:?}");

    // Nothing bob did reached the sandbox.
    assert_eq!(alice.get(&id).unwrap().state, SandboxState::Running);
    assert_eq!(sb.read_file("/home/user/secret").unwrap(), b"alice's");
    assert!(alice.list().unwrap().iter().any(|s| s.id == id));
    sb.delete().unwrap();
}

/// An unknown sandbox id, process id or route is 404 `not_found` with a JSON error.
#[test]
fn unknown_ids_and_routes_are_404() {
    let server = Server::start();
    let client = server.client();
    expect_error(client.get("sb_doesnotexist000000000"), 404, "not_found");
    expect_error(client.sandbox("sb_nope").run(&["true"]), 404, "not_found");
    let sb = server.sandbox();
    expect_error(sb.wait(999_999), 404, "not_found");
    expect_error(sb.kill_process(999_999, None), 404, "not_found");
    expect_error(sb.write_stdin(999_999, "x", true), 404, "not_found");
    expect_error(sb.logs(999_999), 404, "not_found");
    server.raw("GET", "/v1/no-such-route", Some(server.admin_key()), &[], b"").assert_error(404, "not_found");
    sb.delete().unwrap();
}

// ---------------------------------------------------------------------------------------------------
// Request validation: every malformed request is a 400 `invalid_request` that says what is wrong.

fn post_json(server: &Server, path: &str, body: &str) -> crate::harness::RawResponse {
    server.raw("POST", path, Some(server.admin_key()), &[("Content-Type", "application/json")], body.as_bytes())
}

/// A body that is not JSON is 400 `invalid_request` with a message.
#[test]
fn malformed_json_is_400() {
    let server = Server::start();
    for body in ["{\"memory_mb\":", "not json", "[1,2", "{\"cpu\": \"lots\"}"] {
        let message = post_json(&server, "/v1/sandboxes", body).assert_error(400, "invalid_request");
        assert!(message.contains("JSON"), "{body}: {message}");
    }
    let sb = server.sandbox();
    let path = format!("/v1/sandboxes/{}/exec", sb.id());
    post_json(&server, &path, "{\"argv\": [\"echo\",").assert_error(400, "invalid_request");
    assert_eq!(server.client().list().unwrap().len(), 1, "no sandbox from a bad body");
    sb.delete().unwrap();
}

/// A JSON body sent without `Content-Type: application/json` is 400 and says which header is missing.
#[test]
fn json_without_content_type_is_400() {
    let server = Server::start();
    let r = server.raw("POST", "/v1/sandboxes", Some(server.admin_key()), &[], b"{}");
    let message = r.assert_error(400, "invalid_request");
    assert!(message.contains("Content-Type"), "{message}");
}

/// An unknown field (a typo) is rejected, not ignored, and the message names it.
#[test]
fn unknown_field_is_400_naming_it() {
    let server = Server::start();
    let message = post_json(&server, "/v1/sandboxes", r#"{"memroy_mb":1}"#).assert_error(400, "invalid_request");
    assert!(message.contains("memroy_mb"), "{message}");
    let sb = server.sandbox();
    let path = format!("/v1/sandboxes/{}/exec", sb.id());
    let message = post_json(&server, &path, r#"{"argv":["true"],"timeout":5}"#).assert_error(400, "invalid_request");
    assert!(message.contains("timeout"), "{message}");
    let stat = format!("/v1/sandboxes/{}/files/stat?path=/tmp&follow=1", sb.id());
    let message = server.raw("GET", &stat, Some(server.admin_key()), &[], b"").assert_error(400, "invalid_request");
    assert!(message.contains("follow"), "{message}");
    sb.delete().unwrap();
}

/// A JSON array where an object is documented is 400, not a struct filled field by field in order
/// (schemathesis: `POST /v1/sandboxes` with `[null, null]` created a sandbox).
#[test]
fn array_body_is_400() {
    let server = Server::start();
    let message = post_json(&server, "/v1/sandboxes", "[null, null]").assert_error(400, "invalid_request");
    assert!(message.contains("JSON object"), "{message}");
    post_json(&server, "/v1/keys", r#"["t"]"#).assert_error(400, "invalid_request");
    assert!(server.client().list().unwrap().is_empty(), "no sandbox from an array body");
    let sb = server.sandbox();
    // An optional body (fork, snapshot) takes nothing or an object, not an array either.
    post_json(&server, &format!("/v1/sandboxes/{}/snapshot", sb.id()), "[null]").assert_error(400, "invalid_request");
    sb.delete().unwrap();
}

/// Limits out of range are 400 and name the field: memory_mb 1, cpu 0, pids 1, timeout_s 0.
#[test]
fn out_of_range_limits_are_400() {
    let server = Server::start();
    let client = server.client();
    let cases = [
        (CreateSandbox { memory_mb: Some(1), ..Default::default() }, "memory_mb"),
        (CreateSandbox { cpu: Some(0.0), ..Default::default() }, "cpu"),
        (CreateSandbox { cpu: Some(1000.0), ..Default::default() }, "cpu"),
        (CreateSandbox { pids: Some(1), ..Default::default() }, "pids"),
        (CreateSandbox { timeout_s: Some(0), ..Default::default() }, "timeout_s"),
        (CreateSandbox { timeout_s: Some(10_000_000), ..Default::default() }, "timeout_s"),
    ];
    for (spec, field) in cases {
        let err = expect_error(client.create(&spec), 400, "invalid_request");
        assert!(err.to_string().contains(field), "{spec:?}: {err}");
    }
    let bad_env = CreateSandbox { env: [("A=B".to_string(), "x".to_string())].into(), ..Default::default() };
    expect_error(client.create(&bad_env), 400, "invalid_request");
    assert!(client.list().unwrap().is_empty(), "no sandbox from a rejected create");
}

/// An unknown image is 400 and the message names it.
#[test]
fn unknown_image_is_400() {
    let server = Server::start();
    let spec = CreateSandbox { image: Some("ubuntu:99.04".into()), ..Default::default() };
    let err = expect_error(server.client().create(&spec), 400, "invalid_request");
    assert!(err.to_string().contains("ubuntu:99.04"), "{err}");
}

/// Exec requests are validated: argv and shell together, neither, an empty argv, a relative cwd, a
/// NUL byte, a non-positive timeout, a tiny output cap and a bad env name are each 400.
#[test]
fn invalid_exec_requests_are_400() {
    let server = Server::start();
    let sb = server.sandbox();
    let both = ExecRequest { argv: Some(vec!["true".into()]), shell: Some("true".into()), ..Default::default() };
    let err = expect_error(sb.exec(&both), 400, "invalid_request");
    assert!(err.to_string().contains("not both"), "{err}");
    let err = expect_error(sb.exec(&ExecRequest::default()), 400, "invalid_request");
    assert!(err.to_string().contains("argv"), "{err}");
    expect_error(sb.exec(&argv(&[])), 400, "invalid_request");
    expect_error(sb.exec(&argv(&[""])), 400, "invalid_request");
    let relative = ExecRequest { cwd: Some("tmp".into()), ..argv(&["pwd"]) };
    let err = expect_error(sb.exec(&relative), 400, "invalid_request");
    assert!(err.to_string().contains("cwd"), "{err}");
    expect_error(sb.exec(&argv(&["echo", "a\0b"])), 400, "invalid_request");
    for t in [0.0, -1.0] {
        let req = ExecRequest { timeout_s: Some(t), ..argv(&["true"]) };
        let err = expect_error(sb.exec(&req), 400, "invalid_request");
        assert!(err.to_string().contains("timeout_s"), "{err}");
    }
    let tiny = ExecRequest { max_output_bytes: Some(10), ..argv(&["true"]) };
    let err = expect_error(sb.exec(&tiny), 400, "invalid_request");
    assert!(err.to_string().contains("max_output_bytes"), "{err}");
    let env = ExecRequest { env: [(String::new(), "x".to_string())].into(), ..argv(&["true"]) };
    expect_error(sb.exec(&env), 400, "invalid_request");
    // None of them ran anything.
    assert!(sb.processes().unwrap().is_empty(), "{:?}", sb.processes());
    sb.delete().unwrap();
}

/// File and process requests are validated too: list depth, write mode, NUL in a path, kill signal.
#[test]
fn invalid_file_and_process_requests_are_400() {
    let server = Server::start();
    let sb = server.sandbox();
    for depth in [0, 17, 1000] {
        let err = expect_error(sb.list("/", depth), 400, "invalid_request");
        assert!(err.to_string().contains("depth"), "{err}");
    }
    let key = server.admin_key();
    let id = sb.id();
    let put = |query: &str| {
        server.raw(
            "PUT",
            &format!("/v1/sandboxes/{id}/files?{query}"),
            Some(key),
            &[("Content-Type", "application/octet-stream")],
            b"data",
        )
    };
    let message = put("path=/tmp/x&mode=999").assert_error(400, "invalid_request");
    assert!(message.contains("mode"), "{message}");
    put("path=/tmp/x&mode=77777").assert_error(400, "invalid_request");
    put("path=/tmp/a%00b").assert_error(400, "invalid_request");
    put("path=").assert_error(400, "invalid_request");
    put("mode=0644").assert_error(400, "invalid_request");
    let pid = sb.spawn(&argv(&["sleep", "30"])).unwrap();
    let err = expect_error(sb.kill_process(pid, Some(99)), 400, "invalid_request");
    assert!(err.to_string().contains("signal"), "{err}");
    expect_error(sb.kill_process(pid, Some(0)), 400, "invalid_request");
    assert!(sb.processes().unwrap().iter().any(|p| p.pid == pid && p.running));
    sb.kill_process(pid, None).unwrap();
    sb.delete().unwrap();
}

/// Over-long argv and stdin are refused with 400 and a hint, not passed on.
#[test]
fn oversized_argv_and_stdin_are_400() {
    let server = Server::start();
    let sb = server.sandbox();
    let big = "x".repeat(1 << 20);
    let err = expect_error(sb.run(&["echo", &big]), 400, "invalid_request");
    assert!(err.to_string().contains("argv"), "{err}");
    let req = ExecRequest { stdin: Some("y".repeat((8 << 20) + 1)), ..argv(&["cat"]) };
    let err = expect_error(sb.exec(&req), 400, "invalid_request");
    assert!(err.to_string().contains("stdin"), "{err}");
    sb.delete().unwrap();
}

// ---------------------------------------------------------------------------------------------------
// Audit

/// Create, exec and a file write each leave an audit row for the sandbox, newest first, with details.
#[test]
fn audit_records_create_exec_and_file_write() {
    let server = Server::start();
    let client = server.client();
    let sb = server.sandbox();
    let r = sb.run(&["echo", "audited"]).unwrap();
    assert_eq!(r.exit_code, 0);
    let failing = sb.shell("exit 7").unwrap();
    assert_eq!(failing.exit_code, 7);
    sb.write_file("/home/user/notes.txt", b"12345").unwrap();

    let rows = client.audit(Some(sb.id()), Some(50)).unwrap();
    let actions: Vec<&str> = rows.iter().map(|r| r.action.as_str()).collect();
    assert!(rows.iter().all(|r| r.sandbox_id.as_deref() == Some(sb.id())), "{rows:#?}");
    assert!(rows.windows(2).all(|w| w[0].seq > w[1].seq), "newest first: {actions:?}");

    let create = rows.iter().find(|r| r.action == "sandbox.create").expect("sandbox.create row");
    assert_eq!(create.detail["image"], "host", "{create:?}");
    let execs: Vec<_> = rows.iter().filter(|r| r.action == "exec").collect();
    assert_eq!(execs.len(), 2, "{actions:?}");
    let echo = execs
        .iter()
        .find(|r| r.detail["argv"] == json!(["echo", "audited"]))
        .unwrap_or_else(|| panic!("no exec row with the argv: {execs:#?}"));
    assert_eq!(echo.detail["status"], "exited");
    assert_eq!(echo.detail["exit_code"], 0);
    assert_eq!(echo.detail["user"], "user");
    let exit7 = execs
        .iter()
        .find(|r| r.detail["argv"] == json!(["/bin/sh", "-c", "exit 7"]))
        .unwrap_or_else(|| panic!("no exec row for the shell command: {execs:#?}"));
    assert_eq!(exit7.detail["exit_code"], 7);
    let write = rows.iter().find(|r| r.action == "file.write").expect("file.write row");
    assert_eq!(write.detail["path"], "/home/user/notes.txt");
    assert_eq!(write.detail["bytes"], 5);
    assert!(create.seq < echo.seq && echo.seq < write.seq, "{actions:?}");

    let limited = client.audit(Some(sb.id()), Some(1)).unwrap();
    assert_eq!(limited.len(), 1);
    assert_eq!(limited[0].action, "file.write");
    sb.delete().unwrap();
    let rows = client.audit(Some(sb.id()), Some(1)).unwrap();
    assert_eq!(rows[0].action, "sandbox.delete");
}

/// A tenant reads only its own audit rows; the admin reads everyone's.
#[test]
fn audit_is_scoped_by_tenant() {
    let server = Server::start();
    let alice = server.tenant_client("alice");
    let bob = server.tenant_client("bob");
    let sa = alice.create(&CreateSandbox::default()).unwrap();
    sa.run(&["true"]).unwrap();
    let sb = bob.create(&CreateSandbox::default()).unwrap();
    let alice_rows = alice.audit(None, Some(1000)).unwrap();
    assert!(!alice_rows.is_empty());
    assert!(alice_rows.iter().all(|r| r.tenant == "alice"), "{alice_rows:#?}");
    assert!(alice_rows.iter().all(|r| r.sandbox_id.as_deref() != Some(sb.id())));
    let bob_rows = bob.audit(None, Some(1000)).unwrap();
    assert!(bob_rows.iter().all(|r| r.tenant == "bob"), "{bob_rows:#?}");
    let all = server.client().audit(None, Some(1000)).unwrap();
    for id in [sa.id(), sb.id()] {
        assert!(all.iter().any(|r| r.sandbox_id.as_deref() == Some(id)));
    }
    assert!(all.iter().any(|r| r.action == "key.create" && r.detail["tenant"] == "bob"));
    sa.delete().unwrap();
    sb.delete().unwrap();
}

/// Create reports the limits in force, defaults filled in, and the metadata given.
#[test]
fn create_reports_limits_and_metadata() {
    let server = Server::start();
    let client = server.client();
    let spec = CreateSandbox {
        cpu: Some(0.5),
        memory_mb: Some(128),
        pids: Some(32),
        timeout_s: Some(120),
        metadata: [("owner".to_string(), "e2e".to_string())].into(),
        ..Default::default()
    };
    let sb = client.create(&spec).unwrap();
    let info = sb.created().expect("create answer").clone();
    assert!(info.id.starts_with("sb_"), "{}", info.id);
    assert_eq!(info.state, SandboxState::Running);
    assert_eq!(info.image, "host");
    assert_eq!(info.limits.cpu, 0.5);
    assert_eq!(info.limits.memory_mb, 128);
    assert_eq!(info.limits.pids, 32);
    assert_eq!(info.limits.timeout_s, 120);
    assert_eq!(info.metadata["owner"], "e2e");
    assert_eq!(info.expires_at_ms - info.created_at_ms, 120_000);
    assert_eq!(sb.info().unwrap(), info);
    let listed = client.list().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id, info.id);
    let defaults = server.sandbox();
    let limits = &defaults.created().unwrap().limits;
    assert_eq!((limits.cpu, limits.memory_mb, limits.pids, limits.timeout_s), (1.0, 512, 256, 300));
    let ids: Vec<String> = client.list().unwrap().into_iter().map(|s| s.id).collect();
    assert_eq!(ids, [defaults.id().to_string(), info.id.clone()], "newest first");
    sb.delete().unwrap();
    defaults.delete().unwrap();
}

/// A sandbox name is unique per tenant: a second create is 409 already_exists, get_or_create returns the
/// same sandbox, and another tenant may use the name for its own.
#[test]
fn sandbox_names_are_unique_per_tenant() {
    let server = Server::start();
    let alice = server.tenant_client("alice");
    let bob = server.tenant_client("bob");
    let named = CreateSandbox { name: Some("dev-box".into()), ..Default::default() };
    let first = alice.create(&named).unwrap();
    let err = expect_error(alice.create(&named), 409, "already_exists");
    assert!(err.to_string().contains("dev-box"), "{err}");
    let again = alice.create(&CreateSandbox { get_or_create: true, ..named.clone() }).unwrap();
    assert_eq!(again.id(), first.id());
    let bobs = bob.create(&named).unwrap();
    assert_ne!(bobs.id(), first.id());
    expect_error(
        alice.create(&CreateSandbox { name: Some("bad name/x".into()), ..Default::default() }),
        400,
        "invalid_request",
    );
    expect_error(alice.create(&CreateSandbox { get_or_create: true, ..Default::default() }), 400, "invalid_request");
    assert_eq!(alice.list().unwrap().len(), 1);
    // Once deleted, the name is free again.
    first.delete().unwrap();
    let reborn = alice.create(&named).unwrap();
    assert_ne!(reborn.id(), first.id());
    reborn.delete().unwrap();
    bobs.delete().unwrap();
}

/// The server's log, written to a file rather than a terminal, has no colour codes; `serve --help`
/// shows `--test-loopback-only` under a heading of its own.
#[test]
fn the_log_file_is_plain_text_and_help_names_the_testing_flag() {
    let server = Server::start();
    server.sandbox().delete().unwrap();
    let log = server.log_text();
    assert!(log.contains("sandlot listening"), "{log}");
    assert!(!log.contains('\x1b'), "{log}");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sandlot")).args(["serve", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    let section = help.split("Testing only:").nth(1).unwrap_or_else(|| panic!("{help}"));
    assert!(section.contains("--test-loopback-only"), "{help}");
}
