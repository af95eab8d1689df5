//! One sandbox's network, running in the daemon: a DNS server on the gateway address and a
//! policy-checked TCP proxy for every connection the sandbox opens, fed by the daemon's sockets inside
//! the sandbox's network namespace (the driver steers all of the sandbox's traffic to them).

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use serde::Serialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, Interest};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::dns::{self, Rcode};
use crate::policy::{Attempt, Decision, Policy};
use crate::sniff::{self, Sniff};

/// How long the proxy waits for a ClientHello or request head before deciding without a name.
const SNIFF_TIMEOUT: Duration = Duration::from_secs(5);
/// How long an upstream connect may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections one sandbox may have open through the proxy at once; more are reset. Each costs the
/// daemon two descriptors (and a pipe pair while bytes move), so one sandbox must not spend them all.
const MAX_CONNECTIONS: usize = 512;
/// Share of the daemon's descriptor limit that proxied connections of all sandboxes together may
/// hold: a connection costs up to four (both sockets, and a pipe pair while bytes move), so an eighth
/// of the limit in connections is at most half the descriptors, and 40 sandboxes at their own cap of
/// [`MAX_CONNECTIONS`] can no longer pin the daemon at its limit.
pub const SHARE_OF_FDS: u64 = 8;
/// Name resolutions one sandbox may have in flight (each holds a thread of the shared blocking pool).
const MAX_RESOLVING: usize = 8;
/// DNS queries one sandbox may have waiting for an answer; more get SERVFAIL at once.
const MAX_DNS_PENDING: usize = 256;
/// How long a resolved name is reused for the same sandbox.
const RESOLVE_TTL: Duration = Duration::from_secs(30);
/// Audit rows one sandbox may produce in a burst, and per second after it: a flood of lookups or
/// datagrams must not flood the audit log (what is left out is counted in a summary row).
const AUDIT_BURST: f64 = 500.0;
const AUDIT_PER_SECOND: f64 = 50.0;
/// Idle time after which a DNS-over-TCP connection is closed.
const DNS_TCP_IDLE: Duration = Duration::from_secs(10);

/// Opens upstream connections. Replaceable, so tests can prove a refused destination is never dialed.
pub trait Dial: Send + Sync {
    /// Connects to `addr` on behalf of the sandbox.
    fn dial(&self, addr: SocketAddr) -> Pin<Box<dyn Future<Output = io::Result<TcpStream>> + Send>>;
}

/// The real dialer.
pub struct TcpDialer {
    /// Refuse (and log as a bug) any destination outside loopback: the test-suite guard that a
    /// non-loopback address is never dialled.
    pub loopback_only: bool,
}

impl Dial for TcpDialer {
    fn dial(&self, addr: SocketAddr) -> Pin<Box<dyn Future<Output = io::Result<TcpStream>> + Send>> {
        let loopback_only = self.loopback_only;
        Box::pin(async move {
            if loopback_only && !addr.ip().is_loopback() {
                tracing::error!("BUG: the proxy tried to dial {addr} while --test-loopback-only is set");
                return Err(io::Error::other("non-loopback dial refused by --test-loopback-only"));
            }
            tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
                .await
                .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "upstream connect timed out"))?
        })
    }
}

/// Settings shared by every sandbox's network.
pub struct Shared {
    /// Admin name → addresses mappings (`--resolve NAME=IP`); these names may reach any address.
    pub overrides: HashMap<String, Vec<IpAddr>>,
    /// The host's own addresses and networks (always denied).
    pub host_nets: Arc<crate::policy::HostNetworks>,
    /// Upstream dialer.
    pub dialer: Arc<dyn Dial>,
    /// The sandbox side's gateway address, where DNS is answered.
    pub gateway: Ipv4Addr,
    /// TLS terminator for hosts with header rules (credential brokering).
    pub broker: Option<Arc<crate::broker::Broker>>,
    /// Connections open through the proxies of every sandbox together.
    pub open_total: Arc<std::sync::atomic::AtomicUsize>,
    /// Cap of `open_total` (see [`Shared::total_cap`]); more are reset and audited.
    pub max_open_total: usize,
}

impl Shared {
    /// The cap on proxied connections of all sandboxes together for a daemon whose descriptor limit is
    /// `fd_limit` (see [`SHARE_OF_FDS`]).
    pub fn total_cap(fd_limit: u64) -> usize {
        (fd_limit / SHARE_OF_FDS).max(64) as usize
    }
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").field("overrides", &self.overrides).field("host_nets", &self.host_nets).finish()
    }
}

/// One recorded decision (for the audit log).
#[derive(Debug, Clone, Serialize)]
pub struct NetEvent {
    /// Sandbox id.
    pub sandbox: String,
    /// `dns`, `tcp` or `udp`.
    pub kind: &'static str,
    /// Destination (`ip:port`, or the queried name for DNS).
    pub dst: String,
    /// The name involved (DNS name, SNI or Host), if any.
    pub name: Option<String>,
    /// Decision.
    #[serde(flatten)]
    pub decision: Decision,
}

/// One kind's audit budget: (tokens, last refill, decisions left out since the last summary).
type AuditBudget = (f64, tokio::time::Instant, u64);

/// Virtual addresses handed out in DNS answers (198.18.0.0/15, the benchmarking range, never routed).
///
/// Every allowed name gets its own address in the sandbox's view, so a connection says by its
/// destination alone which name it is for; the proxy dials the real address it resolved. This also
/// lets an admin map a name to a loopback or private service of the host (which the sandbox could not
/// address itself: its 127.0.0.1 is its own).
#[derive(Default)]
struct Vips {
    by_name: HashMap<String, Ipv4Addr>,
    by_vip: HashMap<Ipv4Addr, Target>,
    next: u32,
}

#[derive(Clone)]
struct Target {
    name: String,
    addrs: Vec<IpAddr>,
    admin_mapped: bool,
    /// When the address was last handed out for this name.
    since: tokio::time::Instant,
}

/// How long an answered virtual address stays bound to its name (the answers' TTL): it is not given
/// to another name before, or a client still holding the old answer would reach the new name.
const VIP_TTL: Duration = Duration::from_secs(60);

const VIP_BASE: u32 = u32::from_be_bytes([198, 18, 0, 0]);
const VIP_COUNT: u32 = 1 << 17;

impl Vips {
    /// The virtual address for `name`; `None` when every address was handed out within [`VIP_TTL`]
    /// (more than 131,070 new names a minute).
    fn assign(&mut self, name: &str, addrs: Vec<IpAddr>, admin_mapped: bool) -> Option<Ipv4Addr> {
        let target = Target { name: name.to_string(), addrs, admin_mapped, since: tokio::time::Instant::now() };
        if let Some(v) = self.by_name.get(name) {
            self.by_vip.insert(*v, target);
            return Some(*v);
        }
        // Wrap around when the pool is spent: the oldest mapping is replaced, once its answers expired
        // (a name asked again and again keeps its address; the next few are tried past it).
        let start = self.next;
        let mut vip = Ipv4Addr::from(VIP_BASE + 1 + self.next % (VIP_COUNT - 2));
        let mut tries = 0;
        while self.by_vip.get(&vip).is_some_and(|old| old.since.elapsed() < VIP_TTL) {
            tries += 1;
            if tries == 64 {
                self.next = start;
                return None;
            }
            self.next += 1;
            vip = Ipv4Addr::from(VIP_BASE + 1 + self.next % (VIP_COUNT - 2));
        }
        self.next += 1;
        if let Some(old) = self.by_vip.insert(vip, target) {
            self.by_name.remove(&old.name);
        }
        self.by_name.insert(name.to_string(), vip);
        Some(vip)
    }
}

/// One sandbox's network state.
pub struct SandboxNet {
    id: String,
    /// Shared with brokered connections, which read the current rule for every request.
    policy: Arc<RwLock<Arc<Policy>>>,
    vips: Mutex<Vips>,
    shared: Arc<Shared>,
    events: mpsc::UnboundedSender<NetEvent>,
    /// Bytes from the sandbox to the outside.
    pub bytes_out: Arc<AtomicU64>,
    /// Bytes from the outside to the sandbox.
    pub bytes_in: Arc<AtomicU64>,
    /// When a refused UDP destination was last recorded.
    udp_seen: Mutex<HashMap<SocketAddr, tokio::time::Instant>>,
    /// Idle upstream connections of brokered hosts.
    upstreams: crate::broker::UpstreamPool,
    /// Connections open through the proxy.
    open: Arc<std::sync::atomic::AtomicUsize>,
    /// DNS queries being answered.
    dns_pending: Arc<std::sync::atomic::AtomicUsize>,
    /// Resolutions in flight.
    resolving: tokio::sync::Semaphore,
    /// Recent resolutions: name → (addresses, when).
    resolved: Mutex<HashMap<String, (Vec<IpAddr>, tokio::time::Instant)>>,
    /// Audit rate limits, one per kind of decision (`dns`/`tcp`/`udp` × allowed/denied), so a flood of
    /// one kind never hides another: (tokens, last refill, decisions left out since the last summary).
    audit_budget: Mutex<HashMap<(&'static str, bool), AuditBudget>>,
}

impl SandboxNet {
    /// State for sandbox `id` with its initial policy.
    pub fn new(id: &str, policy: Policy, shared: Arc<Shared>, events: mpsc::UnboundedSender<NetEvent>) -> Arc<Self> {
        Arc::new(SandboxNet {
            id: id.to_string(),
            policy: Arc::new(RwLock::new(Arc::new(policy))),
            vips: Mutex::default(),
            shared,
            events,
            bytes_out: Default::default(),
            bytes_in: Default::default(),
            udp_seen: Mutex::default(),
            upstreams: Default::default(),
            open: Default::default(),
            dns_pending: Default::default(),
            resolving: tokio::sync::Semaphore::new(MAX_RESOLVING),
            resolved: Mutex::default(),
            audit_budget: Mutex::default(),
        })
    }

    /// Replaces the policy; it applies to new connections and lookups.
    pub fn set_policy(&self, policy: Policy) {
        *self.policy.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(policy);
    }

    fn policy(&self) -> Arc<Policy> {
        Arc::clone(&self.policy.read().unwrap_or_else(|p| p.into_inner()))
    }

    fn record(&self, kind: &'static str, dst: String, name: Option<String>, decision: Decision) {
        let left_out = {
            let mut budgets = self.audit_budget.lock().unwrap_or_else(|p| p.into_inner());
            let now = tokio::time::Instant::now();
            let b = budgets.entry((kind, decision.allow)).or_insert((AUDIT_BURST, now, 0));
            b.0 = (b.0 + now.duration_since(b.1).as_secs_f64() * AUDIT_PER_SECOND).min(AUDIT_BURST);
            b.1 = now;
            if b.0 < 1.0 {
                b.2 += 1;
                return;
            }
            b.0 -= 1.0;
            std::mem::take(&mut b.2)
        };
        if left_out > 0 {
            let what = if decision.allow { "allowed" } else { "denied" };
            let reason =
                format!("{left_out} {what} {kind} decisions were not recorded (more than {AUDIT_PER_SECOND}/s)");
            let summary = Decision { allow: decision.allow, rule: "audit-rate-limit".into(), reason };
            let _ = self.events.send(NetEvent {
                sandbox: self.id.clone(),
                kind: "audit",
                dst: "-".into(),
                name: None,
                decision: summary,
            });
        }
        let _ = self.events.send(NetEvent { sandbox: self.id.clone(), kind, dst, name, decision });
    }

    /// Serves the sandbox's traffic from the daemon's sockets in its network namespace (see
    /// [`EgressFds`]) until the returned task is aborted; aborting it also ends every connection it
    /// proxies. `keep` (the steering program's handle) lives exactly as long.
    pub fn start(
        self: &Arc<Self>,
        fds: EgressFds,
        keep: impl Send + 'static,
    ) -> io::Result<tokio::task::JoinHandle<()>> {
        let tcp4 = TcpListener::from_std(std::net::TcpListener::from(fds.tcp4))?;
        let udp4 = UdpSocket::from_std(std::net::UdpSocket::from(fds.udp4))?;
        let tcp6 = fds.tcp6.map(|fd| TcpListener::from_std(std::net::TcpListener::from(fd))).transpose()?;
        let udp6 = fds.udp6.map(|fd| UdpSocket::from_std(std::net::UdpSocket::from(fd))).transpose()?;
        let net = Arc::clone(self);
        Ok(tokio::spawn(async move {
            let _keep = keep;
            let mut conns = JoinSet::new();
            let mut udp4 = Datagrams::new(udp4);
            let mut udp6 = udp6.map(Datagrams::new);
            loop {
                tokio::select! {
                    r = tcp4.accept() => net.accepted(&mut conns, r).await,
                    Some(r) = accept_opt(tcp6.as_ref()) => net.accepted(&mut conns, r).await,
                    Some(d) = udp4.next() => net.datagram(&mut conns, &udp4.sock, d),
                    Some((sock, d)) = next_opt(udp6.as_mut()) => net.datagram(&mut conns, &sock, d),
                    Some(_) = conns.join_next(), if !conns.is_empty() => {}
                }
            }
        }))
    }

    async fn accepted(self: &Arc<Self>, conns: &mut JoinSet<()>, r: io::Result<(TcpStream, SocketAddr)>) {
        let stream = match r {
            Ok((s, _)) => s,
            Err(e) => {
                // Out of descriptors (EMFILE/ENFILE) or similar: back off instead of spinning.
                tracing::warn!(sandbox = %self.id, "accepting a sandbox connection: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                return;
            }
        };
        let Some(slot) = Slot::take(&self.open, MAX_CONNECTIONS) else {
            let dst = stream.local_addr().map(|a| unmap(a).to_string()).unwrap_or_default();
            let reason = format!("more than {MAX_CONNECTIONS} connections open at once");
            self.record("tcp", dst, None, Decision { allow: false, rule: "connection-limit".into(), reason });
            return reset(stream);
        };
        let Some(total_slot) = Slot::take(&self.shared.open_total, self.shared.max_open_total) else {
            drop(slot);
            let dst = stream.local_addr().map(|a| unmap(a).to_string()).unwrap_or_default();
            let reason = format!(
                "the server has its maximum of {} proxied connections open (all sandboxes together)",
                self.shared.max_open_total
            );
            self.record("tcp", dst, None, Decision { allow: false, rule: "server-connection-limit".into(), reason });
            return reset(stream);
        };
        let net = Arc::clone(self);
        conns.spawn(async move {
            let _slot = (slot, total_slot);
            net.tcp(stream).await;
        });
    }

    /// One UDP datagram from the sandbox: a DNS query to the gateway is answered; anything else is
    /// dropped and recorded (once a minute per destination, so a flood does not flood the audit log).
    fn datagram(self: &Arc<Self>, conns: &mut JoinSet<()>, sock: &Arc<UdpSocket>, d: Datagram) {
        if d.dst == SocketAddr::from((self.shared.gateway, 53)) {
            let reply_to = Arc::clone(sock);
            let Some(slot) = Slot::take(&self.dns_pending, MAX_DNS_PENDING) else {
                // A flood of queries (for random names, say) is answered at once instead of queued.
                if let Some(reply) = dns::parse_query(&d.payload).map(|q| dns::answer(&q, Rcode::ServFail, &[])) {
                    let _ = reply_to.try_send_to(&reply, d.src);
                }
                return;
            };
            let net = Arc::clone(self);
            conns.spawn(async move {
                let _slot = slot;
                if let Some(reply) = net.dns(&d.payload).await {
                    let _ = reply_to.send_to(&reply, d.src).await;
                }
            });
            return;
        }
        let now = tokio::time::Instant::now();
        let mut seen = self.udp_seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.len() >= 1024 {
            seen.retain(|_, t| now.duration_since(*t) < Duration::from_secs(60));
        }
        match seen.get(&d.dst) {
            Some(t) if now.duration_since(*t) < Duration::from_secs(60) => return,
            // Full of fresh destinations (a scan): recorded, subject to the audit rate limit, not kept.
            _ if seen.len() >= 1024 => {}
            _ => {
                seen.insert(d.dst, now);
            }
        }
        drop(seen);
        // No UDP leaves the sandbox: DNS tunnelling to a resolver of its choosing fails.
        self.record(
            "udp",
            d.dst.to_string(),
            None,
            Decision { allow: false, rule: "udp".into(), reason: "only DNS to the gateway is answered".into() },
        );
    }

    async fn resolve(&self, name: &str) -> Result<(Vec<IpAddr>, bool), Rcode> {
        if let Some(ips) = self.shared.overrides.get(name) {
            return Ok((ips.clone(), true));
        }
        let cached = |net: &Self| {
            let resolved = net.resolved.lock().unwrap_or_else(|p| p.into_inner());
            resolved.get(name).filter(|(_, at)| at.elapsed() < RESOLVE_TTL).map(|(ips, _)| ips.clone())
        };
        if let Some(ips) = cached(self) {
            return Ok((ips, false));
        }
        let Ok(_permit) = self.resolving.acquire().await else { return Err(Rcode::ServFail) };
        if let Some(ips) = cached(self) {
            return Ok((ips, false)); // resolved while this query waited for a permit
        }
        let ips: Vec<IpAddr> =
            match tokio::time::timeout(Duration::from_secs(5), tokio::net::lookup_host((name, 0))).await {
                Ok(Ok(addrs)) => addrs.map(|a| a.ip()).collect(),
                Ok(Err(_)) => return Err(Rcode::NxDomain),
                Err(_) => return Err(Rcode::ServFail),
            };
        let mut resolved = self.resolved.lock().unwrap_or_else(|p| p.into_inner());
        if resolved.len() >= 4096 {
            resolved.retain(|_, (_, at)| at.elapsed() < RESOLVE_TTL);
        }
        if resolved.len() < 4096 {
            resolved.insert(name.to_string(), (ips.clone(), tokio::time::Instant::now()));
        }
        Ok((ips, false))
    }

    /// Answers one DNS query (UDP or TCP payload).
    async fn dns(&self, msg: &[u8]) -> Option<Vec<u8>> {
        let Some(q) = dns::parse_query(msg) else {
            return dns::format_error(msg);
        };
        let policy = self.policy();
        let Some(rule) = policy.name_allowed(&q.name) else {
            self.record(
                "dns",
                q.name.clone(),
                Some(q.name.clone()),
                Decision { allow: false, rule: "dns".into(), reason: "name not allowed".into() },
            );
            return Some(dns::answer(&q, Rcode::NxDomain, &[]));
        };
        match self.resolve(&q.name).await {
            Ok((ips, admin_mapped)) => {
                let vip =
                    self.vips.lock().unwrap_or_else(|p| p.into_inner()).assign(&q.name, ips.clone(), admin_mapped);
                let Some(vip) = vip else {
                    let reason = "every virtual address was answered within the last minute".to_string();
                    self.record("dns", q.name.clone(), Some(q.name.clone()), Decision { allow: false, rule, reason });
                    return Some(dns::answer(&q, Rcode::ServFail, &[]));
                };
                self.record(
                    "dns",
                    q.name.clone(),
                    Some(q.name.clone()),
                    Decision { allow: true, rule, reason: format!("resolved to {ips:?}, answered {vip}") },
                );
                Some(dns::answer(&q, Rcode::NoError, &[IpAddr::V4(vip)]))
            }
            Err(rcode) => Some(dns::answer(&q, rcode, &[])),
        }
    }

    async fn dns_tcp<S: AsyncRead + AsyncWrite + Unpin>(&self, mut s: S) {
        loop {
            let mut len = [0u8; 2];
            if !matches!(tokio::time::timeout(DNS_TCP_IDLE, s.read_exact(&mut len)).await, Ok(Ok(_))) {
                return;
            }
            let n = u16::from_be_bytes(len) as usize;
            if n > 512 {
                return;
            }
            let mut msg = vec![0u8; n];
            if !matches!(tokio::time::timeout(DNS_TCP_IDLE, s.read_exact(&mut msg)).await, Ok(Ok(_))) {
                return;
            }
            let Some(reply) = self.dns(&msg).await else { return };
            let mut out = (reply.len() as u16).to_be_bytes().to_vec();
            out.extend_from_slice(&reply);
            if s.write_all(&out).await.is_err() {
                return;
            }
        }
    }

    async fn tcp(&self, mut tcp: TcpStream) {
        // The steering program delivered the connection here whatever its destination: the accepted
        // socket's local address is where the sandbox meant to go.
        let Ok(dst) = tcp.local_addr().map(unmap) else { return };
        if dst == SocketAddr::from((self.shared.gateway, 53)) {
            return self.dns_tcp(tcp).await;
        }
        // A virtual address stands for the name it was answered for; anything else is a bare IP.
        let target = match dst.ip() {
            IpAddr::V4(v4) => self.vips.lock().unwrap_or_else(|p| p.into_inner()).by_vip.get(&v4).cloned(),
            IpAddr::V6(_) => None,
        };
        let (real, names, admin_mapped) = match &target {
            Some(t) => match t.addrs.first() {
                Some(ip) => (SocketAddr::new(*ip, dst.port()), vec![t.name.clone()], t.admin_mapped),
                None => return reset(tcp),
            },
            None => (dst, Vec::new(), false),
        };
        let _ = tcp.set_nodelay(true);
        // Read the ClientHello / request head first when the policy needs the name.
        let mut head = Vec::new();
        let mut server_name = None;
        let policy = self.policy();
        // Ports 443 and 80 are sniffed for the policy's name binding; a brokered host on any port is
        // sniffed because its requests must be rewritten. Other ports are not: a server-speaks-first
        // protocol would stall waiting for client bytes.
        let brokered = names.first().is_some_and(|n| policy.brokers(n));
        if matches!(dst.port(), 443 | 80) || brokered {
            (head, server_name) = sniff_head(&mut tcp, dst.port() == 443, SNIFF_TIMEOUT).await;
        }
        let decision = policy.decide(&Attempt {
            ip: real.ip(),
            port: real.port(),
            names: &names,
            server_name: server_name.as_deref(),
            admin_mapped,
        });
        let shown = server_name.clone().or_else(|| names.first().cloned());
        self.record("tcp", real.to_string(), shown, decision.clone());
        if !decision.allow {
            // Reset at once, so the client fails now ("connection refused" or "reset by peer").
            return reset(tcp);
        }
        // Brokered only when the sandbox reached the host through its name (the virtual address of that
        // very name): a rule's credential must never follow a Host or SNI the sandbox wrote itself to a
        // bare IP or another name's address. Such a connection goes through untouched, without it.
        let named_here = server_name.as_ref().is_some_and(|sn| names.iter().any(|n| n.eq_ignore_ascii_case(sn)));
        if let (Some(broker), Some(name), true) = (&self.shared.broker, &server_name, named_here) {
            if policy.brokers(name) {
                let dialer = Arc::clone(&self.shared.dialer);
                let tls = head.first() == Some(&22);
                // The rule is read again for every request, so a PATCH (a rotated or withdrawn
                // credential, a host no longer allowed) reaches keep-alive connections too.
                let (cell, host) = (Arc::clone(&self.policy), name.clone());
                let current = move || {
                    let policy = Arc::clone(&cell.read().unwrap_or_else(|p| p.into_inner()));
                    policy.name_allowed(&host)?;
                    Some(policy.rule_for(&host).map(|r| r.headers.clone()).unwrap_or_default())
                };
                let to = crate::broker::Brokered {
                    tls,
                    host: name.clone(),
                    addr: real,
                    rule: Arc::new(current),
                    counters: (Arc::clone(&self.bytes_out), Arc::clone(&self.bytes_in)),
                };
                let r = broker.serve(tcp, head, to, dialer, &self.upstreams).await;
                if let Err(e) = r {
                    tracing::debug!(sandbox = %self.id, "brokered connection to {name}: {e}");
                }
                return;
            }
        }
        let mut upstream = match self.shared.dialer.dial(real).await {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(sandbox = %self.id, "upstream {real}: {e}");
                return reset(tcp);
            }
        };
        let _ = upstream.set_nodelay(true);
        if upstream.write_all(&head).await.is_err() {
            return;
        }
        self.bytes_out.fetch_add(head.len() as u64, Ordering::Relaxed);
        if let Err(e) = crate::splice::bidirectional(&tcp, &upstream, &self.bytes_out, &self.bytes_in).await {
            tracing::debug!(sandbox = %self.id, "connection to {real}: {e}");
            // A failed transfer must not look complete to the sandbox (a FIN would): reset it.
            reset(tcp);
        }
    }
}

/// Reads a connection's first bytes until they name the server (TLS SNI or HTTP Host), say they never
/// will, fill [`sniff::MAX_SNIFF`], or `deadline` passes: a client that connects and sends nothing (or
/// a byte at a time) holds its slot for `deadline` at most, never for good. Returns the bytes read
/// (to forward) and the name found. `tls_port`: the port suggests TLS when nothing was read yet.
async fn sniff_head<S: AsyncRead + Unpin>(s: &mut S, tls_port: bool, deadline: Duration) -> (Vec<u8>, Option<String>) {
    let deadline = tokio::time::Instant::now() + deadline;
    let mut head = Vec::new();
    let mut buf = vec![0u8; 4096];
    loop {
        let tls = head.first().map_or(tls_port, |b| *b == 22);
        let verdict = if tls { sniff::tls_sni(&head) } else { sniff::http_host(&head) };
        match verdict {
            Sniff::Name(n) => return (head, Some(n)),
            Sniff::NoName => return (head, None),
            Sniff::NeedMore if head.len() >= sniff::MAX_SNIFF => return (head, None),
            Sniff::NeedMore => {}
        }
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => head.extend_from_slice(&buf[..n]),
            _ => return (head, None),
        }
    }
}

/// The daemon's sockets in one sandbox's network namespace, all non-blocking: the TCP listeners and
/// UDP sockets every connection and datagram of the sandbox is steered to (IPv4 and IPv6). The UDP
/// sockets must report each datagram's original destination (`IP_RECVORIGDSTADDR`), and `udp4` must be
/// bound to the gateway's port 53, so DNS replies come from where the query went.
#[derive(Debug)]
pub struct EgressFds {
    /// TCP listener, IPv4.
    pub tcp4: OwnedFd,
    /// TCP listener, IPv6 (absent on a host without IPv6).
    pub tcp6: Option<OwnedFd>,
    /// UDP, IPv4, bound to gateway:53.
    pub udp4: OwnedFd,
    /// UDP, IPv6 (absent on a host without IPv6).
    pub udp6: Option<OwnedFd>,
}

/// One of a bounded number of slots, given back when dropped (however the task holding it ends).
struct Slot(Arc<std::sync::atomic::AtomicUsize>);

impl Slot {
    fn take(count: &Arc<std::sync::atomic::AtomicUsize>, max: usize) -> Option<Slot> {
        count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1))
            .ok()
            .map(|_| Slot(Arc::clone(count)))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Accepts on an optional listener (a missing one never yields).
async fn accept_opt(l: Option<&TcpListener>) -> Option<io::Result<(TcpStream, SocketAddr)>> {
    match l {
        Some(l) => Some(l.accept().await),
        None => std::future::pending().await,
    }
}

/// The next datagram of an optional socket (a missing one never yields), with a handle to answer on.
async fn next_opt(d: Option<&mut Datagrams>) -> Option<(Arc<UdpSocket>, Datagram)> {
    match d {
        Some(d) => {
            let datagram = d.next().await?;
            Some((Arc::clone(&d.sock), datagram))
        }
        None => std::future::pending().await,
    }
}

/// Closes a sandbox connection with a reset, so its client fails at once.
fn reset(tcp: TcpStream) {
    // A zero linger time makes close send RST and discard unsent data; it never blocks (tokio's
    // set_linger is deprecated for the blocking non-zero case only).
    let abort = libc::linger { l_onoff: 1, l_linger: 0 };
    let _ = nix::sys::socket::setsockopt(&tcp, nix::sys::socket::sockopt::Linger, &abort);
    drop(tcp);
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
fn unmap(a: SocketAddr) -> SocketAddr {
    match a {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::from((v4, v6.port())),
            None => a,
        },
        v4 => v4,
    }
}

/// One datagram the sandbox sent: where from, where to, what.
struct Datagram {
    src: SocketAddr,
    dst: SocketAddr,
    payload: Vec<u8>,
}

/// A steered UDP socket read together with each datagram's original destination.
struct Datagrams {
    sock: Arc<UdpSocket>,
    buf: Vec<u8>,
}

impl Datagrams {
    fn new(sock: UdpSocket) -> Self {
        Datagrams { sock: Arc::new(sock), buf: vec![0u8; 65536] }
    }

    /// The next datagram; `None` only if the socket fails (then this arm of the loop stays idle).
    async fn next(&mut self) -> Option<Datagram> {
        loop {
            let sock = Arc::clone(&self.sock);
            let buf = &mut self.buf;
            let r = sock.async_io(Interest::READABLE, || recv_with_destination(sock.as_raw_fd(), buf)).await;
            match r {
                Ok(Some(d)) => return Some(d),
                Ok(None) => continue,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::warn!("sandbox UDP socket failed: {e}");
                    std::future::pending::<()>().await;
                }
            }
        }
    }
}

/// `recvmsg` with the `IP(V6)_ORIGDSTADDR` control message; `Ok(None)` for a datagram without one.
fn recv_with_destination(fd: std::os::fd::RawFd, buf: &mut [u8]) -> io::Result<Option<Datagram>> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags, SockaddrLike, SockaddrStorage};
    let mut iov = [std::io::IoSliceMut::new(buf)];
    let mut space = nix::cmsg_space!(libc::sockaddr_in6);
    let msg =
        recvmsg::<SockaddrStorage>(fd, &mut iov, Some(&mut space), MsgFlags::MSG_DONTWAIT).map_err(io::Error::from)?;
    let mut dst = None;
    for c in msg.cmsgs().map_err(io::Error::from)? {
        match c {
            ControlMessageOwned::Ipv4OrigDstAddr(sin) => {
                dst = Some(SocketAddr::from((
                    Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
                    u16::from_be(sin.sin_port),
                )))
            }
            ControlMessageOwned::Ipv6OrigDstAddr(sin6) => {
                dst = Some(SocketAddr::from((
                    std::net::Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                    u16::from_be(sin6.sin6_port),
                )))
            }
            _ => {}
        }
    }
    let src = msg.address.and_then(|a| match a.family() {
        Some(nix::sys::socket::AddressFamily::Inet) => a.as_sockaddr_in().map(|s| SocketAddr::from((s.ip(), s.port()))),
        Some(nix::sys::socket::AddressFamily::Inet6) => {
            a.as_sockaddr_in6().map(|s| SocketAddr::from((s.ip(), s.port())))
        }
        _ => None,
    });
    let n = msg.bytes;
    Ok(match (src, dst) {
        (Some(src), Some(dst)) => Some(Datagram { src, dst: unmap(dst), payload: buf[..n].to_vec() }),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_connection_that_never_sends_its_head_is_decided_at_the_sniff_deadline() {
        // The sandbox side connects and sends two bytes of a ClientHello, then nothing.
        let (mut sandbox, mut proxy) = tokio::io::duplex(1024);
        sandbox.write_all(&[22, 3]).await.unwrap();
        let t0 = tokio::time::Instant::now();
        let sniffed =
            tokio::time::timeout(Duration::from_secs(5), sniff_head(&mut proxy, true, Duration::from_millis(300)))
                .await
                .expect("the sniff phase outlived its deadline");
        assert_eq!(sniffed, (vec![22, 3], None));
        assert!(t0.elapsed() >= Duration::from_millis(300), "decided before the deadline: {:?}", t0.elapsed());
        // The real deadline is short: a stalled client holds its slot for seconds, not for good.
        assert_eq!(SNIFF_TIMEOUT, Duration::from_secs(5));
        drop(sandbox);
    }

    #[tokio::test]
    async fn a_connection_over_the_servers_total_cap_is_reset_and_audited() {
        let shared = Arc::new(Shared {
            overrides: HashMap::new(),
            host_nets: Default::default(),
            dialer: Arc::new(TcpDialer { loopback_only: true }),
            gateway: Ipv4Addr::new(10, 0, 0, 1),
            broker: None,
            // Another sandbox holds the server's only place.
            open_total: Arc::new(std::sync::atomic::AtomicUsize::new(1)),
            max_open_total: 1,
        });
        let (tx, mut rx) = mpsc::unbounded_channel();
        let policy = Policy::compile(&Default::default(), &crate::policy::HostNetworks::of(&[]), &[]).unwrap();
        let net = SandboxNet::new("sb_test", policy, Arc::clone(&shared), tx);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let mut conns = JoinSet::new();
        net.accepted(&mut conns, listener.accept().await).await;
        assert!(conns.is_empty(), "the connection was taken on");
        let mut buf = [0u8; 1];
        let err = client.read(&mut buf).await.expect_err("the refused connection was not reset");
        assert_eq!(err.kind(), io::ErrorKind::ConnectionReset);
        let ev = rx.try_recv().expect("the refusal was not audited");
        assert_eq!((ev.kind, ev.decision.allow, ev.decision.rule.as_str()), ("tcp", false, "server-connection-limit"));
        assert!(ev.decision.reason.contains("maximum of 1 proxied connections"), "{}", ev.decision.reason);
        assert_eq!(net.open.load(Ordering::Acquire), 0, "the sandbox's own place was not given back");
        assert_eq!(shared.open_total.load(Ordering::Acquire), 1);
    }

    #[test]
    fn a_virtual_address_is_not_reused_while_its_answer_may_be_cached() {
        let mut vips = Vips::default();
        let first = vips.assign("n0.test", vec![], false).unwrap();
        assert_eq!(vips.assign("n0.test", vec![], false), Some(first), "a name keeps its address");
        for i in 1..(VIP_COUNT - 2) {
            assert!(vips.assign(&format!("n{i}.test"), vec![], false).is_some());
        }
        // The pool is spent and every address was answered just now: no address for a new name.
        assert_eq!(vips.assign("late.test", vec![], false), None);
        // Once the answers have expired, the oldest address goes to the new name.
        let past = tokio::time::Instant::now().checked_sub(VIP_TTL * 2).unwrap();
        for t in vips.by_vip.values_mut() {
            t.since = past;
        }
        assert_eq!(vips.assign("late.test", vec![], false), Some(first));
        assert!(!vips.by_name.contains_key("n0.test"));
    }
}
