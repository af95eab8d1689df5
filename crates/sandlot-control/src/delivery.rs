//! The webhook delivery service: POSTs each event a webhook wants to its URL, signed, with retries.
//!
//! Nothing is queued in memory. Each webhook has a cursor in the store (the last event delivered or
//! given up on); its worker reads the events after it from the `events` table, delivers them one at a
//! time in order, and moves the cursor past each one only once it is done with it. A crash or a
//! restart loses nothing: the worker of the next run starts at the cursor, and an event whose delivery
//! was in flight is sent again (delivery is at least once: receivers drop an `Sandlot-Event-Id` seen
//! before). A slow or dead receiver holds up its own webhook only: attempts in flight are bounded per
//! tenant and in all, each attempt has a timeout, and the waits between retries hold no slot.
//!
//! Each attempt resolves the URL's host, keeps only public addresses (unless the admin allows private
//! targets), and connects to one of those very addresses: no second lookup that DNS could answer
//! differently. Redirects are not followed (a 3xx is a failed delivery).

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::Rng;
use rustls::pki_types::{pem::PemObject, CertificateDer, ServerName};
use sandlot_api::{Delivery, Event, HEADER_EVENT_ID, HEADER_SIGNATURE, HEADER_TIMESTAMP};
use sandlot_store::{now_ms, EventFilter, WebhookRow};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinHandle;

use crate::{lock, Control};

/// How often the list of webhooks is read again (a create or delete also wakes the service).
const SYNC_EVERY: Duration = Duration::from_secs(5);
/// How long an idle worker waits for a new event before it looks again (whether its webhook is gone).
const IDLE_RECHECK: Duration = Duration::from_secs(5);
/// Events one read of a worker takes.
const BATCH: u32 = 64;
/// Longest wait between two attempts.
const MAX_DELAY: Duration = Duration::from_secs(3_600);

/// A webhook URL, parsed: where to connect and what to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    /// `https`.
    pub(crate) tls: bool,
    /// The host, lowercase, IPv6 without brackets.
    pub(crate) host: String,
    pub(crate) port: u16,
    /// The `Host` header: the URL's authority.
    authority: String,
    /// Path and query.
    path: String,
}

impl Target {
    pub(crate) fn parse(url: &str) -> Result<Target, String> {
        let uri: hyper::Uri = url
            .parse()
            .map_err(|e| format!("webhook URL {url:?} is not a URL of the form http(s)://host[:port]/path: {e}"))?;
        let tls = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(format!("webhook URL {url:?} must start with http:// or https://")),
        };
        let auth = uri.authority().ok_or_else(|| format!("webhook URL {url:?} has no host"))?;
        if auth.as_str().contains('@') {
            return Err(format!(
                "webhook URL {url:?} carries user info (user:password@); drop it: the receiver checks the signature instead"
            ));
        }
        let host = auth.host().trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
        if host.is_empty() {
            return Err(format!("webhook URL {url:?} has no host"));
        }
        Ok(Target {
            tls,
            port: auth.port_u16().unwrap_or(if tls { 443 } else { 80 }),
            host,
            authority: auth.as_str().to_string(),
            path: uri.path_and_query().map_or("/", |p| p.as_str()).to_string(),
        })
    }

    /// The path and query sent.
    pub(crate) fn path(&self) -> &str {
        &self.path
    }

    /// The host, if it is an IP address.
    pub(crate) fn literal_ip(&self) -> Option<IpAddr> {
        self.host.parse().ok()
    }
}

/// The TLS client settings of deliveries: the system roots and `extra_pem`.
pub(crate) fn tls_config(extra_pem: &[u8]) -> Result<Arc<rustls::ClientConfig>, String> {
    let mut roots = rustls::RootCertStore::empty();
    let system = sandlot_oci::registry::SYSTEM_ROOTS.iter().find(|p| std::path::Path::new(p).exists());
    if let Some(path) = system {
        let certs = CertificateDer::pem_file_iter(path).map_err(|e| format!("reading the system roots {path}: {e}"))?;
        for cert in certs.flatten() {
            // Odd certificates in a system bundle are skipped, as every TLS library does.
            let _ = roots.add(cert);
        }
    }
    let mut extra = 0;
    for cert in CertificateDer::pem_slice_iter(extra_pem) {
        let cert = cert.map_err(|e| format!("not valid PEM: {e}"))?;
        roots.add(cert).map_err(|e| format!("a certificate is not usable: {e}"))?;
        extra += 1;
    }
    if !extra_pem.is_empty() && extra == 0 {
        return Err("the file holds no PEM certificate".into());
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// `Sandlot-Signature`: `v1=` and the hex HMAC-SHA256, keyed by `secret`, of `"<timestamp>.<body>"`.
pub fn sign(secret: &[u8], timestamp: i64, body: &[u8]) -> String {
    let tag = crate::access::hmac_sha256(secret, &[timestamp.to_string().as_bytes(), b".", body]);
    format!("v1={}", tag.iter().map(|b| format!("{b:02x}")).collect::<String>())
}

/// The wait before attempt `attempt + 1`: `base` doubled per attempt already made, capped at an hour,
/// then between half of it and all of it at random (so receivers that failed together are not
/// retried together).
fn backoff(base_ms: u64, attempt: u32) -> Duration {
    let full = base_ms.saturating_mul(1u64 << (attempt.saturating_sub(1)).min(30)).min(MAX_DELAY.as_millis() as u64);
    let half = full / 2;
    Duration::from_millis(half + rand::thread_rng().gen_range(0..=full - half))
}

/// Why an attempt got no HTTP answer, and whether to try again.
enum Failure {
    /// A connection error or timeout: retried.
    Retry(String),
    /// A target this server does not call: not retried.
    Refused(String),
}

/// What the workers share.
struct Sender {
    control: Arc<Control>,
    tls: tokio_rustls::TlsConnector,
    /// Attempts in flight, every tenant together.
    global: Arc<Semaphore>,
    /// Attempts in flight per tenant.
    tenants: Mutex<HashMap<String, Arc<Semaphore>>>,
}

impl Sender {
    fn tenant_gate(&self, tenant: &str) -> Arc<Semaphore> {
        let n = self.control.cfg.events.webhook_tenant_concurrency;
        Arc::clone(lock(&self.tenants).entry(tenant.to_string()).or_insert_with(|| Arc::new(Semaphore::new(n))))
    }

    /// One POST of `body`: the receiver's status, or why there was none.
    async fn attempt(&self, hook: &WebhookRow, target: &Target, event_id: i64, body: &str) -> Result<u16, Failure> {
        // A name that does not resolve and one that resolves only to addresses this server refuses get
        // one message, and are both retried: told apart, they would let a tenant map internal DNS.
        let unreachable = || {
            Failure::Retry(format!(
                "{} resolves to no address this server calls (it does not resolve, or only to loopback, \
                 private or link-local targets, the server's own addresses, on-link networks or gateways; an \
                 admin can allow those with --webhook-allow-private)",
                target.host
            ))
        };
        let addrs: Vec<std::net::SocketAddr> = match tokio::net::lookup_host((target.host.as_str(), target.port)).await
        {
            Ok(addrs) => addrs.collect(),
            Err(_) => return Err(unreachable()),
        };
        let allow_private = self.control.cfg.events.webhook_allow_private;
        let host_net = |ip| self.control.engine.host_network_of(ip);
        let allowed: Vec<_> =
            addrs.into_iter().filter(|a| crate::webhooks::may_call(a.ip(), allow_private, &host_net)).collect();
        if allowed.is_empty() {
            return Err(unreachable());
        }
        let mut last = String::new();
        let mut tcp = None;
        for addr in &allowed {
            match tokio::net::TcpStream::connect(addr).await {
                Ok(s) => {
                    tcp = Some(s);
                    break;
                }
                Err(e) => last = format!("connecting to {}:{}: {e}", target.host, target.port),
            }
        }
        let tcp = tcp.ok_or(Failure::Retry(last))?;
        let _ = tcp.set_nodelay(true);
        let timestamp = now_ms() / 1000;
        let request = hyper::Request::post(target.path.as_str())
            .header(hyper::header::HOST, target.authority.as_str())
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .header(hyper::header::USER_AGENT, concat!("sandlot-webhook/", env!("CARGO_PKG_VERSION")))
            .header(hyper::header::CONNECTION, "close")
            .header(HEADER_EVENT_ID, event_id.to_string())
            .header(HEADER_TIMESTAMP, timestamp.to_string())
            .header(HEADER_SIGNATURE, sign(hook.secret.as_bytes(), timestamp, body.as_bytes()))
            .body(body.to_string())
            .map_err(|e| Failure::Refused(format!("building the request: {e}")))?;
        if target.tls {
            let name = ServerName::try_from(target.host.clone())
                .map_err(|e| Failure::Refused(format!("{:?} is not a TLS server name: {e}", target.host)))?;
            let stream = self
                .tls
                .connect(name, tcp)
                .await
                .map_err(|e| Failure::Retry(format!("TLS with {}: {e}", target.host)))?;
            send(stream, request).await
        } else {
            send(tcp, request).await
        }
    }

    /// Delivers `ev` to `hook` with retries, logging each attempt.
    async fn deliver(&self, hook: &WebhookRow, target: &Target, ev: &Event) {
        let cfg = &self.control.cfg.events;
        let body = match serde_json::to_string(ev) {
            Ok(b) => b,
            Err(e) => return tracing::error!("event {} does not serialise: {e}", ev.id),
        };
        let timeout = Duration::from_millis(cfg.webhook_timeout_ms);
        for attempt in 1..=cfg.webhook_attempts {
            let tenant = self.tenant_gate(&hook.tenant);
            let Ok(_tenant_slot) = tenant.acquire_owned().await else { return };
            let Ok(_slot) = Arc::clone(&self.global).acquire_owned().await else { return };
            let (at_ms, t0) = (now_ms(), Instant::now());
            let r = tokio::time::timeout(timeout, self.attempt(hook, target, ev.id, &body))
                .await
                .unwrap_or_else(|_| Err(Failure::Retry(format!("no answer within {} ms", timeout.as_millis()))));
            let duration_ms = t0.elapsed().as_millis() as u64;
            drop((_tenant_slot, _slot));
            let (status, error, retryable) = match r {
                Ok(code) => (Some(code), None, code >= 500 || code == 429 || code == 408),
                Err(Failure::Retry(e)) => (None, Some(e), true),
                Err(Failure::Refused(e)) => (None, Some(e), false),
            };
            let ok = status.is_some_and(|c| (200..300).contains(&c));
            let will_retry = !ok && retryable && attempt < cfg.webhook_attempts;
            let d =
                Delivery { event_id: ev.id, kind: ev.kind, attempt, at_ms, status, error, duration_ms, ok, will_retry };
            match self.control.store.record_delivery(&hook.id, &d, crate::events::DELIVERIES_KEPT) {
                Ok(true) => {}
                Ok(false) => return, // deleted during the attempt
                Err(e) => tracing::error!(webhook = %hook.id, "logging a delivery: {e}"),
            }
            if !will_retry {
                if !ok {
                    tracing::warn!(webhook = %hook.id, event = ev.id, "gave up after {attempt} attempt(s): {:?} {:?}", d.status, d.error);
                }
                return;
            }
            tokio::time::sleep(backoff(cfg.webhook_base_delay_ms, attempt)).await;
            if matches!(self.control.store.get_webhook(None, &hook.id), Ok(None)) {
                return; // deleted while waiting
            }
        }
    }
}

/// Sends `request` on `io` and answers the status; the body is not read (the connection closes).
async fn send<T>(io: T, request: hyper::Request<String>) -> Result<u16, Failure>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(io))
        .await
        .map_err(|e| Failure::Retry(format!("HTTP handshake: {e}")))?;
    tokio::pin!(conn);
    let send = sender.send_request(request);
    tokio::pin!(send);
    let answer = tokio::select! {
        biased;
        r = &mut send => r,
        // The connection may end (the receiver answered and closed it) before the answer is taken:
        // the answer is then waiting, or the request failed.
        c = &mut conn => match c {
            Ok(()) => send.await,
            Err(e) => return Err(Failure::Retry(format!("the connection failed: {e}"))),
        },
    };
    answer.map(|r| r.status().as_u16()).map_err(|e| Failure::Retry(format!("sending the request: {e}")))
}

/// One webhook's deliveries, in event order, until it is deleted (or the service ends).
async fn worker(sender: Arc<Sender>, id: String) {
    let control = Arc::clone(&sender.control);
    let store = &control.store;
    let mut latest = control.events.latest.subscribe();
    loop {
        let hook = match store.get_webhook(None, &id) {
            Ok(Some(h)) => h,
            Ok(None) => return,
            Err(e) => {
                tracing::error!(webhook = %id, "reading the webhook: {e}");
                tokio::time::sleep(IDLE_RECHECK).await;
                continue;
            }
        };
        let Ok(target) = Target::parse(&hook.url) else {
            return tracing::error!(webhook = %id, "stored URL {:?} does not parse; nothing is delivered", hook.url);
        };
        // Read first: every event up to it is committed, so an empty read below may skip to it. The
        // store blocks: off the runtime's workers.
        let (c, tenant, kinds, cursor) = (Arc::clone(&control), hook.tenant.clone(), hook.kinds.clone(), hook.cursor);
        let read = tokio::task::spawn_blocking(move || {
            let upto = c.store.last_event_id();
            let filter = EventFilter { tenant: Some(&tenant), sandbox_id: None, kinds: &kinds };
            (upto, c.store.list_events(&filter, cursor, BATCH))
        })
        .await;
        let (upto, page) = match read {
            Ok((upto, Ok(p))) => (upto, p),
            Ok((_, Err(e))) => {
                tracing::error!(webhook = %id, "reading events: {e}");
                tokio::time::sleep(IDLE_RECHECK).await;
                continue;
            }
            Err(e) => {
                tracing::error!(webhook = %id, "reading events: {e}");
                tokio::time::sleep(IDLE_RECHECK).await;
                continue;
            }
        };
        if page.events.is_empty() {
            // Past the events of other tenants and kinds, so the next read starts after them.
            let next = page.next(hook.cursor, upto.unwrap_or(hook.cursor));
            if next > hook.cursor {
                let _ = store.advance_webhook(&id, next);
            }
            if page.scanned_to.is_none() {
                let _ = tokio::time::timeout(IDLE_RECHECK, latest.changed()).await;
            }
            continue;
        }
        let batch = page.events;
        for ev in batch {
            sender.deliver(&hook, &target, &ev).await;
            match store.advance_webhook(&id, ev.id) {
                Ok(true) => {}
                Ok(false) => return, // deleted
                Err(e) => {
                    tracing::error!(webhook = %id, "moving the cursor: {e}");
                    break;
                }
            }
        }
    }
}

/// Runs a worker per webhook until `shutdown`; deliveries in flight then are abandoned, and made
/// again by the next run (their events are still after the cursor).
pub(crate) async fn webhook_service(control: Arc<Control>, mut shutdown: watch::Receiver<bool>) {
    let tls = match tls_config(&control.cfg.events.webhook_extra_roots_pem) {
        Ok(t) => t,
        Err(e) => return tracing::error!("webhooks are not delivered: TLS set-up: {e}"),
    };
    let cfg = &control.cfg.events;
    let sender = Arc::new(Sender {
        control: Arc::clone(&control),
        tls: tokio_rustls::TlsConnector::from(tls),
        global: Arc::new(Semaphore::new(cfg.webhook_concurrency)),
        tenants: Mutex::default(),
    });
    let mut workers: HashMap<String, JoinHandle<()>> = HashMap::new();
    loop {
        match control.store.list_webhooks(None) {
            Ok(hooks) => {
                let ids: HashSet<&str> = hooks.iter().map(|h| h.id.as_str()).collect();
                workers.retain(|id, w| {
                    let keep = ids.contains(id.as_str()) && !w.is_finished();
                    if !keep {
                        w.abort();
                    }
                    keep
                });
                for h in &hooks {
                    if !workers.contains_key(&h.id) {
                        let w = tokio::spawn(worker(Arc::clone(&sender), h.id.clone()));
                        workers.insert(h.id.clone(), w);
                    }
                }
            }
            Err(e) => tracing::error!("reading the webhooks: {e}"),
        }
        tokio::select! {
            _ = tokio::time::sleep(SYNC_EVERY) => {}
            _ = control.events.hooks_changed.notified() => {}
            _ = shutdown.changed() => break,
        }
    }
    for (_, w) in workers {
        w.abort();
        let _ = w.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_the_hmac_of_timestamp_dot_body() {
        // Python: hmac.new(b"whsec_test_secret_0123", b'1700000000.{"id":1}', hashlib.sha256).hexdigest()
        assert_eq!(
            sign(b"whsec_test_secret_0123", 1_700_000_000, br#"{"id":1}"#),
            "v1=b359aca471a76d908e046c23b6367555fdb372fb6e4cbf8d14568613b79a2c89"
        );
    }

    #[test]
    fn waits_double_with_jitter_and_are_capped() {
        for _ in 0..50 {
            let d = backoff(1000, 1).as_millis();
            assert!((500..=1000).contains(&d), "{d}");
            let d = backoff(1000, 4).as_millis();
            assert!((4000..=8000).contains(&d), "{d}");
            assert!(backoff(1000, 30) <= MAX_DELAY);
        }
    }

    #[test]
    fn urls_parse_to_where_to_connect_and_what_to_send() {
        let t = Target::parse("https://Hooks.Example.com/in?x=1").unwrap();
        assert_eq!((t.tls, t.host.as_str(), t.port, t.path.as_str()), (true, "hooks.example.com", 443, "/in?x=1"));
        let t = Target::parse("http://[::1]:9000").unwrap();
        assert_eq!((t.host.as_str(), t.port, t.path.as_str(), t.authority.as_str()), ("::1", 9000, "/", "[::1]:9000"));
        assert_eq!(t.literal_ip(), Some("::1".parse().unwrap()));
    }
}
