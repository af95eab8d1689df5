//! TCP from the sandbox: each steered connection is checked against the policy (by its virtual
//! address's name, or the TLS SNI or HTTP Host it sends first) and then spliced to its upstream, handed
//! to the broker, or reset.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

use super::{unmap, Permit, SandboxNet};
use crate::policy::{Attempt, Decision};
use crate::sniff::{self, Sniff};
use crate::{lock, read_lock};

/// How long the proxy waits for a ClientHello or request head before deciding without a name.
const SNIFF_TIMEOUT: Duration = Duration::from_secs(5);

/// Connections one sandbox may have open through the proxy at once; more are reset. Each costs the
/// daemon two descriptors (and a pipe pair while bytes move), so one sandbox must not spend them all.
const MAX_CONNECTIONS: usize = 512;

impl SandboxNet {
    pub(super) async fn accepted(self: &Arc<Self>, conns: &mut JoinSet<()>, r: io::Result<(TcpStream, SocketAddr)>) {
        let stream = match r {
            Ok((s, _)) => s,
            Err(e) => {
                // Out of descriptors (EMFILE/ENFILE) or similar: back off instead of spinning.
                tracing::warn!(sandbox = %self.id, "accepting a sandbox connection: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                return;
            }
        };
        self.connections.fetch_add(1, Ordering::Relaxed);
        let Some(permit) = Permit::take(&self.open, MAX_CONNECTIONS) else {
            let dst = stream.local_addr().map(|a| unmap(a).to_string()).unwrap_or_default();
            let reason = format!("more than {MAX_CONNECTIONS} connections open at once");
            self.record("tcp", dst, None, Decision { allow: false, rule: "connection-limit".into(), reason });
            return reset(stream);
        };
        let Some(total_permit) = Permit::take(&self.shared.open_total, self.shared.max_open_total) else {
            drop(permit);
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
            let _permit = (permit, total_permit);
            net.tcp(stream).await;
        });
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
            IpAddr::V4(v4) => lock(&self.vips).by_vip.get(&v4).cloned(),
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
                    let policy = Arc::clone(&read_lock(&cell));
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

/// Accepts on an optional listener (a missing one never yields).
pub(super) async fn accept_opt(l: Option<&TcpListener>) -> Option<io::Result<(TcpStream, SocketAddr)>> {
    match l {
        Some(l) => Some(l.accept().await),
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

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::net::Ipv4Addr;

    use tokio::sync::mpsc;

    use super::*;
    use crate::dial::TcpDialer;
    use crate::egress::EgressShared;
    use crate::policy::Policy;

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
        let shared = Arc::new(EgressShared {
            overrides: HashMap::new(),
            host_nets: Default::default(),
            dialer: Arc::new(TcpDialer::new(true)),
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
}
