//! Credential brokering: TLS to hosts whose rule carries header transforms is terminated here with a
//! certificate from the daemon's own CA (which every sandbox trusts), each HTTP request gets the rule's
//! headers added or replaced, and it continues upstream over a fresh, verified TLS connection. The secret
//! exists only in the daemon: never in the sandbox's environment, files, DNS or responses.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::{Either as EitherBody, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderName, HeaderValue};
use hyper::Request;
use hyper_util::rt::TokioIo;
use rcgen::{BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::dial::Dial;
use crate::lock;

fn ca_params() -> CertificateParams {
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "sandlot sandbox egress CA");
    dn.push(DnType::OrganizationName, "sandlot");
    p.distinguished_name = dn;
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    p
}

fn other(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

/// The daemon's CA: made on first start, private key mode 0600 in the state directory.
pub struct Ca {
    cert_pem: String,
    cert_der: CertificateDer<'static>,
    issuer: Issuer<'static, KeyPair>,
    leaves: Mutex<HashMap<String, Arc<CertifiedKey>>>,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Ca")
    }
}

impl Ca {
    /// Loads the CA from `dir` (`ca.pem`, `ca.key`), creating it the first time.
    pub fn load_or_create(dir: &Path) -> io::Result<Ca> {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::create_dir_all(dir)?;
        let (cert_path, key_path) = (dir.join("ca.pem"), dir.join("ca.key"));
        let (cert_pem, key) = if cert_path.exists() && key_path.exists() {
            let key = KeyPair::from_pem(&std::fs::read_to_string(&key_path)?).map_err(other)?;
            (std::fs::read_to_string(&cert_path)?, key)
        } else {
            let key = KeyPair::generate().map_err(other)?;
            let cert = ca_params().self_signed(&key).map_err(other)?;
            let mut f =
                std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&key_path)?;
            std::io::Write::write_all(&mut f, key.serialize_pem().as_bytes())?;
            f.sync_all()?;
            std::fs::write(&cert_path, cert.pem())?;
            (cert.pem(), key)
        };
        let cert_der = CertificateDer::from_pem_slice(cert_pem.as_bytes()).map_err(other)?;
        // The leaves name the issuer by the same distinguished name and sign with the same key.
        let issuer = Issuer::new(ca_params(), key);
        Ok(Ca { cert_pem, cert_der, issuer, leaves: Mutex::default() })
    }

    /// The CA certificate, PEM (installed in every sandbox's trust store).
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// A server certificate for `names` (DNS names, wildcards allowed: `*.example.test`) signed by
    /// this CA, chain first, with its fresh key: for a TLS listener of the daemon's own (the E2B
    /// surface's `--e2b-tls-listen` when the admin gives no certificate).
    pub fn issue(&self, names: &[String]) -> io::Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
        let key = KeyPair::generate().map_err(other)?;
        let params = CertificateParams::new(names.to_vec()).map_err(other)?;
        let cert = params.signed_by(&key, &self.issuer).map_err(other)?;
        let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        Ok((vec![cert.der().clone(), self.cert_der.clone()], der))
    }

    fn leaf(&self, host: &str) -> Option<Arc<CertifiedKey>> {
        let mut leaves = lock(&self.leaves);
        if let Some(k) = leaves.get(host) {
            return Some(Arc::clone(k));
        }
        let key = KeyPair::generate().ok()?;
        let params = CertificateParams::new(vec![host.to_string()]).ok()?;
        let cert = params.signed_by(&key, &self.issuer).ok()?;
        let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let signer = rustls::crypto::ring::sign::any_supported_type(&der).ok()?;
        let ck = Arc::new(CertifiedKey::new(vec![cert.der().clone(), self.cert_der.clone()], signer));
        // Bounded: a sandbox allowed `*.example.com` could otherwise mint leaves without end.
        if leaves.len() >= 1024 {
            leaves.clear();
        }
        leaves.insert(host.to_string(), Arc::clone(&ck));
        Some(ck)
    }
}

#[derive(Debug)]
struct LeafResolver(Arc<Ca>);

impl ResolvesServerCert for LeafResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.0.leaf(hello.server_name()?)
    }
}

/// Where a brokered connection goes.
#[derive(Clone)]
pub struct Brokered {
    /// The sandbox speaks TLS (else plain HTTP).
    pub tls: bool,
    /// Host name (SNI / Host) it asked for.
    pub host: String,
    /// Real upstream address.
    pub addr: SocketAddr,
    /// The headers the sandbox's policy injects for the host now (read for every request, so a
    /// rotated or withdrawn credential applies to open connections too); `None` once the policy no
    /// longer allows the host.
    pub rule: Arc<dyn Fn() -> Option<std::collections::BTreeMap<String, String>> + Send + Sync>,
    /// The sandbox's byte counters (from it, to it), counted on its side of the connection.
    pub counters: (Arc<AtomicU64>, Arc<AtomicU64>),
}

/// TLS terminator and re-originator.
pub struct Broker {
    ca: Arc<Ca>,
    server: Arc<rustls::ServerConfig>,
    client: Arc<rustls::ClientConfig>,
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Broker")
    }
}

/// The system trust store of Debian/Ubuntu (and Fedora's compatible path).
const SYSTEM_ROOTS: &[&str] = &["/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt"];

impl Broker {
    /// A broker with `ca`, verifying upstreams against the system roots plus `extra_roots` PEM files.
    pub fn new(ca: Arc<Ca>, extra_roots: &[PathBuf]) -> io::Result<Broker> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut server = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(other)?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(LeafResolver(Arc::clone(&ca))));
        server.alpn_protocols = vec![b"http/1.1".to_vec()];
        let mut roots = rustls::RootCertStore::empty();
        let system = SYSTEM_ROOTS.iter().map(PathBuf::from).filter(|p| p.exists()).take(1);
        for path in system.chain(extra_roots.iter().cloned()) {
            for cert in CertificateDer::pem_file_iter(&path).map_err(|e| other(format!("{}: {e}", path.display())))? {
                let cert = cert.map_err(|e| other(format!("{}: {e}", path.display())))?;
                // Odd certificates in a system bundle are skipped, as every TLS library does.
                let _ = roots.add(cert);
            }
        }
        let mut client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(other)?
            .with_root_certificates(roots)
            .with_no_client_auth();
        client.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Broker { ca, server: Arc::new(server), client: Arc::new(client) })
    }

    /// The CA certificate, PEM.
    pub fn ca_pem(&self) -> &str {
        self.ca.cert_pem()
    }

    /// Serves one sandbox connection: HTTP over TLS (`tls`) or plain HTTP, requests forwarded to
    /// `upstream` (as `host`) with `rule`'s headers. `head` holds bytes already read from `client`.
    /// An idle upstream connection of the same sandbox is reused from `pool` when there is one, and the
    /// upstream connection is left there afterwards if it is still good for another request.
    pub async fn serve<S>(
        &self,
        client: S,
        head: Vec<u8>,
        to: Brokered,
        dialer: Arc<dyn Dial>,
        pool: &UpstreamPool,
    ) -> io::Result<()>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let Brokered { tls, host, addr: upstream, rule, counters } = to;
        let key = (tls, host.clone(), upstream);
        let client = SandboxSide { head, pos: 0, inner: client, from: counters.0, to: counters.1 };
        let t0 = std::time::Instant::now();
        let pooled = pool.take(&key);
        let reused = pooled.is_some();
        // The upstream connection and the sandbox's TLS handshake proceed together (each is a network
        // round trip or two); if the upstream fails, the sandbox gets a 502 that says why, over its
        // session, rather than a bare reset.
        let upstream_side = async {
            if let Some(sender) = pooled {
                return Ok(sender);
            }
            let tcp = dialer.dial(upstream).await?;
            let _ = tcp.set_nodelay(true);
            if tls {
                let name = ServerName::try_from(host.clone()).map_err(other)?;
                let conn = tokio_rustls::TlsConnector::from(Arc::clone(&self.client)).connect(name, tcp).await?;
                http1_client(conn).await
            } else {
                http1_client(tcp).await
            }
        };
        let http = hyper::server::conn::http1::Builder::new();
        let (sender, client) = if tls {
            let accept = tokio_rustls::TlsAcceptor::from(Arc::clone(&self.server)).accept(client);
            // A sandbox that sent its ClientHello and then stalls must not hold its connection slot.
            let accept = async {
                tokio::time::timeout(HANDSHAKE_TIMEOUT, accept).await.unwrap_or_else(|_| {
                    Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "the sandbox's TLS handshake stalled"))
                })
            };
            let (up, acc) = tokio::join!(upstream_side, accept);
            (up, Either::Tls(acc?))
        } else {
            (upstream_side.await, Either::Plain(client))
        };
        tracing::debug!(host = %host, ready = ?t0.elapsed(), reused, "brokered session up");
        let sender = match sender {
            Ok(s) => s,
            Err(e) => {
                let message = format!("sandlot: upstream {host} ({upstream}) unreachable: {e}\n");
                let bad_gateway = hyper::service::service_fn(move |_req: Request<Incoming>| {
                    let body = message.clone();
                    async move {
                        hyper::Response::builder()
                            .status(hyper::StatusCode::BAD_GATEWAY)
                            .header(hyper::header::CONNECTION, "close")
                            .body(body)
                    }
                });
                return match client {
                    Either::Tls(stream) => {
                        http.serve_connection(TokioIo::new(stream), bad_gateway).await.map_err(other)
                    }
                    Either::Plain(plain) => {
                        http.serve_connection(TokioIo::new(plain), bad_gateway).await.map_err(other)
                    }
                };
            }
        };
        let sender = Arc::new(tokio::sync::Mutex::new(sender));
        let kept = Arc::clone(&sender);
        let for_host = host.clone();
        let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
            let sender = Arc::clone(&sender);
            let rule = Arc::clone(&rule);
            // A request naming another host (Host header or absolute URI) on this connection would carry
            // this host's credential to wherever that name is served: refused, never forwarded.
            let hosts = req.headers().get_all(hyper::header::HOST).iter().count();
            let refusal = if hosts > 1 {
                // Which one an upstream (or a proxy before it) believes is anyone's guess; the review saw
                // `Host: api.test, other.test` arrive with the credential.
                Some((
                    hyper::StatusCode::BAD_REQUEST,
                    format!("sandlot: the request has {hosts} Host headers; send exactly one\n"),
                ))
            } else if !request_is_for(&req, &for_host) {
                Some((
                    hyper::StatusCode::MISDIRECTED_REQUEST,
                    format!("sandlot: this connection is for {for_host}; a request for another host needs a connection of its own\n"),
                ))
            } else {
                match rule() {
                    Some(current) => {
                        for (k, v) in &current {
                            if let (Ok(k), Ok(v)) = (HeaderName::from_bytes(k.as_bytes()), HeaderValue::from_str(v)) {
                                req.headers_mut().insert(k, v);
                            }
                        }
                        None
                    }
                    None => Some((
                        hyper::StatusCode::FORBIDDEN,
                        format!(
                            "sandlot: the sandbox's network policy no longer allows brokered requests to {for_host}\n"
                        ),
                    )),
                }
            };
            async move {
                if let Some((status, message)) = refusal {
                    let response = hyper::Response::builder()
                        .status(status)
                        .header(hyper::header::CONNECTION, "close")
                        .body(EitherBody::Right(Full::new(Bytes::from(message))))
                        .expect("a static response");
                    return Ok(response);
                }
                let mut s = sender.lock().await;
                s.ready().await?;
                s.send_request(req).await.map(|r| r.map(EitherBody::Left))
            }
        });
        let served = match client {
            Either::Tls(stream) => http.serve_connection(TokioIo::new(stream), service).await.map_err(other),
            Either::Plain(plain) => http.serve_connection(TokioIo::new(plain), service).await.map_err(other),
        };
        // Back to the pool only if no request holds it and its last exchange completed (a response the
        // sandbox stopped reading leaves the connection unusable).
        if let Ok(sender) = Arc::try_unwrap(kept).map(tokio::sync::Mutex::into_inner) {
            pool.put(key, sender);
        }
        served
    }
}

/// Whether `req` is addressed to `host`: its Host header, and its URI authority when it has one.
fn request_is_for(req: &Request<Incoming>, host: &str) -> bool {
    let want = host.trim_end_matches('.');
    let name_of = |h: &str| -> String {
        let h = match h.rsplit_once(':') {
            Some((name, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => name,
            _ => h,
        };
        h.trim_end_matches('.').to_ascii_lowercase()
    };
    if let Some(a) = req.uri().authority() {
        if !name_of(a.host()).eq_ignore_ascii_case(want) {
            return false;
        }
    }
    match req.headers().get(hyper::header::HOST).map(|v| v.to_str()) {
        Some(Ok(h)) => name_of(h).eq_ignore_ascii_case(want),
        Some(Err(_)) => false,
        None => req.uri().authority().is_some(),
    }
}

type UpstreamKey = (bool, String, SocketAddr);
type Upstream = hyper::client::conn::http1::SendRequest<Incoming>;

/// One sandbox's idle upstream connections to brokered hosts, kept briefly so that a client opening a
/// new connection per request (most scripts) does not pay a TCP and TLS handshake upstream each time.
/// Never shared between sandboxes: an upstream connection carries one sandbox's requests only.
#[derive(Default)]
pub struct UpstreamPool {
    idle: Mutex<HashMap<UpstreamKey, Vec<(std::time::Instant, Upstream)>>>,
}

/// How long the sandbox side of a brokered TLS connection may take to finish its handshake once its
/// ClientHello arrived: one round trip on a local link; 10 s allows for a loaded host.
const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// How long an idle upstream connection is reused: shorter than common server keep-alive timeouts
/// (5 s and up), so a reused connection is rarely one the server is closing.
const POOL_IDLE: std::time::Duration = std::time::Duration::from_secs(4);
/// Idle connections kept per upstream.
const POOL_PER_KEY: usize = 4;

impl UpstreamPool {
    fn take(&self, key: &UpstreamKey) -> Option<Upstream> {
        let mut idle = lock(&self.idle);
        let list = idle.get_mut(key)?;
        while let Some((since, sender)) = list.pop() {
            if since.elapsed() < POOL_IDLE && sender.is_ready() && !sender.is_closed() {
                return Some(sender);
            }
        }
        None
    }

    fn put(&self, key: UpstreamKey, sender: Upstream) {
        if !sender.is_ready() || sender.is_closed() {
            return;
        }
        let mut idle = lock(&self.idle);
        idle.retain(|_, list| {
            list.retain(|(since, s)| since.elapsed() < POOL_IDLE && !s.is_closed());
            !list.is_empty()
        });
        let list = idle.entry(key).or_default();
        if list.len() < POOL_PER_KEY {
            list.push((std::time::Instant::now(), sender));
        }
    }
}

async fn http1_client<T>(io: T) -> io::Result<hyper::client::conn::http1::SendRequest<Incoming>>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await.map_err(other)?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

enum Either<T, P> {
    Tls(T),
    Plain(P),
}

/// The sandbox's side of a brokered connection: the first bytes, already read while sniffing, are
/// replayed first, and bytes are counted into the sandbox's traffic counters both ways.
struct SandboxSide<S> {
    head: Vec<u8>,
    pos: usize,
    inner: S,
    from: Arc<AtomicU64>,
    to: Arc<AtomicU64>,
}

impl<S: AsyncRead + Unpin> AsyncRead for SandboxSide<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if self.pos < self.head.len() {
            let n = (self.head.len() - self.pos).min(buf.remaining());
            let start = self.pos;
            buf.put_slice(&self.head[start..start + n]);
            self.pos += n;
            self.from.fetch_add(n as u64, Ordering::Relaxed);
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        self.from.fetch_add(n as u64, Ordering::Relaxed);
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for SandboxSide<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, data);
        if let Poll::Ready(Ok(n)) = &r {
            self.to.fetch_add(*n as u64, Ordering::Relaxed);
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
