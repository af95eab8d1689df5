//! One sandbox's network, running in the daemon: a DNS server on the gateway address and a
//! policy-checked TCP proxy for every connection the sandbox opens, fed by the daemon's sockets inside
//! the sandbox's network namespace (the driver steers all of the sandbox's traffic to them).
//!
//! Split by what each part handles: `tcp` (connections: policy, sniffing, splicing, brokering),
//! `udp` (datagrams), `lookup` (the gateway's DNS server) and `vips` (the virtual addresses DNS
//! answers with); this module holds the per-sandbox state they share and the loop that feeds them.

mod lookup;
mod tcp;
mod udp;
mod vips;

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use serde::Serialize;
use tokio::net::{TcpListener, UdpSocket};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

pub use crate::dial::{Dial, TcpDialer};
use crate::policy::{Decision, Policy};
use crate::{lock, read_lock, write_lock};
use tcp::accept_opt;
use udp::{next_opt, Datagrams};
use vips::Vips;

/// Share of the daemon's descriptor limit that proxied connections of all sandboxes together may
/// hold: a connection costs up to four (both sockets, and a pipe pair while bytes move), so an eighth
/// of the limit in connections is at most half the descriptors, and 40 sandboxes at their own cap of
/// 512 connections (see the `tcp` module) can no longer pin the daemon at its limit.
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

/// What every sandbox's egress shares: the host's settings (overrides, host networks, dialer, gateway,
/// broker) and the count of connections open through all of them.
pub struct EgressShared {
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
    /// Cap of `open_total` (see [`EgressShared::total_cap`]); more are reset and audited.
    pub max_open_total: usize,
}

impl EgressShared {
    /// The cap on proxied connections of all sandboxes together for a daemon whose descriptor limit is
    /// `fd_limit` (see [`SHARE_OF_FDS`]).
    pub fn total_cap(fd_limit: u64) -> usize {
        (fd_limit / SHARE_OF_FDS).max(64) as usize
    }
}

impl std::fmt::Debug for EgressShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EgressShared").field("overrides", &self.overrides).field("host_nets", &self.host_nets).finish()
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

/// One sandbox's network state.
pub struct SandboxNet {
    id: String,
    /// Shared with brokered connections, which read the current rule for every request.
    policy: Arc<RwLock<Arc<Policy>>>,
    vips: Mutex<Vips>,
    shared: Arc<EgressShared>,
    events: mpsc::UnboundedSender<NetEvent>,
    /// Bytes from the sandbox to the outside.
    pub bytes_out: Arc<AtomicU64>,
    /// Bytes from the outside to the sandbox.
    pub bytes_in: Arc<AtomicU64>,
    /// TCP connections the sandbox has opened through the proxy (allowed or not).
    pub connections: AtomicU64,
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
    pub fn new(
        id: &str,
        policy: Policy,
        shared: Arc<EgressShared>,
        events: mpsc::UnboundedSender<NetEvent>,
    ) -> Arc<Self> {
        Arc::new(SandboxNet {
            id: id.to_string(),
            policy: Arc::new(RwLock::new(Arc::new(policy))),
            vips: Mutex::default(),
            shared,
            events,
            bytes_out: Default::default(),
            bytes_in: Default::default(),
            connections: Default::default(),
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
        *write_lock(&self.policy) = Arc::new(policy);
    }

    /// TCP connections open through the proxy now.
    pub fn connections_open(&self) -> u64 {
        self.open.load(Ordering::Relaxed) as u64
    }

    fn policy(&self) -> Arc<Policy> {
        Arc::clone(&read_lock(&self.policy))
    }

    fn record(&self, kind: &'static str, dst: String, name: Option<String>, decision: Decision) {
        let left_out = {
            let mut budgets = lock(&self.audit_budget);
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

    /// Serves the sandbox's traffic until the returned task is aborted; aborting it also ends every
    /// connection it proxies. `keep` (the steering program's handle) lives exactly as long.
    ///
    /// The sockets are the daemon's in the sandbox's network namespace, every connection and datagram
    /// of the sandbox steered to them, all non-blocking: a TCP listener and a UDP socket for IPv4 and,
    /// on a host with IPv6, for IPv6. The UDP sockets must report each datagram's original destination
    /// (`IP_RECVORIGDSTADDR`), and `udp4` must be bound to the gateway's port 53, so DNS replies come
    /// from where the query went. The driver makes them (`sandlot_linux::net::attach_egress`); they
    /// come as std sockets so this crate names nothing of the driver's.
    pub fn start(
        self: &Arc<Self>,
        tcp4: std::net::TcpListener,
        tcp6: Option<std::net::TcpListener>,
        udp4: std::net::UdpSocket,
        udp6: Option<std::net::UdpSocket>,
        keep: impl Send + 'static,
    ) -> io::Result<tokio::task::JoinHandle<()>> {
        let tcp4 = TcpListener::from_std(tcp4)?;
        let udp4 = UdpSocket::from_std(udp4)?;
        let tcp6 = tcp6.map(TcpListener::from_std).transpose()?;
        let udp6 = udp6.map(UdpSocket::from_std).transpose()?;
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
}

/// One of a bounded number of permits, given back when dropped (however the task holding it ends).
struct Permit(Arc<std::sync::atomic::AtomicUsize>);

impl Permit {
    fn take(count: &Arc<std::sync::atomic::AtomicUsize>, max: usize) -> Option<Permit> {
        count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1))
            .ok()
            .map(|_| Permit(Arc::clone(count)))
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
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
