//! Lifecycle events emitted where each transition happens, read by cursor per tenant, pruned; and
//! webhooks delivered, signed, retried and logged, to a receiver on loopback.

use std::time::Duration;

use sandlot_api::{CreateSandbox, CreateWebhook, EventKind, SandboxState, TimeoutAction};
use sandlot_store::now_ms;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{harness, harness_with, test_config, Harness, HOST};
use crate::events::{EventQuery, EventsConfig};
use crate::{Caller, Config, Kind};

impl Harness {
    async fn kinds_of(&self, id: &str) -> Vec<EventKind> {
        let q = EventQuery { sandbox_id: Some(id.into()), limit: Some(1000), ..Default::default() };
        self.control.events(&self.alice, q).await.unwrap().events.into_iter().map(|e| e.kind).collect()
    }
}

#[tokio::test]
async fn every_transition_emits_its_event_in_order() {
    let h = harness();
    let id = h.persistent().await;
    h.control.pause_sandbox(&h.alice, &id).await.unwrap();
    h.control.pause_sandbox(&h.alice, &id).await.unwrap(); // already paused: no second event
    h.control.resume_sandbox(&h.alice, &id).await.unwrap();
    h.control.stop_sandbox(&h.alice, &id).await.unwrap();
    h.control.resume_sandbox(&h.alice, &id).await.unwrap();
    h.driver.oom_kill(&id);
    h.driver.oom_kill(&id);
    h.control.check_ooms();
    h.control.check_ooms(); // no new kill: no new event
    h.control.delete(&h.alice, &id).await.unwrap();
    use EventKind::*;
    assert_eq!(h.kinds_of(&id).await, [Created, Paused, Resumed, Stopped, Started, Oom, Deleted]);
    let q = EventQuery { sandbox_id: Some(id.clone()), kind: Some("oom,started".into()), ..Default::default() };
    let evs = h.control.events(&h.alice, q).await.unwrap().events;
    assert_eq!(evs[0].kind, Started);
    assert_eq!((evs[1].detail["kills"].as_u64(), evs[1].detail["total"].as_u64()), (Some(2), Some(2)));
    assert!(evs.iter().all(|e| e.tenant == "alice" && e.sandbox_id == id));
}

#[tokio::test]
async fn expiry_failures_and_deaths_emit_their_events() {
    let h = harness();
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let _services = h.control.start_services(rx);
    // Expired: what on_timeout did, then `expired` with why.
    let id = h
        .create(CreateSandbox { timeout_s: Some(60), on_timeout: Some(TimeoutAction::Stop), ..Default::default() })
        .await;
    h.control.expire_due(now_ms() + 61_000).await;
    assert_eq!(h.kinds_of(&id).await, [EventKind::Created, EventKind::Stopped, EventKind::Expired]);
    let q = EventQuery { sandbox_id: Some(id.clone()), kind: Some("expired".into()), ..Default::default() };
    let ev = &h.control.events(&h.alice, q).await.unwrap().events[0];
    assert_eq!(ev.detail["action"], "stop");
    assert!(ev.detail["why"].as_str().unwrap().contains("lifetime"), "{}", ev.detail);
    // A create that fails.
    h.driver.fail_next_launch("no room on the fake host");
    h.control.create(&h.alice, CreateSandbox::default()).await.unwrap_err();
    let q = EventQuery { kind: Some("failed".into()), ..Default::default() };
    let failed = h.control.events(&h.alice, q).await.unwrap().events;
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].detail["during"], "create");
    // A supervisor that dies.
    let id = h.sandbox().await;
    assert!(h.driver.crash(&id));
    h.until(&id, SandboxState::Failed).await;
    assert_eq!(h.kinds_of(&id).await, [EventKind::Created, EventKind::Failed]);
}

#[tokio::test]
async fn events_page_by_cursor_and_each_tenant_sees_its_own() {
    let h = harness();
    let a = h.sandbox().await;
    let b = h.control.create(&h.bob, CreateSandbox::default()).await.unwrap().info.id;
    h.control.delete(&h.alice, &a).await.unwrap();
    let page = h.control.events(&h.alice, EventQuery { limit: Some(1), ..Default::default() }).await.unwrap();
    assert_eq!(page.events.len(), 1);
    assert_eq!(page.events[0].kind, EventKind::Created);
    let rest = h.control.events(&h.alice, EventQuery { since: Some(page.next), ..Default::default() }).await.unwrap();
    assert_eq!(rest.events.iter().map(|e| e.kind).collect::<Vec<_>>(), [EventKind::Deleted]);
    let empty = h.control.events(&h.alice, EventQuery { since: Some(rest.next), ..Default::default() }).await.unwrap();
    assert!(empty.events.is_empty());
    assert_eq!(empty.next, rest.next, "nothing new: the same cursor");
    // Bob's event comes next: alice's empty read moves her cursor past it.
    let b2 = h.control.create(&h.bob, CreateSandbox::default()).await.unwrap().info.id;
    let skipped =
        h.control.events(&h.alice, EventQuery { since: Some(rest.next), ..Default::default() }).await.unwrap();
    assert!(skipped.events.is_empty());
    let bobs_last = h.control.events(&h.bob, EventQuery::default()).await.unwrap().events.pop().unwrap();
    assert_eq!((bobs_last.sandbox_id.as_str(), skipped.next), (b2.as_str(), bobs_last.id));
    // Bob sees his own only; naming alice's sandbox finds nothing; naming her tenant is refused.
    let bobs = h.control.events(&h.bob, EventQuery::default()).await.unwrap().events;
    assert!(bobs.iter().all(|e| e.sandbox_id == b || e.sandbox_id == b2));
    let q = EventQuery { sandbox_id: Some(a.clone()), ..Default::default() };
    assert!(h.control.events(&h.bob, q).await.unwrap().events.is_empty());
    let q = EventQuery { tenant: Some("alice".into()), ..Default::default() };
    assert_eq!(h.control.events(&h.bob, q).await.unwrap_err().kind, Kind::Forbidden);
    // The admin sees both, or one tenant's.
    let admin = Caller { tenant: "admin".into(), admin: true };
    assert_eq!(h.control.events(&admin, EventQuery::default()).await.unwrap().events.len(), 4);
    let q = EventQuery { tenant: Some("bob".into()), ..Default::default() };
    assert_eq!(h.control.events(&admin, q).await.unwrap().events.len(), 2);
    let q = EventQuery { kind: Some("bogus".into()), ..Default::default() };
    assert_eq!(h.control.events(&admin, q).await.unwrap_err().kind, Kind::Invalid);
}

#[tokio::test]
async fn a_read_with_wait_returns_when_an_event_comes() {
    let h = harness();
    let since = h.control.events(&h.alice, EventQuery::default()).await.unwrap().next;
    let control = std::sync::Arc::clone(&h.control);
    let alice = h.alice.clone();
    let t0 = std::time::Instant::now();
    let waiting = tokio::spawn(async move {
        control.events(&alice, EventQuery { since: Some(since), wait_s: Some(30), ..Default::default() }).await
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    h.sandbox().await;
    let got = waiting.await.unwrap().unwrap();
    assert_eq!(got.events[0].kind, EventKind::Created);
    assert!(t0.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn reads_go_a_window_at_a_time_and_a_wait_never_reads_the_same_rows_twice() {
    let h = harness();
    let n = sandlot_store::EVENTS_SCANNED_MAX + 5;
    for _ in 0..n {
        h.control.store.insert_event("alice", "sb_x", EventKind::Created, &serde_json::json!({})).unwrap();
    }
    let last = h.control.store.insert_event("bob", "sb_y", EventKind::Created, &serde_json::json!({})).unwrap();
    let failed = || EventQuery { kind: Some("failed".into()), ..Default::default() };
    // Without a wait: an empty answer whose cursor is the end of the rows looked at, then the rest.
    let first = h.control.events(&h.alice, failed()).await.unwrap();
    assert!(first.events.is_empty());
    assert_eq!(first.next, sandlot_store::EVENTS_SCANNED_MAX);
    let second = h.control.events(&h.alice, EventQuery { since: Some(first.next), ..failed() }).await.unwrap();
    assert_eq!((second.events.len() as i64, second.next), (0, last));
    // With a wait: window after window, then the wait, from the newest id looked at.
    let t0 = std::time::Instant::now();
    let waited = h.control.events(&h.alice, EventQuery { wait_s: Some(1), ..failed() }).await.unwrap();
    assert_eq!((waited.events.len(), waited.next), (0, last));
    assert!(t0.elapsed() >= Duration::from_millis(900));
}

#[tokio::test]
async fn waiting_reads_are_capped_per_tenant() {
    let h = harness();
    let held: Vec<_> = (0..crate::events::MAX_WAITERS_PER_TENANT).map(|_| h.control.waiter("alice").unwrap()).collect();
    let q = || EventQuery { wait_s: Some(30), ..Default::default() };
    let e = h.control.events(&h.alice, q()).await.unwrap_err();
    assert_eq!(e.kind, Kind::LimitReached);
    assert!(e.message.contains("without wait_s"), "{}", e.message);
    // A read without a wait, and another tenant's waits, are not held up.
    h.control.events(&h.alice, EventQuery::default()).await.unwrap();
    drop(h.control.waiter("bob").unwrap());
    drop(held);
    let control = std::sync::Arc::clone(&h.control);
    let alice = h.alice.clone();
    let waiting = tokio::spawn(async move { control.events(&alice, q()).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    h.sandbox().await;
    assert_eq!(waiting.await.unwrap().unwrap().events[0].kind, EventKind::Created, "the slots were given back");
}

#[tokio::test]
async fn webhooks_to_the_hosts_own_networks_are_refused_and_audits_keep_no_url_path() {
    let h = harness();
    // The fake host's own address and networks, as the egress proxy reads them (public ones: the
    // loopback and private ranges are refused anyway). Nothing is sent to them.
    h.driver.set_host_networks(vec![
        ("93.184.216.34".parse().unwrap(), 32),
        ("93.184.216.0".parse().unwrap(), 24),
        ("2a00:1450:4001::".parse().unwrap(), 48),
    ]);
    h.control.engine.refresh_host_networks().await.unwrap();
    let req = |url: &str| CreateWebhook { url: url.into(), ..Default::default() };
    for url in ["http://93.184.216.34:7423/metrics", "http://93.184.216.200/admin", "https://[2a00:1450:4001::9]/"] {
        let e = h.control.create_webhook(&h.alice, req(url)).unwrap_err();
        assert_eq!(e.kind, Kind::Invalid, "{url}");
        assert!(
            e.message.contains("network it is on") && e.message.contains("--webhook-allow-private"),
            "{}",
            e.message
        );
    }
    let hook =
        h.control.create_webhook(&h.alice, req("https://hooks.example.com/services/T0/B0/SECRETPATH?k=v")).unwrap();
    assert!(hook.url.contains("SECRETPATH"), "the owner still reads the URL");
    h.control.delete_webhook(&h.alice, &hook.id).unwrap();
    let rows = h.control.audit_log(&h.alice, None, Some(100)).unwrap().entries;
    let hooks: Vec<_> = rows.iter().filter(|e| e.action.starts_with("webhook.")).collect();
    assert_eq!(hooks.len(), 2);
    for e in hooks {
        let d = e.detail.to_string();
        assert!(!d.contains("SECRETPATH") && !d.contains("k=v"), "{d}");
        assert_eq!(e.detail["url"]["target"], "https://hooks.example.com:443", "{d}");
        assert_eq!(e.detail["url"]["path_sha256"].as_str().unwrap().len(), 64, "{d}");
    }
}

#[tokio::test]
async fn events_past_the_count_per_tenant_are_pruned() {
    let cfg = Config { events: EventsConfig { max_per_tenant: 2, ..Default::default() }, ..test_config() };
    let h = harness_with(cfg, HOST);
    for _ in 0..3 {
        h.sandbox().await;
    }
    h.control.create(&h.bob, CreateSandbox::default()).await.unwrap();
    h.control.prune_events();
    assert_eq!(h.control.events(&h.alice, EventQuery::default()).await.unwrap().events.len(), 2);
    assert_eq!(h.control.events(&h.bob, EventQuery::default()).await.unwrap().events.len(), 1);
}

#[tokio::test]
async fn webhooks_are_per_tenant_capped_and_refuse_private_targets_by_default() {
    let h = harness_with(
        Config { events: EventsConfig { max_webhooks_per_tenant: 1, ..Default::default() }, ..test_config() },
        HOST,
    );
    let req = |url: &str| CreateWebhook { url: url.into(), ..Default::default() };
    let e = h.control.create_webhook(&h.alice, req("http://127.0.0.1:9/hook")).unwrap_err();
    assert_eq!(e.kind, Kind::Invalid);
    assert!(e.message.contains("--webhook-allow-private"), "{}", e.message);
    let hook = h.control.create_webhook(&h.alice, req("https://hooks.example.com/x")).unwrap();
    assert!(hook.secret.as_deref().unwrap().starts_with("whsec_"), "a made secret is answered once");
    assert_eq!(h.control.get_webhook(&h.alice, &hook.id).unwrap().secret, None);
    assert_eq!(h.control.list_webhooks(&h.alice).unwrap().webhooks[0].secret, None);
    let e = h.control.create_webhook(&h.alice, req("https://hooks.example.com/y")).unwrap_err();
    assert_eq!(e.kind, Kind::LimitReached);
    let given = CreateWebhook { secret: Some("short".into()), ..req("https://hooks.example.com/z") };
    assert_eq!(h.control.create_webhook(&h.bob, given).unwrap_err().kind, Kind::Invalid);
    // Another tenant's webhook is not found, for reading, its log or deleting.
    assert_eq!(h.control.get_webhook(&h.bob, &hook.id).unwrap_err().kind, Kind::NotFound);
    assert_eq!(h.control.webhook_deliveries(&h.bob, &hook.id, None).unwrap_err().kind, Kind::NotFound);
    assert_eq!(h.control.delete_webhook(&h.bob, &hook.id).unwrap_err().kind, Kind::NotFound);
    assert!(h.control.list_webhooks(&h.bob).unwrap().webhooks.is_empty());
    h.control.delete_webhook(&h.alice, &hook.id).unwrap();
    assert_eq!(h.control.get_webhook(&h.alice, &hook.id).unwrap_err().kind, Kind::NotFound);
    let audit: Vec<String> =
        h.control.audit_log(&h.alice, None, Some(100)).unwrap().entries.into_iter().map(|e| e.action).collect();
    assert!(audit.contains(&"webhook.create".to_string()) && audit.contains(&"webhook.delete".to_string()));
}

type Got = (Vec<(String, String)>, String);

/// Reads one request off `s`, hands it over and answers `status`.
async fn answer<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    mut s: S,
    status: u16,
    tx: &tokio::sync::mpsc::UnboundedSender<Got>,
) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let (head, body) = loop {
        let n = s.read(&mut chunk).await.unwrap();
        assert!(n > 0, "the request ended early");
        buf.extend_from_slice(&chunk[..n]);
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else { continue };
        let head = String::from_utf8(buf[..end].to_vec()).unwrap();
        let len: usize = head
            .lines()
            .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap()))
            .unwrap();
        if buf.len() >= end + 4 + len {
            break (head, String::from_utf8(buf[end + 4..end + 4 + len].to_vec()).unwrap());
        }
    };
    let headers = head
        .lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let _ = tx.send((headers, body));
    let answer = format!("HTTP/1.1 {status} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
    let _ = s.write_all(answer.as_bytes()).await;
    let _ = s.shutdown().await;
}

/// A receiver on loopback that answers `statuses` in turn (then 200) and hands each request over;
/// over TLS with `tls`.
async fn receiver_with(
    statuses: Vec<u16>,
    tls: Option<tokio_rustls::TlsAcceptor>,
) -> (String, tokio::sync::mpsc::UnboundedReceiver<Got>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let scheme = if tls.is_some() { "https" } else { "http" };
    let url = format!("{scheme}://{}/hook", listener.local_addr().unwrap());
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut statuses = statuses.into_iter();
        while let Ok((s, _)) = listener.accept().await {
            match &tls {
                // A client that refuses the certificate ends the handshake: no request, no answer.
                Some(acceptor) => match acceptor.accept(s).await {
                    Ok(s) => answer(s, statuses.next().unwrap_or(200), &tx).await,
                    Err(_) => continue,
                },
                None => answer(s, statuses.next().unwrap_or(200), &tx).await,
            }
        }
    });
    (url, rx)
}

async fn receiver(statuses: Vec<u16>) -> (String, tokio::sync::mpsc::UnboundedReceiver<Got>) {
    receiver_with(statuses, None).await
}

#[tokio::test]
async fn a_webhook_gets_signed_events_and_a_failed_attempt_is_retried_and_logged() {
    let events = EventsConfig { webhook_allow_private: true, webhook_base_delay_ms: 50, ..Default::default() };
    let h = harness_with(Config { events, ..test_config() }, HOST);
    let (tx, rx) = tokio::sync::watch::channel(false);
    let services = h.control.start_services(rx);
    let (url, mut got) = receiver(vec![500]).await;
    let secret = "0123456789abcdef-secret";
    let req = CreateWebhook { url, events: vec![EventKind::Created, EventKind::Deleted], secret: Some(secret.into()) };
    let hook = h.control.create_webhook(&h.alice, req).unwrap();
    assert_eq!(hook.secret, None, "a given secret is never answered");
    let id = h.sandbox().await;
    h.control.pause_sandbox(&h.alice, &id).await.unwrap(); // not a kind it wants
    h.control.delete(&h.alice, &id).await.unwrap();
    h.control.create(&h.bob, CreateSandbox::default()).await.unwrap(); // another tenant's
    let mut seen = Vec::new();
    for _ in 0..3 {
        let (headers, body) = tokio::time::timeout(Duration::from_secs(10), got.recv()).await.unwrap().unwrap();
        let header = |k: &str| headers.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()).unwrap();
        let ts: i64 = header("sandlot-timestamp").parse().unwrap();
        assert!((now_ms() / 1000 - ts).abs() < 60);
        assert_eq!(header("sandlot-signature"), crate::delivery::sign(secret.as_bytes(), ts, body.as_bytes()));
        let ev: sandlot_api::Event = serde_json::from_str(&body).unwrap();
        assert_eq!(header("sandlot-event-id"), ev.id.to_string());
        seen.push((ev.sandbox_id, ev.kind));
    }
    // The first attempt of `created` was answered 500: it came again, then `deleted`.
    use EventKind::*;
    assert_eq!(seen, [(id.clone(), Created), (id.clone(), Created), (id.clone(), Deleted)]);
    let log = loop {
        let log = h.control.webhook_deliveries(&h.alice, &hook.id, None).unwrap().deliveries;
        if log.len() == 3 {
            break log;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let rows: Vec<_> = log.iter().rev().map(|d| (d.kind, d.attempt, d.status, d.ok, d.will_retry)).collect();
    assert_eq!(
        rows,
        [
            (Created, 1, Some(500), false, true),
            (Created, 2, Some(200), true, false),
            (Deleted, 1, Some(200), true, false)
        ]
    );
    let cursor = h.control.get_webhook(&h.alice, &hook.id).unwrap().cursor;
    assert!(cursor >= log[0].event_id, "the cursor is past what was delivered");
    assert!(tokio::time::timeout(Duration::from_millis(300), got.recv()).await.is_err(), "nothing else was sent");
    tx.send(true).unwrap();
    tokio::time::timeout(Duration::from_secs(2), services.finish()).await.expect("the delivery service ended");
}

#[tokio::test]
async fn a_dead_receiver_is_retried_a_bounded_number_of_times_then_skipped() {
    let events = EventsConfig {
        webhook_allow_private: true,
        webhook_base_delay_ms: 10,
        webhook_attempts: 3,
        webhook_timeout_ms: 500,
        ..Default::default()
    };
    let h = harness_with(Config { events, ..test_config() }, HOST);
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let _services = h.control.start_services(rx);
    // A port nothing listens on (bound, then closed).
    let port = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap().port();
    let req = CreateWebhook { url: format!("http://127.0.0.1:{port}/"), ..Default::default() };
    let hook = h.control.create_webhook(&h.alice, req).unwrap();
    h.sandbox().await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let log = loop {
        let log = h.control.webhook_deliveries(&h.alice, &hook.id, None).unwrap().deliveries;
        if log.len() >= 3 || std::time::Instant::now() > deadline {
            break log;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(log.iter().map(|d| (d.attempt, d.will_retry)).collect::<Vec<_>>(), [(3, false), (2, true), (1, true)]);
    assert!(log.iter().all(|d| d.status.is_none() && d.error.as_deref().unwrap().contains("connect")), "{log:?}");
}

/// A self-signed certificate for 127.0.0.1: its PEM and a TLS acceptor serving it.
fn tls_receiver_setup() -> (Vec<u8>, tokio_rustls::TlsAcceptor) {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap().self_signed(&key).unwrap();
    let der = rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).unwrap();
    let config =
        rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.der().clone()], der)
            .unwrap();
    (cert.pem().into_bytes(), tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config)))
}

async fn first_delivery(h: &Harness, hook: &str) -> sandlot_api::Delivery {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let log = h.control.webhook_deliveries(&h.alice, hook, None).unwrap().deliveries;
        if let Some(d) = log.into_iter().last() {
            return d;
        }
        assert!(std::time::Instant::now() < deadline, "no delivery was attempted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn an_https_webhook_is_delivered_when_its_ca_is_trusted_and_refused_when_not() {
    let (pem, acceptor) = tls_receiver_setup();
    for trusted in [true, false] {
        let events = EventsConfig {
            webhook_allow_private: true,
            webhook_attempts: 1,
            webhook_extra_roots_pem: if trusted { pem.clone() } else { Vec::new() },
            ..Default::default()
        };
        let h = harness_with(Config { events, ..test_config() }, HOST);
        let (_tx, rx) = tokio::sync::watch::channel(false);
        let _services = h.control.start_services(rx);
        let (url, mut got) = receiver_with(Vec::new(), Some(acceptor.clone())).await;
        let hook = h.control.create_webhook(&h.alice, CreateWebhook { url, ..Default::default() }).unwrap();
        h.sandbox().await;
        let d = first_delivery(&h, &hook.id).await;
        if trusted {
            assert_eq!((d.status, d.ok), (Some(200), true), "{d:?}");
            let (_, body) = got.recv().await.unwrap();
            assert!(body.contains("\"kind\":\"created\""), "{body}");
        } else {
            assert_eq!((d.status, d.ok, d.will_retry), (None, false, false), "{d:?}");
            assert!(d.error.as_deref().unwrap().contains("TLS"), "{d:?}");
            assert!(got.try_recv().is_err(), "nothing was sent to an untrusted server");
        }
    }
}
