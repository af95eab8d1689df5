//! The API listener service: accepts connections under a global and a per-peer cap and serves each
//! with a header-read deadline, which also closes idle keep-alive connections. Plain connections
//! speak HTTP/1.1; a TLS connection speaks HTTP/2 when the client offers `h2` in ALPN (the E2B SDKs
//! do, and tell a sandbox killed under a running command by the stream's reset), else HTTP/1.1.
//!
//! Without these, an unauthenticated client that opens connections and never finishes a request
//! holds a descriptor each until the daemon reaches its descriptor limit, and then nobody can use
//! the API (and no sandbox can open a file). A refused connection gets a short 503 and is closed at
//! once: the accept loop never waits on it.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

use crate::lock;

/// How long a client has to send a request's whole head (from the connection's start, or from the
/// end of the previous response on a keep-alive connection). 10 s is ample for any client on a
/// working network (a head is a few hundred bytes) and short enough that a client holding
/// connections open without sending must keep opening new ones, each under the caps below.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Requests one HTTP/2 connection may have open at once. The connection caps below count connections,
/// not requests: this bounds what one HTTP/2 connection may ask for to what a few HTTP/1.1 ones could.
const H2_MAX_STREAMS: u32 = 64;
/// How often an idle HTTP/2 connection is pinged, and how long the answer may take: a peer that
/// vanished without closing gives its connection back instead of holding it for ever.
const H2_KEEPALIVE: Duration = Duration::from_secs(20);
/// Largest header block an HTTP/2 request may send (HTTP/1.1's limit in hyper is ~16 KiB of headers
/// too, counted differently).
const H2_MAX_HEADER_LIST: u32 = 32 << 10;
/// How long, once the server is stopping, requests in flight have to finish before their connections
/// are closed. Streams (exec output, watches, envd, MCP) last as long as their clients stay and the
/// sandboxes behind them are torn down only after the listener returns: without a bound, one open
/// `watch` held a SIGTERM for as long as its client liked.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// How often refusals are logged at most: a flood must not flood the log either.
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);
/// Share of the descriptor limit the API's connections may hold by default (one descriptor each, two
/// for a port-forwarding request): an eighth leaves the rest to sandboxes, their proxied connections
/// (capped at another eighth, see `EgressShared::total_cap` in sandlot-netproxy), the database and the layers.
const DEFAULT_SHARE_OF_FDS: u64 = 8;
/// Per-peer cap by default, at most: a quarter of the global cap, so one address can never take the
/// whole API; 256 is more than any honest client (an SDK keeps a few pooled connections) needs.
const DEFAULT_PER_IP: usize = 256;

/// Connection caps.
#[derive(Debug, Clone, Copy)]
pub struct Caps {
    /// API connections open at once, all peers together.
    pub total: usize,
    /// API connections open at once from one peer address.
    pub per_ip: usize,
}

impl Caps {
    /// The caps for a daemon whose descriptor limit is `fd_limit`, unless given explicitly.
    pub fn new(fd_limit: u64, total: Option<usize>, per_ip: Option<usize>) -> Caps {
        let total = total.unwrap_or_else(|| (fd_limit / DEFAULT_SHARE_OF_FDS).max(16) as usize);
        let per_ip = per_ip.unwrap_or_else(|| (total / 4).clamp(1, DEFAULT_PER_IP));
        Caps { total, per_ip }
    }
}

/// The open connections of every listener that shares caps (the API's plain and TLS listeners):
/// the caps hold for all of them together.
#[derive(Clone, Default)]
pub struct Shared(Arc<Mutex<Open>>);

/// Open connections, in total and per peer.
#[derive(Default)]
struct Open {
    total: usize,
    per_ip: HashMap<IpAddr, usize>,
}

/// One open connection's place, given back when dropped.
struct Place {
    open: Arc<Mutex<Open>>,
    ip: IpAddr,
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut open = lock(&self.open);
        open.total -= 1;
        if let Some(n) = open.per_ip.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                open.per_ip.remove(&self.ip);
            }
        }
    }
}

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    Total,
    PerIp,
}

fn take_place(open: &Arc<Mutex<Open>>, caps: Caps, ip: IpAddr) -> Result<Place, Refusal> {
    let mut o = lock(open);
    if o.total >= caps.total {
        return Err(Refusal::Total);
    }
    let n = o.per_ip.entry(ip).or_default();
    if *n >= caps.per_ip {
        return Err(Refusal::PerIp);
    }
    *n += 1;
    o.total += 1;
    Ok(Place { open: Arc::clone(open), ip })
}

/// Counts refusals and logs them at most once per [`REFUSAL_LOG_INTERVAL`].
struct RefusalLog {
    last: Option<tokio::time::Instant>,
    total: u64,
    per_ip: u64,
}

impl RefusalLog {
    fn note(&mut self, why: Refusal, peer: SocketAddr, caps: Caps) {
        match why {
            Refusal::Total => self.total += 1,
            Refusal::PerIp => self.per_ip += 1,
        }
        let now = tokio::time::Instant::now();
        if self.last.is_some_and(|t| now.duration_since(t) < REFUSAL_LOG_INTERVAL) {
            return;
        }
        self.last = Some(now);
        tracing::warn!(
            "API connections refused since the last report: {} over the server's cap of {} open connections, \
             {} over the cap of {} per client address (latest from {peer}); raise --max-api-connections / \
             --max-api-connections-per-ip if these are honest clients",
            self.total,
            caps.total,
            self.per_ip,
            caps.per_ip
        );
        (self.total, self.per_ip) = (0, 0);
    }
}

/// Answers a refused connection with a 503 if its send buffer takes it at once, and closes it.
fn refuse(tcp: TcpStream, why: Refusal, caps: Caps) {
    let message = match why {
        Refusal::Total => format!("the server has its maximum of {} API connections open; retry shortly", caps.total),
        Refusal::PerIp => format!(
            "your address has the server's maximum of {} API connections open; close some (reuse connections) and retry",
            caps.per_ip
        ),
    };
    let body =
        serde_json::json!({"error": {"code": sandlot_api::codes::UNAVAILABLE, "message": message, "retryable": true}})
            .to_string();
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Retry-After: 1\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    // A fresh socket's send buffer is empty: this never blocks, and if it cannot write, nothing is lost.
    let _ = tcp.try_write(answer.as_bytes());
    drop(tcp);
}

/// Serves `router` on `listener` until `shutdown` completes, then lets open connections finish their
/// current request (as `axum::serve` does) within [`SHUTDOWN_GRACE`], closes the rest and returns. With `tls`, each connection is a TLS one,
/// whose handshake must end within [`HEADER_READ_TIMEOUT`] too. Listeners given the same `shared`
/// count their connections together under `caps`.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    caps: Caps,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shared: Shared,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let open = shared.0;
    let mut log = RefusalLog { last: None, total: 0, per_ip: 0 };
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut conns = JoinSet::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(HEADER_READ_TIMEOUT).keep_alive(true);
    let mut h2 = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    h2.timer(TokioTimer::new())
        .max_concurrent_streams(H2_MAX_STREAMS)
        .max_header_list_size(H2_MAX_HEADER_LIST)
        .keep_alive_interval(H2_KEEPALIVE)
        .keep_alive_timeout(H2_KEEPALIVE);
    let service = TowerToHyperService::new(router);
    tokio::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors (EMFILE/ENFILE) or similar: back off instead of spinning.
                    tracing::warn!("accepting an API connection: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
            _ = &mut shutdown => break,
        };
        let place = match take_place(&open, caps, peer.ip()) {
            Ok(p) => p,
            Err(why) => {
                log.note(why, peer, caps);
                refuse(tcp, why, caps);
                continue;
            }
        };
        // Event streams are many small writes: without TCP_NODELAY, Nagle holds each one back until
        // the client's delayed ACK (40 ms) arrives.
        let _ = tcp.set_nodelay(true);
        let (http, h2, service, stop, tls) = (http.clone(), h2.clone(), service.clone(), stop_rx.clone(), tls.clone());
        conns.spawn(async move {
            let _place = place;
            match tls {
                None => serve_connection(&http, TokioIo::new(tcp), service, stop, peer).await,
                Some(acceptor) => match tokio::time::timeout(HEADER_READ_TIMEOUT, acceptor.accept(tcp)).await {
                    Ok(Ok(stream)) if stream.get_ref().1.alpn_protocol() == Some(b"h2") => {
                        serve_h2_connection(&h2, TokioIo::new(stream), service, stop, peer).await
                    }
                    Ok(Ok(stream)) => serve_connection(&http, TokioIo::new(stream), service, stop, peer).await,
                    Ok(Err(e)) => tracing::debug!("TLS handshake with {peer}: {e}"),
                    Err(_) => tracing::debug!("TLS handshake with {peer}: not done within {HEADER_READ_TIMEOUT:?}"),
                },
            }
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    let grace = tokio::time::sleep(SHUTDOWN_GRACE);
    tokio::pin!(grace);
    loop {
        tokio::select! {
            next = conns.join_next() => if next.is_none() { break },
            () = &mut grace => {
                tracing::info!("shutting down: closing {} API connections still open after {SHUTDOWN_GRACE:?}", conns.len());
                conns.shutdown().await;
                break;
            }
        }
    }
    Ok(())
}

/// Serves one connection until it ends, or until `stop` changes and its current request is done.
async fn serve_connection<I>(
    http: &hyper::server::conn::http1::Builder,
    io: I,
    service: TowerToHyperService<Router>,
    stop: tokio::sync::watch::Receiver<bool>,
    peer: SocketAddr,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let conn = http.serve_connection(io, service).with_upgrades();
    until_stopped(conn, |c| c.graceful_shutdown(), stop, peer).await;
}

/// [`serve_connection`] for a connection that negotiated HTTP/2: the same end on `stop` (a GOAWAY,
/// then the streams in flight finish).
async fn serve_h2_connection<I>(
    http: &hyper::server::conn::http2::Builder<TokioExecutor>,
    io: I,
    service: TowerToHyperService<Router>,
    stop: tokio::sync::watch::Receiver<bool>,
    peer: SocketAddr,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    // HTTP/2 names the host in `:authority`, which hyper puts in the URI (absolute form), not in a
    // `Host` header: the routes that route by host (previews, E2B's `PORT-ID.domain`) and build URLs
    // read `Host`, and the port proxy forwards the URI to a sandbox's HTTP/1.1 server as it is.
    let service = hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
        as_http1_request(&mut req);
        hyper::service::Service::call(&service, req)
    });
    let conn = http.serve_connection(io, service);
    until_stopped(conn, |c| c.graceful_shutdown(), stop, peer).await;
}

/// Drives connection `conn` until it ends, or until `stop` changes: then `graceful_shutdown` (HTTP/1.1:
/// close after the current response; HTTP/2: a GOAWAY) and the requests in flight finish.
async fn until_stopped<C, E>(
    conn: C,
    graceful_shutdown: impl FnOnce(std::pin::Pin<&mut C>),
    mut stop: tokio::sync::watch::Receiver<bool>,
    peer: SocketAddr,
) where
    C: std::future::Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    tokio::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => {
            if let Err(e) = r {
                tracing::debug!("API connection from {peer}: {e}");
            }
            return;
        }
        _ = stop.changed() => {}
    }
    graceful_shutdown(conn.as_mut());
    let _ = conn.await;
}

/// Makes an HTTP/2 request look as the same request over HTTP/1.1 does: a `Host` header from its
/// URI's authority (`:authority`) unless it sent one, and the URI in origin form (path and query).
fn as_http1_request<B>(req: &mut hyper::Request<B>) {
    if !req.headers().contains_key(hyper::header::HOST) {
        if let Some(value) = req.uri().authority().and_then(|a| hyper::header::HeaderValue::from_str(a.as_str()).ok()) {
            req.headers_mut().insert(hyper::header::HOST, value);
        }
    }
    if req.uri().authority().is_some() {
        let origin = req.uri().path_and_query().map_or("/", |p| p.as_str());
        if let Ok(uri) = origin.parse() {
            *req.uri_mut() = uri;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_capped_in_total_and_per_peer_and_given_back() {
        let open: Arc<Mutex<Open>> = Arc::default();
        let caps = Caps { total: 3, per_ip: 2 };
        let (a, b): (IpAddr, IpAddr) = ("127.0.0.2".parse().unwrap(), "127.0.0.3".parse().unwrap());
        let a1 = take_place(&open, caps, a).unwrap();
        let _a2 = take_place(&open, caps, a).unwrap();
        assert_eq!(take_place(&open, caps, a).err(), Some(Refusal::PerIp));
        let _b1 = take_place(&open, caps, b).unwrap();
        assert_eq!(take_place(&open, caps, b).err(), Some(Refusal::Total));
        drop(a1);
        assert!(take_place(&open, caps, b).is_ok());
    }

    #[test]
    fn an_http2_request_gets_a_host_header_and_an_origin_form_uri() {
        let mut req = hyper::Request::builder().uri("https://8080-sb_abc.e2b.test:4443/x?y").body(()).unwrap();
        as_http1_request(&mut req);
        assert_eq!(req.headers()[hyper::header::HOST], "8080-sb_abc.e2b.test:4443");
        assert_eq!(req.uri(), "/x?y");
        let mut req =
            hyper::Request::builder().uri("https://a.test").header(hyper::header::HOST, "b.test").body(()).unwrap();
        as_http1_request(&mut req);
        assert_eq!(
            (req.headers()[hyper::header::HOST].to_str().unwrap(), req.uri().to_string().as_str()),
            ("b.test", "/")
        );
        let mut req = hyper::Request::builder().uri("/only-a-path").body(()).unwrap();
        as_http1_request(&mut req);
        assert!(!req.headers().contains_key(hyper::header::HOST));
        assert_eq!(req.uri(), "/only-a-path");
    }

    #[test]
    fn default_caps_follow_the_descriptor_limit() {
        let c = Caps::new(20_000, None, None);
        assert_eq!((c.total, c.per_ip), (2_500, 256));
        let c = Caps::new(1024, None, None);
        assert_eq!((c.total, c.per_ip), (128, 32));
        let c = Caps::new(1024, Some(10), Some(50));
        assert_eq!((c.total, c.per_ip), (10, 50));
    }
}
