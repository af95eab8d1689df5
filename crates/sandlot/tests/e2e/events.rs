//! Lifecycle events and webhooks through the API: a receiver on loopback checks each request's
//! HMAC signature and timestamp, answers 500 once and sees the retry; the delivery log shows both
//! attempts; loopback targets are refused without the admin's flag; tenants see only their own.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::mpsc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sandlot_client::api::{CreateWebhook, Event, EventKind};
use sandlot_client::EventsQuery;
use sha2::{Digest, Sha256};

use crate::harness::{eventually, Server};

/// HMAC-SHA256 (RFC 2104), written out here so the test checks the server's signature with code of
/// its own.
fn hmac_sha256(key: &[u8], msg: &[u8]) -> String {
    let mut k = [0u8; 64];
    if key.len() > 64 {
        k[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let pad = |b: u8| k.iter().map(|x| x ^ b).collect::<Vec<u8>>();
    let inner = Sha256::new().chain_update(pad(0x36)).chain_update(msg).finalize();
    let outer = Sha256::new().chain_update(pad(0x5c)).chain_update(inner).finalize();
    outer.iter().map(|b| format!("{b:02x}")).collect()
}

struct Request {
    headers: Vec<(String, String)>,
    body: String,
}

impl Request {
    fn header(&self, name: &str) -> &str {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str()).unwrap_or_else(|| panic!("no {name}"))
    }
}

/// An HTTP receiver on 127.0.0.1 answering `statuses` in turn, then 200; requests arrive on the channel.
fn receiver(statuses: Vec<u16>) -> (String, mpsc::Receiver<Request>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hooks/sandlot?src=e2e", listener.local_addr().unwrap());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut statuses = statuses.into_iter();
        for conn in listener.incoming() {
            let Ok(mut s) = conn else { return };
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut buf = Vec::new();
            let mut chunk = [0u8; 8192];
            let req = loop {
                let n = match s.read(&mut chunk) {
                    Ok(0) | Err(_) => break None,
                    Ok(n) => n,
                };
                buf.extend_from_slice(&chunk[..n]);
                let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else { continue };
                let head = String::from_utf8_lossy(&buf[..end]).to_string();
                let headers: Vec<(String, String)> = head
                    .lines()
                    .skip(1)
                    .filter_map(|l| l.split_once(':'))
                    .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
                    .collect();
                let len: usize =
                    headers.iter().find(|(k, _)| k == "content-length").map_or(0, |(_, v)| v.parse().unwrap());
                if buf.len() >= end + 4 + len {
                    assert!(head.starts_with("POST /hooks/sandlot?src=e2e HTTP/1.1"), "{head}");
                    break Some(Request {
                        headers,
                        body: String::from_utf8(buf[end + 4..end + 4 + len].to_vec()).unwrap(),
                    });
                }
            };
            let Some(req) = req else { continue };
            let status = statuses.next().unwrap_or(200);
            let _ = tx.send(req);
            let _ = s.write_all(
                format!("HTTP/1.1 {status} X\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok").as_bytes(),
            );
        }
    });
    (url, rx)
}

/// Checks a request's signature and timestamp with `secret` and returns its event.
#[track_caller]
fn verified(req: &Request, secret: &str) -> Event {
    let ts = req.header("sandlot-timestamp");
    let expected = format!("v1={}", hmac_sha256(secret.as_bytes(), format!("{ts}.{}", req.body).as_bytes()));
    assert_eq!(req.header("sandlot-signature"), expected, "the signature covers timestamp and body");
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64;
    assert!((now - ts.parse::<i64>().unwrap()).abs() < 60, "the timestamp is now");
    assert_eq!(req.header("content-type"), "application/json");
    let ev: Event = serde_json::from_str(&req.body).unwrap();
    assert_eq!(req.header("sandlot-event-id"), ev.id.to_string());
    ev
}

#[test]
fn a_webhook_receives_signed_lifecycle_events_and_a_failed_delivery_is_retried_and_logged() {
    let server = Server::start_with(&["--webhook-allow-private", "--webhook-retry-base-ms", "200"]);
    let alice = server.tenant_client("alice");
    let bob = server.tenant_client("bob");
    let (url, got) = receiver(vec![500]);
    let secret = "e2e-secret-0123456789";
    let req = CreateWebhook { url: url.clone(), events: Vec::new(), secret: Some(secret.into()) };
    let hook = alice.create_webhook(&req).unwrap();
    assert!(hook.id.starts_with("wh_"));
    assert_eq!(hook.secret, None, "a secret given is never answered back");
    assert_eq!(alice.webhooks().unwrap().len(), 1);

    let sb = alice.create(&Default::default()).unwrap();
    sb.pause().unwrap();
    sb.resume().unwrap();
    sb.delete().unwrap();
    bob.create(&Default::default()).unwrap().delete().unwrap(); // not alice's: never sent to her webhook

    let mut seen = Vec::new();
    while seen.last().map(|e: &Event| e.kind) != Some(EventKind::Deleted) {
        let req = got.recv_timeout(Duration::from_secs(20)).expect("the next delivery");
        let ev = verified(&req, secret);
        assert_eq!((ev.tenant.as_str(), ev.sandbox_id.as_str()), ("alice", sb.id()));
        seen.push(ev);
    }
    use EventKind::*;
    let kinds: Vec<EventKind> = seen.iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [Created, Created, Paused, Resumed, Deleted], "the first attempt got a 500 and came again");
    assert_eq!(seen[0].id, seen[1].id, "a retry is the same event");

    // The log shows both attempts of `created`, newest first, with status and duration.
    let mut log = Vec::new();
    assert!(
        eventually(Duration::from_secs(10), || {
            log = alice.webhook_deliveries(&hook.id, None).unwrap();
            log.len() == 5
        }),
        "the log holds 5 attempts: {log:?}"
    );
    let first: Vec<_> =
        log.iter().rev().take(2).map(|d| (d.event_id, d.attempt, d.status, d.ok, d.will_retry)).collect();
    assert_eq!(first, [(seen[0].id, 1, Some(500), false, true), (seen[0].id, 2, Some(200), true, false)]);

    // The events API answers the same events by cursor.
    let q = EventsQuery { sandbox_id: Some(sb.id().into()), ..Default::default() };
    let list = alice.events(&q).unwrap();
    assert_eq!(list.events.iter().map(|e| e.kind).collect::<Vec<_>>(), [Created, Paused, Resumed, Deleted]);
    assert_eq!(list.next, list.events.last().unwrap().id);
    let after = alice.events(&EventsQuery { since: list.next, ..q }).unwrap();
    assert!(after.events.is_empty());

    // Bob sees neither alice's events nor her webhook, and cannot delete it.
    assert!(bob.events(&EventsQuery::default()).unwrap().events.iter().all(|e| e.tenant == "bob"));
    assert!(bob.webhooks().unwrap().is_empty());
    let bob_key = bob.api_key().to_string();
    for (method, path) in [
        ("GET", format!("/v1/webhooks/{}", hook.id)),
        ("DELETE", format!("/v1/webhooks/{}", hook.id)),
        ("GET", format!("/v1/webhooks/{}/deliveries", hook.id)),
    ] {
        assert_eq!(server.raw(method, &path, Some(&bob_key), &[], b"").status, 404, "{method} {path}");
    }
    let r = server.raw("GET", "/v1/events?tenant=alice", Some(&bob_key), &[], b"");
    assert_eq!(r.status, 403, "{}", r.body);

    alice.delete_webhook(&hook.id).unwrap();
    assert!(alice.webhooks().unwrap().is_empty());
    let audit = alice.audit(None, Some(100)).unwrap();
    assert!(audit.iter().any(|e| e.action == "webhook.create") && audit.iter().any(|e| e.action == "webhook.delete"));
}

#[test]
fn webhooks_to_loopback_private_or_metadata_targets_are_refused_without_the_admins_flag() {
    let server = Server::start();
    let key = server.client().create_key("carol").unwrap().key;
    // Nothing listens on these, and nothing is sent: the refusal is at registration.
    for url in [
        "http://127.0.0.1:9/hook",
        "http://localhost:9/hook",
        "http://[::1]:9/hook",
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.1/hook",
    ] {
        let body = serde_json::json!({"url": url}).to_string();
        let r =
            server.raw("POST", "/v1/webhooks", Some(&key), &[("content-type", "application/json")], body.as_bytes());
        assert_eq!(r.status, 400, "{url}: {}", r.body);
        assert!(r.body.contains("--webhook-allow-private"), "{url}: {}", r.body);
    }
    let r = server.raw(
        "POST",
        "/v1/webhooks",
        Some(&key),
        &[("content-type", "application/json")],
        br#"{"url": "ftp://example.com/"}"#,
    );
    assert_eq!(r.status, 400, "{}", r.body);
    let r = server.raw("GET", "/v1/webhooks", Some(&key), &[], b"");
    assert_eq!(r.json()["webhooks"], serde_json::json!([]));

    // The CLI: the same refusal, then a webhook made, listed and removed (`.invalid` never resolves,
    // and carol has no sandbox: nothing is ever sent).
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_sandlot"))
            .args(args)
            .env("SANDLOT_URL", server.url())
            .env("SANDLOT_API_KEY", &key)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (code, _, err) = cli(&["webhooks", "create", "http://127.0.0.1:9/hook"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("--webhook-allow-private"), "{err}");
    let (code, id, err) = cli(&["webhooks", "create", "https://hooks.invalid/sandlot", "--events", "created,oom"]);
    assert_eq!(code, Some(0), "{err}");
    let id = id.trim().to_string();
    assert!(id.starts_with("wh_") && err.contains("whsec_"), "the made secret is shown once: {err}");
    let (_, out, _) = cli(&["webhooks", "ls", "--json"]);
    let list: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(list["webhooks"][0]["events"], serde_json::json!(["created", "oom"]));
    assert!(list["webhooks"][0].get("secret").is_none(), "{list}");
    let (_, out, _) = cli(&["webhooks", "deliveries", &id, "--json"]);
    assert_eq!(serde_json::from_str::<serde_json::Value>(&out).unwrap()["deliveries"], serde_json::json!([]));
    assert_eq!(cli(&["webhooks", "rm", &id]).0, Some(0));
    let (_, out, _) = cli(&["events", "--json"]);
    assert_eq!(serde_json::from_str::<serde_json::Value>(&out).unwrap()["events"], serde_json::json!([]));
    let (code, _, err) = cli(&["events", "--kind", "exploded"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("unknown event kind"), "{err}");

    // `--follow` prints events as they happen, one JSON object per line.
    let mut follow = std::process::Command::new(env!("CARGO_BIN_EXE_sandlot"))
        .args(["events", "--follow", "--json"])
        .env("SANDLOT_URL", server.url())
        .env("SANDLOT_API_KEY", &key)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(follow.stdout.take().unwrap()));
    let carol = sandlot_client::Client::new(server.url(), key.clone());
    let sb = carol.create(&Default::default()).unwrap();
    sb.delete().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in lines.by_ref().take(2) {
            let _ = tx.send(line.unwrap());
        }
    });
    let kinds: Vec<String> = (0..2)
        .map(|_| {
            let line = rx.recv_timeout(Duration::from_secs(20)).expect("a followed event");
            serde_json::from_str::<Event>(&line).unwrap().kind.to_string()
        })
        .collect();
    assert_eq!(kinds, ["created", "deleted"]);
    let _ = follow.kill();
    let _ = follow.wait();
}

/// Pending deliveries live in the events table, not in memory: a daemon killed with -9 while a
/// delivery waits for its retry sends it again after the restart (with the recovery's `deleted` of
/// the ephemeral sandbox the crash ended after it).
#[test]
fn a_delivery_pending_at_a_crash_is_made_after_the_restart() {
    let server = Server::start_with(&["--webhook-allow-private", "--webhook-retry-base-ms", "600000"]);
    let key = server.client().create_key("dave").unwrap().key;
    let dave = sandlot_client::Client::new(server.url(), key.clone());
    let (url, got) = receiver(vec![503]);
    let secret = "crash-secret-0123456789";
    let hook = dave.create_webhook(&CreateWebhook { url, events: Vec::new(), secret: Some(secret.into()) }).unwrap();
    let sb = dave.create(&Default::default()).unwrap();
    let first = verified(&got.recv_timeout(Duration::from_secs(20)).expect("the first attempt"), secret);
    assert_eq!((first.kind, first.sandbox_id.as_str()), (EventKind::Created, sb.id()));
    // The retry would come in ~5-10 minutes: the daemon dies before it, once the attempt is logged.
    assert!(eventually(Duration::from_secs(10), || dave.webhook_deliveries(&hook.id, None).unwrap().len() == 1));
    let mut server = server;
    server.kill9();
    let server = Server::restart_on(server);
    let dave = sandlot_client::Client::new(server.url(), key);
    let again = verified(&got.recv_timeout(Duration::from_secs(20)).expect("the delivery after the restart"), secret);
    assert_eq!(again.id, first.id, "the event whose delivery was pending is sent again");
    let gone = verified(&got.recv_timeout(Duration::from_secs(20)).expect("the recovery's event"), secret);
    assert_eq!((gone.kind, gone.sandbox_id.as_str()), (EventKind::Deleted, sb.id()));
    assert_eq!(gone.detail["why"], "recovery");
    let mut log = Vec::new();
    assert!(
        eventually(Duration::from_secs(10), || {
            log = dave.webhook_deliveries(&hook.id, None).unwrap();
            log.len() == 3
        }),
        "{log:?}"
    );
    let rows: Vec<_> = log.iter().rev().map(|d| (d.event_id, d.status, d.ok)).collect();
    assert_eq!(rows, [(first.id, Some(503), false), (first.id, Some(200), true), (gone.id, Some(200), true)]);
}

/// A real OOM kill (a cgroup's memory limit, v1 or v2) becomes an `oom` event within seconds, and
/// the sandbox goes on running.
#[test]
fn an_oom_kill_in_a_sandbox_is_an_oom_event() {
    let server = Server::start();
    let client = server.client();
    let sb = server.create(&sandlot_client::api::CreateSandbox { memory_mb: Some(64), ..Default::default() });
    let r = sb.run(&["python3", "-c", "b = bytearray(512 << 20)"]).unwrap();
    assert_eq!(r.status, sandlot_client::api::ExitStatus::Oom, "{r:?}");
    let q = EventsQuery {
        sandbox_id: Some(sb.id().into()),
        kinds: vec![EventKind::Oom],
        wait_s: Some(10),
        ..Default::default()
    };
    let events = client.events(&q).unwrap().events;
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(events[0].detail["kills"].as_u64().unwrap() >= 1, "{:?}", events[0]);
    sb.delete().unwrap();
}
